package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/agentstream/agentstream/client"
	"github.com/agentstream/agentstream/internal/termsafe"
	"github.com/agentstream/agentstream/protocol"
)

// tailDefaultChannels are what tail follows unless --channels says.
var tailDefaultChannels = []string{"lifecycle", "messages", "tools", "input", "custom"}

// tail follows a thread in the terminal (agentstream tail URL THREAD).
func tail(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	stderr = &lockedWriter{w: stderr} // the subscription's goroutine writes to it too
	fs := flag.NewFlagSet("agentstream tail", flag.ContinueOnError)
	fs.SetOutput(stderr)
	chans := fs.String("channels", strings.Join(tailDefaultChannels, ","), "comma-separated channels to follow")
	since := fs.String("since", "", "resume after this event id (EPOCH-SEQ) or sequence number (default: everything the server still buffers)")
	asJSON := fs.Bool("json", false, "print each event's JSON as received, one per line")
	untilDone := fs.Bool("until-done", false, "exit when the thread's run ends: 0 when it completed, 1 when it failed")
	transport := fs.String("transport", "websocket", "websocket or sse")
	tokenFlag := fs.String("token", "", "a bearer token (JWT) for a server with authentication (also AGENTSTREAM_TOKEN)")
	apiKey := fs.String("api-key", "", "an API key for a server with authentication (also AGENTSTREAM_API_KEY)")
	maxMessage := fs.Int("max-message-bytes", client.DefaultMaxMessageBytes, "the most read from the server in one piece (an SSE line or event, a WebSocket message); a server that sends more ends tail with an error")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: agentstream tail URL|HOST:PORT THREAD [--channels c1,c2] [--since N] [--json] [--until-done] [--transport websocket|sse] [--token T | --api-key K]")
		fs.PrintDefaults()
	}
	// Flags may come before or after URL and THREAD.
	if err := fs.Parse(args); err != nil {
		return 2
	}
	pos := fs.Args()
	if len(pos) >= 2 {
		if err := fs.Parse(pos[2:]); err != nil {
			return 2
		}
		pos = append(pos[:2:2], fs.Args()...)
	}
	if len(pos) != 2 {
		fs.Usage()
		return 2
	}
	if !strings.Contains(pos[0], "://") {
		pos[0] = "http://" + pos[0] // host:port, as the server prints it
	}
	opts := client.Options{Transport: client.Transport(*transport), Token: envOr(*tokenFlag, "AGENTSTREAM_TOKEN"), APIKey: envOr(*apiKey, "AGENTSTREAM_API_KEY"), MaxMessageBytes: *maxMessage,
		// Say so when the server went away, and when it is back.
		OnDisconnect: func(err error) {
			fmt.Fprintln(stderr, "agentstream tail: connection lost:", termsafe.String(err.Error())+"; reconnecting")
		},
		OnReconnect: func() { fmt.Fprintln(stderr, "agentstream tail: reconnected") },
	}
	c, err := client.Dial(ctx, pos[0], opts)
	if err != nil {
		fmt.Fprintln(stderr, "agentstream tail:", termsafe.String(err.Error()))
		return 1
	}
	defer c.Close()
	f := client.Filter{Since: *since}
	for _, ch := range strings.Split(*chans, ",") {
		if ch = strings.TrimSpace(ch); ch != "" {
			f.Channels = append(f.Channels, ch)
		}
	}
	// --until-done waits for the run under way now, or the next one: never
	// an earlier run's end that the replay holds. A thread with nothing yet
	// (a new one, or a misspelled name) is said to be waiting.
	head, err := c.Thread(pos[1]).Head(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "agentstream tail:", termsafe.String(err.Error()))
		return 1
	}
	if head == 0 {
		fmt.Fprintf(stderr, "agentstream tail: thread %s has no events yet; waiting for a run\n", termsafe.String(pos[1]))
	}
	sub, err := c.Thread(pos[1]).Subscribe(ctx, f)
	if err != nil {
		fmt.Fprintln(stderr, "agentstream tail:", termsafe.String(err.Error()))
		return 1
	}
	defer sub.Close()
	p := &tailPrinter{w: stdout, a: client.NewAssembler()}
	defer p.endLine()
	for {
		e, err := sub.Next(ctx)
		if err != nil {
			if errors.Is(err, context.Canceled) || ctx.Err() != nil {
				return 0
			}
			fmt.Fprintln(stderr, "agentstream tail:", termsafe.String(err.Error()))
			return 1
		}
		if *asJSON {
			if e.JSON != nil {
				fmt.Fprintln(stdout, string(termsafe.JSON(e.JSON)))
			} else if b, err := json.Marshal(e.Payload); err == nil { // a notice the client made
				fmt.Fprintln(stdout, string(termsafe.JSON(b)))
			}
		} else {
			p.print(e)
		}
		if !*untilDone {
			continue
		}
		switch e.RunEndAfter(head) {
		case protocol.AgentStatusCompleted:
			return 0
		case protocol.AgentStatusFailed:
			return 1
		}
	}
}

// lockedWriter serializes writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

var lookupEnv = os.Getenv

func envOr(v, name string) string {
	if v != "" {
		return v
	}
	return lookupEnv(name)
}

// tailPrinter writes events as readable lines: lifecycle changes,
// messages once assembled (their text, reasoning and tool calls), tool
// runs, interrupts, custom events, and a line when events were missed.
type tailPrinter struct {
	w io.Writer
	a *client.Assembler
	// open is the message whose text line is being streamed ("" for
	// none): its text is printed as it arrives, and the line ends with the
	// message or with the next thing printed.
	open string
	// printed counts the bytes of each open message's text (and thinking)
	// printed as they streamed; what a message holds beyond that when it
	// ends (text sent whole in a block's start or finish) is printed then.
	printed map[string]int
}

// endLine ends a text line being streamed.
func (p *tailPrinter) endLine() {
	if p.open != "" {
		fmt.Fprintln(p.w)
		p.open = ""
	}
}

// text prints a piece of a message's text as it arrives, after the
// message's prefix when its line is not the one open.
func (p *tailPrinter) text(ts protocol.Timestamp, ns []string, node, delta string, thinking bool) {
	key := messageKey(ns, node)
	if thinking {
		key += "\x00thinking"
	}
	if p.open != key {
		p.endLine()
		role := "ai"
		if m := p.a.Messages(ns); len(m) > 0 {
			role = string(m[len(m)-1].Role)
		}
		if thinking {
			role += " (thinking)"
		}
		fmt.Fprintf(p.w, "%s %-12s %s: ", stamp(ts), termsafe.String(where(ns)), termsafe.String(role))
		p.open = key
	}
	fmt.Fprint(p.w, termsafe.String(delta))
	if p.printed == nil {
		p.printed = map[string]int{}
	}
	p.printed[key] += len(delta)
}

// messageKey names a message being streamed: one at a time per namespace
// and node.
func messageKey(ns []string, node string) string { return strings.Join(ns, "/") + "\x00" + node }

func stamp(ts protocol.Timestamp) string {
	return time.UnixMilli(int64(ts)).UTC().Format("15:04:05.000")
}

func where(ns []string) string {
	if len(ns) == 0 {
		return "/"
	}
	return strings.Join(ns, "/")
}

func (p *tailPrinter) line(ts protocol.Timestamp, ns []string, format string, args ...any) {
	p.endLine()
	// Everything but the time came from the network: escaped, so that a
	// thread's writer cannot act on the operator's terminal.
	fmt.Fprintf(p.w, "%s %-12s %s\n", stamp(ts), termsafe.String(where(ns)), termsafe.String(fmt.Sprintf(format, args...)))
}

func compact(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func (p *tailPrinter) print(e *client.Event) {
	if e.Missed != nil {
		how := ""
		if e.Missed.Reset != nil && *e.Missed.Reset {
			how = ", the stream began again"
		}
		p.endLine()
		fmt.Fprintf(p.w, "-- missed events after %d (%d lost%s) --\n", e.Missed.Since, e.Missed.Missed, how)
		return
	}
	if e.Payload == nil {
		return
	}
	p.a.Apply(e.Payload)
	switch ev := e.Payload.(type) {
	case *protocol.ServerEventLifecycle:
		d := ev.Params.Data
		s := string(d.Event)
		if d.GraphName != nil {
			s += " " + *d.GraphName
		}
		if d.Error != nil {
			s += ": " + *d.Error
		}
		p.line(ev.Params.Timestamp, ev.Params.Namespace, "lifecycle %s", s)
	case *protocol.ServerEventMessages:
		node := ""
		if ev.Params.Node != nil {
			node = *ev.Params.Node
		}
		switch ev.Params.Data.Value.(type) {
		case *protocol.ContentBlockDeltaData:
			if d := e.TextDelta(); d != "" {
				p.text(ev.Params.Timestamp, ev.Params.Namespace, node, d, false)
			} else if r, ok := ev.Params.Data.Value.(*protocol.ContentBlockDeltaData).Delta.Value.(*protocol.ReasoningDelta); ok && r.Reasoning != "" {
				p.text(ev.Params.Timestamp, ev.Params.Namespace, node, r.Reasoning, true)
			}
		case *protocol.MessageFinishData, *protocol.MessageErrorData:
			key := messageKey(ev.Params.Namespace, node)
			if strings.HasPrefix(p.open, key) {
				p.endLine() // its text was printed as it came
			}
			done, thought := p.printed[key], p.printed[key+"\x00thinking"]
			delete(p.printed, key)
			delete(p.printed, key+"\x00thinking")
			msgs := p.a.Messages(ev.Params.Namespace)
			if len(msgs) == 0 {
				return
			}
			m := msgs[len(msgs)-1]
			if r := m.Reasoning(); len(r) > thought {
				p.line(ev.Params.Timestamp, m.Namespace, "%s (thinking): %s", m.Role, r[thought:])
			}
			if t := m.Text(); len(t) > done {
				p.line(ev.Params.Timestamp, m.Namespace, "%s: %s", m.Role, t[done:])
			}
			for _, tc := range m.ToolCalls() {
				args := tc.Args
				if tc.FinalArgs != nil {
					args = compact(tc.FinalArgs)
				}
				p.line(ev.Params.Timestamp, m.Namespace, "%s calls %s(%s)", m.Role, tc.ToolName, args)
			}
			if m.Error != "" {
				p.line(ev.Params.Timestamp, m.Namespace, "%s: error: %s", m.Role, m.Error)
			}
		}
	case *protocol.ServerEventTools:
		switch d := ev.Params.Data.Value.(type) {
		case *protocol.ToolStartedData:
			p.line(ev.Params.Timestamp, ev.Params.Namespace, "tool %s started %s", d.ToolName, compact(d.Input))
		case *protocol.ToolFinishedData:
			p.line(ev.Params.Timestamp, ev.Params.Namespace, "tool %s finished %s", toolName(p.a, d.ToolCallID), compact(d.Output))
		case *protocol.ToolErrorData:
			p.line(ev.Params.Timestamp, ev.Params.Namespace, "tool %s failed: %s", toolName(p.a, d.ToolCallID), d.Message)
		}
	case *protocol.ServerEventInputRequested:
		p.line(ev.Params.Timestamp, ev.Params.Namespace, "interrupt %s asks %s", ev.Params.Data.InterruptID, compact(ev.Params.Data.Payload))
	case *protocol.ServerEventInputAnswered:
		p.line(ev.Params.Timestamp, ev.Params.Namespace, "answered %s", strings.Join(ev.Params.Data.InterruptIds, ", "))
	case *protocol.ServerEventCustom:
		p.line(ev.Params.Timestamp, ev.Params.Namespace, "custom %s", compact(ev.Params.Data))
	case *protocol.ServerEventValues:
		p.line(ev.Params.Timestamp, ev.Params.Namespace, "values %s", compact(ev.Params.Data))
	case *protocol.ServerEventUpdates:
		p.line(ev.Params.Timestamp, ev.Params.Namespace, "update %s", compact(ev.Params.Data))
	case *protocol.ServerEventCheckpoints:
		p.line(ev.Params.Timestamp, ev.Params.Namespace, "checkpoint %s", compact(ev.Params.Data))
	case *protocol.ServerEventTasks:
		p.line(ev.Params.Timestamp, ev.Params.Namespace, "task %s", compact(ev.Params.Data))
	}
}

func toolName(a *client.Assembler, id string) string {
	for _, t := range a.Tools() {
		if t.ID == id {
			return t.Name
		}
	}
	return id
}

package openai

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
)

// partKind says what a protocol event of a run is on these wires.
type partKind int

const (
	partNone    partKind = iota
	partMessage          // a root message starts (its id in block)
	partTextStart
	partText
	partTextEnd
	partReasonStart
	partReason
	partReasonEnd
	partCallStart
	partCallArgs
	partCallEnd
	partInterrupt // input.requested: what the run will wait for
	partWaiting   // the root is interrupted: the response ends waiting for it
	partCompleted
	partFailed
	partCancelled
)

// part is one step of a run as both wires see it: the root agent's
// content blocks (keyed by message and index), the run's interrupt, and
// its end.
type part struct {
	kind    partKind
	seq     uint64
	block   string // the content block: message id and index
	text    string // a delta, a block's whole text or arguments, an error
	id      string // a tool call's id, an interrupt's
	name    string // a tool call's name
	payload any    // an interrupt's
	model   string // the run's assistant (on its start)
	ts      uint64 // the event's timestamp (Unix ms)
}

// streamChannels are what the wires read of a thread.
var streamChannels = []string{channels.Lifecycle, channels.Messages, channels.Input}

// partOf reads what event e is on these wires (partNone for the rest:
// subagents' messages, notices, other channels).
func partOf(e *server.Event) part {
	if e.Seq == 0 {
		return part{}
	}
	e, err := e.WithPayload()
	if err != nil {
		return part{}
	}
	p := part{seq: e.Seq}
	switch ev := e.Payload.(type) {
	case *protocol.ServerEventLifecycle:
		if len(ev.Params.Namespace) != 0 {
			return part{}
		}
		p.ts = ev.Params.Timestamp
		d := ev.Params.Data
		switch d.Event {
		case protocol.AgentStatusStarted:
			if d.GraphName != nil {
				p.model = *d.GraphName
			}
			return p // partNone with the model
		case protocol.AgentStatusCompleted:
			p.kind = partCompleted
		case protocol.AgentStatusInterrupted:
			p.kind = partWaiting
		case protocol.AgentStatusFailed:
			p.kind = partFailed
			if d.Cancelled != nil && *d.Cancelled {
				p.kind = partCancelled
			}
			p.text = "the run failed"
			if d.Error != nil && *d.Error != "" {
				p.text = *d.Error
			}
		}
	case *protocol.ServerEventInputRequested:
		p.kind, p.id, p.payload, p.ts = partInterrupt, ev.Params.Data.InterruptID, ev.Params.Data.Payload, ev.Params.Timestamp
	case *protocol.ServerEventMessages:
		if len(ev.Params.Namespace) != 0 {
			return part{}
		}
		p.ts = ev.Params.Timestamp
		messagePart(&p, ev.Params.Data)
	}
	return p
}

// messagePart reads a root message event into p; a block's key is its
// index here, and its message's id once run.next has it.
func messagePart(p *part, d protocol.MessagesData) {
	switch d := d.Value.(type) {
	case *protocol.MessageStartData:
		p.kind, p.block = partMessage, d.ID
	case *protocol.ContentBlockStartData:
		p.block = strconv.FormatUint(uint64(d.Index), 10)
		switch c := d.Content.Value.(type) {
		case *protocol.TextContentBlock:
			p.kind, p.text = partTextStart, c.Text
		case *protocol.ReasoningContentBlock:
			p.kind = partReasonStart
			if c.Reasoning != nil {
				p.text = *c.Reasoning
			}
		case *protocol.ToolCallChunk:
			p.kind = partCallStart
			if c.ID != nil {
				p.id = *c.ID
			}
			if c.Name != nil {
				p.name = *c.Name
			}
			if c.Args != nil {
				p.text = *c.Args
			}
		}
	case *protocol.ContentBlockDeltaData:
		p.block = strconv.FormatUint(uint64(d.Index), 10)
		switch delta := d.Delta.Value.(type) {
		case *protocol.TextDelta:
			p.kind, p.text = partText, delta.Text
		case *protocol.ReasoningDelta:
			p.kind, p.text = partReason, delta.Reasoning
		case *protocol.ToolCallDelta:
			p.kind, p.text = partCallArgs, delta.Args
		}
	case *protocol.ContentBlockFinishData:
		p.block = strconv.FormatUint(uint64(d.Index), 10)
		b, err := json.Marshal(d.Content)
		if err != nil {
			return
		}
		var fin struct {
			Type      string         `json:"type"`
			Text      string         `json:"text"`
			Reasoning string         `json:"reasoning"`
			ID        *string        `json:"id"`
			Name      string         `json:"name"`
			Args      map[string]any `json:"args"`
		}
		if json.Unmarshal(b, &fin) != nil {
			return
		}
		switch fin.Type {
		case "text":
			p.kind, p.text = partTextEnd, fin.Text
		case "reasoning":
			p.kind, p.text = partReasonEnd, fin.Reasoning
		case "tool_call":
			p.kind, p.name = partCallEnd, fin.Name
			if fin.ID != nil {
				p.id = *fin.ID
			}
			args, _ := json.Marshal(fin.Args)
			if fin.Args == nil {
				args = []byte("{}")
			}
			p.text = string(args)
		}
	}
}

// run follows a run's parts for a wire: the current message, so that
// blocks are told apart across messages, and the interrupt it waits for.
type run struct {
	message   string
	interrupt *part
	model     string
}

// next reads e and returns its part with its block keyed by message.
func (r *run) next(e *server.Event) part {
	p := partOf(e)
	switch {
	case p.kind == partMessage:
		// The root agent writes one message at a time: its blocks are
		// this message's until the next starts.
		r.message = p.block
		return part{seq: p.seq}
	case p.model != "":
		r.model = p.model
	case p.kind == partInterrupt:
		pp := p
		r.interrupt = &pp
	}
	if p.block != "" {
		p.block = r.message + "#" + p.block
	}
	return p
}

// WireCallID is a tool call's id on these wires: the thread's and the
// call's, so that the answer to it finds the thread on any node.
func WireCallID(thread, id string) string { return thread + "~" + id }

// splitCallID undoes WireCallID (a thread id has no "~").
func splitCallID(id string) (thread, call string, ok bool) {
	thread, call, ok = strings.Cut(id, "~")
	return thread, call, ok && thread != "" && call != ""
}

// interruptCall is the tool call an interrupt is answered through: the
// call its payload names (tool_call_id), or one named "input" with the
// payload as arguments.
func interruptCall(in *part) (id, name, args string, named bool) {
	if m, ok := in.payload.(map[string]any); ok {
		if id, ok := m["tool_call_id"].(string); ok && id != "" {
			return id, "", "", true
		}
	}
	b, err := json.Marshal(in.payload)
	if err != nil || in.payload == nil {
		b = []byte("{}")
	}
	return in.id, "input", string(b), false
}

// tokens estimates the tokens of n bytes of text: one for every four, as
// OpenAI's rule of thumb goes.
func tokens(n int) uint64 { return uint64((n + 3) / 4) }

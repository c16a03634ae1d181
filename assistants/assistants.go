// Package assistants holds agentstream's built-in assistants, deterministic
// so the server streams something real out of the box and tests can rely
// on them:
//
//   - echo answers a user message with the same text, streamed word by word;
//   - demo is a scripted multi-agent run that uses every channel, with an
//     interrupt asking for approval;
//   - firehose publishes custom events at a set rate, for load tests.
//
// [Register] adds all three to a server. A per-token delay for echo and demo
// comes from the run config: `token_delay_ms` (top level or under
// `configurable`), default 0.
//
// Each checks a new run's input before the run starts
// ([server.InputValidator]), so a request cannot make a built-in exhaust
// the server: run.start answers invalid_argument for a firehose of more
// than [FirehoseMaxCount] events, [FirehoseMaxSize] bytes each or
// [FirehoseMaxRate] per second, a delay over [MaxTokenDelay], or an echo
// input that is not a user message.
package assistants

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/stream"
)

// The bounds of the built-ins' inputs.
const (
	FirehoseMaxCount = 1_000_000
	FirehoseMaxSize  = 1 << 20 // bytes per event
	FirehoseMaxRate  = 1_000_000
	// FirehoseMinRate is the slowest rate above 0: an event every 1,000 s
	// (a smaller one would overflow the interval between events).
	FirehoseMinRate = 0.001
	// FirehoseMaxBytes bounds count × size: what one run may make the
	// server encode.
	FirehoseMaxBytes = 1 << 30
	MaxTokenDelay    = time.Minute
)

// Register adds echo, demo and firehose to srv.
func Register(srv *server.Server) {
	srv.Register("echo", checked{server.AssistantFunc(Echo), checkEcho})
	srv.Register("demo", checked{server.AssistantFunc(Demo), checkDemo})
	srv.Register("firehose", checked{server.AssistantFunc(Firehose), checkFirehose})
}

// checked is an assistant with the check of its input.
type checked struct {
	server.AssistantFunc
	check func(input any, config map[string]any) error
}

// ValidateInput implements server.InputValidator.
func (c checked) ValidateInput(input any, config map[string]any) error { return c.check(input, config) }

func checkEcho(input any, config map[string]any) error {
	if _, _, err := userText(input); err != nil {
		return err
	}
	_, err := delayOf(config)
	return err
}

func checkDemo(input any, config map[string]any) error {
	_, err := delayOf(config)
	return err
}

func checkFirehose(input any, config map[string]any) error {
	_, err := firehoseParams(input)
	return err
}

// delayOf reads token_delay_ms from a run config: a number of
// milliseconds from 0 to MaxTokenDelay, at the top level or under
// configurable.
func delayOf(cfg map[string]any) (time.Duration, error) {
	v, ok := cfg["token_delay_ms"]
	if !ok {
		if c, _ := cfg["configurable"].(map[string]any); c != nil {
			v, ok = c["token_delay_ms"]
		}
	}
	if !ok || v == nil {
		return 0, nil
	}
	var ms float64
	switch n := v.(type) {
	case float64:
		ms = n
	case int:
		ms = float64(n)
	default:
		return 0, fmt.Errorf("config.token_delay_ms: %v is not a number", v)
	}
	if ms < 0 || ms > float64(MaxTokenDelay/time.Millisecond) {
		return 0, fmt.Errorf("config.token_delay_ms: %v is not from 0 to %d", v, MaxTokenDelay/time.Millisecond)
	}
	return time.Duration(ms * float64(time.Millisecond)), nil
}

// tokenDelay reads token_delay_ms from the run config (checked before the
// run started).
func tokenDelay(rc *server.RunContext) time.Duration {
	d, _ := delayOf(rc.Config())
	return d
}

// Words splits text into tokens that each keep the white space after them
// (leading white space stays with the first word), so they concatenate back
// to text exactly.
func Words(text string) []string {
	var out []string
	start := 0
	inSpace := true // leading space belongs to the first word
	for i, r := range text {
		if unicode.IsSpace(r) {
			inSpace = true
			continue
		}
		if inSpace && i > 0 && start < i && !isAllSpace(text[start:i]) {
			out = append(out, text[start:i])
			start = i
		}
		inSpace = false
	}
	if start < len(text) {
		out = append(out, text[start:])
	}
	return out
}

func isAllSpace(s string) bool { return strings.TrimSpace(s) == "" }

// userText reads {"messages": [..., {"role": "user", "content": TEXT}]}:
// the content of the last message (text, or text content blocks).
func userText(input any) (string, map[string]any, error) {
	m, ok := input.(map[string]any)
	if !ok {
		return "", nil, errors.New(`input must be {"messages": [{"role": "user", "content": "..."}]}`)
	}
	msgs, _ := m["messages"].([]any)
	if len(msgs) == 0 {
		return "", nil, errors.New(`input.messages must hold at least one message`)
	}
	last, _ := msgs[len(msgs)-1].(map[string]any)
	if last == nil {
		return "", nil, errors.New(`input.messages[-1] must be an object`)
	}
	switch c := last["content"].(type) {
	case string:
		return c, last, nil
	case []any:
		var b strings.Builder
		for _, blk := range c {
			if bm, ok := blk.(map[string]any); ok && bm["type"] == "text" {
				s, _ := bm["text"].(string)
				b.WriteString(s)
			}
		}
		return b.String(), last, nil
	}
	return "", nil, errors.New(`input.messages[-1].content must be text`)
}

// withInput saves and emits the state as the run starts, as LangGraph's
// graphs do: the conversation so far and the user's message (its id, or
// one of the run's). It returns the conversation.
func withInput(rc *server.RunContext, text, humanID string) ([]any, error) {
	msgs, err := history(rc)
	if err != nil {
		return nil, err
	}
	if humanID == "" {
		humanID = "human_" + rc.RunID()
	}
	msgs = append(msgs, map[string]any{"type": "human", "content": text, "id": humanID})
	if err := rc.Values(map[string]any{"messages": msgs}); err != nil {
		return nil, err
	}
	// A checkpoint per step, as LangGraph keeps them: this one with the
	// question, so that the thread's history and state read while the
	// answer streams (a page reloaded mid-reply) or while the run waits
	// on an interrupt show it.
	if _, err := rc.Checkpoint(protocol.CheckpointSourceLoop, int64(len(msgs)-1)); err != nil {
		return nil, err
	}
	return msgs, nil
}

// history returns the messages already in the thread's state.
func history(rc *server.RunContext) ([]any, error) {
	state, err := rc.State()
	if err != nil {
		return nil, err
	}
	msgs, _ := state["messages"].([]any)
	return append([]any(nil), msgs...), nil
}

func strPtr(s string) *string { return &s }

// streamText streams text as one AI message with one text block, a
// text-delta per word, and returns the message id.
func streamText(ctx context.Context, rc *server.RunContext, text string, delay time.Duration) (string, error) {
	md := &protocol.MessageMetadata{Provider: strPtr("agentstream"), Model: strPtr(rc.AssistantID()), RunID: strPtr(rc.RunID()), ThreadID: strPtr(rc.ThreadID())}
	m, err := rc.StartMessage(protocol.MessageRoleAI, "", md)
	if err != nil {
		return "", err
	}
	if _, err := m.StartBlock(&protocol.TextContentBlock{Text: ""}); err != nil {
		return "", err
	}
	for _, w := range Words(text) {
		if err := rc.Sleep(ctx, delay); err != nil {
			return "", err
		}
		if err := m.Delta(&protocol.TextDelta{Text: w}); err != nil {
			return "", err
		}
	}
	if err := m.FinishBlock(&protocol.TextContentBlock{Text: text}); err != nil {
		return "", err
	}
	n := protocol.JsUint(len(Words(text)))
	if err := m.Finish(&protocol.UsageInfo{OutputTokens: &n, TotalTokens: &n}); err != nil {
		return "", err
	}
	return m.ID(), nil
}

// Echo answers the last user message with its own text: one AI message
// streamed as a text-delta per word, between two values (the conversation
// so far in LangChain's serialized message shape: with the question as
// the run starts, with the answer as it ends, after the node's update, as
// LangGraph orders a step's updates and values), then a checkpoint.
func Echo(ctx context.Context, rc *server.RunContext) error {
	text, user, err := userText(rc.Input())
	if err != nil {
		return err
	}
	humanID, _ := user["id"].(string)
	msgs, err := withInput(rc, text, humanID)
	if err != nil {
		return err
	}
	aiID, err := streamText(ctx, rc, text, tokenDelay(rc))
	if err != nil {
		return err
	}
	ai := map[string]any{"type": "ai", "content": text, "id": aiID}
	msgs = append(msgs, ai)
	if err := rc.Update("echo", map[string]any{"messages": []any{ai}}); err != nil {
		return err
	}
	if err := rc.Values(map[string]any{"messages": msgs}); err != nil {
		return err
	}
	_, err = rc.Checkpoint(protocol.CheckpointSourceLoop, int64(len(msgs)-1))
	return err
}

type firehose struct {
	count, size int
	rate        float64
}

// firehoseParams reads and bounds firehose's input: count (100), rate (0:
// as fast as it can) and size (100), each a number from 0 to its maximum.
func firehoseParams(input any) (firehose, error) {
	p := firehose{count: 100, size: 100}
	if input == nil {
		return p, nil
	}
	in, ok := input.(map[string]any)
	if !ok {
		return p, errors.New(`input must be {"count": N, "rate": R, "size": S} (each optional)`)
	}
	num := func(k string, max float64, whole bool) (float64, bool, error) {
		v, ok := in[k]
		if !ok || v == nil {
			return 0, false, nil
		}
		n, isNum := v.(float64)
		if !isNum || n < 0 || n > max || (whole && n != float64(int64(n))) {
			kind := "a number"
			if whole {
				kind = "a whole number"
			}
			return 0, false, fmt.Errorf("%s: %v is not %s from 0 to %v", k, v, kind, int64(max))
		}
		return n, true, nil
	}
	if n, ok, err := num("count", FirehoseMaxCount, true); err != nil {
		return p, err
	} else if ok {
		p.count = int(n)
	}
	if n, ok, err := num("size", FirehoseMaxSize, true); err != nil {
		return p, err
	} else if ok {
		p.size = int(n)
	}
	if n, ok, err := num("rate", FirehoseMaxRate, false); err != nil {
		return p, err
	} else if ok {
		if n > 0 && n < FirehoseMinRate {
			return p, fmt.Errorf("rate: %v is below %v events a second (0 is as fast as it can)", n, FirehoseMinRate)
		}
		p.rate = n
	}
	if int64(p.count)*int64(max(p.size, 64)) > FirehoseMaxBytes {
		return p, fmt.Errorf("count × size: %d × %d bytes is more than %d", p.count, p.size, FirehoseMaxBytes)
	}
	return p, nil
}

// Firehose publishes `count` custom events named "firehose" at `rate` per
// second (0: as fast as it can), each payload holding its index, the
// publish time in Unix nanoseconds and padding up to `size` bytes. Input:
// {"count": N, "rate": R, "size": S}.
func Firehose(ctx context.Context, rc *server.RunContext) error {
	p, err := firehoseParams(rc.Input())
	if err != nil {
		return err
	}
	count, rate, size := p.count, p.rate, p.size
	pad := ""
	if size > 64 {
		pad = strings.Repeat("x", size-64)
	}
	publish := func(i int) error {
		if err := rc.Custom("firehose", firehoseEvent{Index: i, TS: time.Now().UnixNano(), Pad: pad}); err != nil {
			return fmt.Errorf("firehose event %d: %w", i, err)
		}
		return nil
	}
	if rate <= 0 {
		for i := 0; i < count; i++ {
			if err := publish(i); err != nil {
				return err
			}
		}
		return nil
	}
	// Paced: the shared scheduler publishes each event when it is due.
	i := 0
	var failed error
	e := ticks.add(time.Duration(float64(time.Second)/rate), func() bool {
		if failed = publish(i); failed != nil {
			return false
		}
		i++
		return i < count
	})
	select {
	case <-e.done:
		return failed
	case <-ctx.Done():
		ticks.remove(e)
		<-e.done
		return context.Cause(ctx)
	}
}

// firehoseEvent is a firehose payload: its index, the publish time in Unix
// nanoseconds (which the load tool reads latency from) and padding.
type firehoseEvent struct {
	Index int    `json:"index" cbor:"index"`
	TS    int64  `json:"ts" cbor:"ts"`
	Pad   string `json:"pad" cbor:"pad"`
}

// AppendJSON writes the payload's JSON as encoding/json would, without its
// reflection (server.JSONAppender).
func (f firehoseEvent) AppendJSON(b []byte) []byte {
	b = append(b, `{"index":`...)
	b = strconv.AppendInt(b, int64(f.Index), 10)
	b = append(b, `,"ts":`...)
	b = strconv.AppendInt(b, f.TS, 10)
	b = append(b, `,"pad":`...)
	b = stream.AppendJSONString(b, f.Pad)
	return append(b, '}')
}

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
package assistants

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
)

// Register adds echo, demo and firehose to srv.
func Register(srv *server.Server) {
	srv.Register("echo", server.AssistantFunc(Echo))
	srv.Register("demo", server.AssistantFunc(Demo))
	srv.Register("firehose", server.AssistantFunc(Firehose))
}

// tokenDelay reads token_delay_ms from the run config.
func tokenDelay(rc *server.RunContext) time.Duration {
	cfg := rc.Config()
	v, ok := cfg["token_delay_ms"]
	if !ok {
		if c, _ := cfg["configurable"].(map[string]any); c != nil {
			v = c["token_delay_ms"]
		}
	}
	switch n := v.(type) {
	case float64:
		return time.Duration(n * float64(time.Millisecond))
	case int:
		return time.Duration(n) * time.Millisecond
	}
	return 0
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

// history returns the messages already in the thread's state.
func history(rc *server.RunContext) []any {
	msgs, _ := rc.State()["messages"].([]any)
	return append([]any(nil), msgs...)
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
// streamed as a text-delta per word, then the values (the conversation so
// far in LangChain's serialized message shape), an update and a
// checkpoint.
func Echo(ctx context.Context, rc *server.RunContext) error {
	text, user, err := userText(rc.Input())
	if err != nil {
		return err
	}
	aiID, err := streamText(ctx, rc, text, tokenDelay(rc))
	if err != nil {
		return err
	}
	humanID, _ := user["id"].(string)
	if humanID == "" {
		humanID = "human_" + rc.RunID()
	}
	human := map[string]any{"type": "human", "content": text, "id": humanID}
	ai := map[string]any{"type": "ai", "content": text, "id": aiID}
	msgs := append(history(rc), human, ai)
	if err := rc.Values(map[string]any{"messages": msgs}); err != nil {
		return err
	}
	if err := rc.Update("echo", map[string]any{"messages": []any{ai}}); err != nil {
		return err
	}
	_, err = rc.Checkpoint(protocol.CheckpointSourceLoop, int64(len(msgs)/2))
	return err
}

// Firehose publishes `count` custom events named "firehose" at `rate` per
// second (0: as fast as it can), each payload holding its index, the
// publish time in Unix nanoseconds and padding up to `size` bytes. Input:
// {"count": N, "rate": R, "size": S}.
func Firehose(ctx context.Context, rc *server.RunContext) error {
	in, _ := rc.Input().(map[string]any)
	num := func(k string, def float64) float64 {
		if v, ok := in[k].(float64); ok && v >= 0 {
			return v
		}
		return def
	}
	count, rate, size := int(num("count", 100)), num("rate", 0), int(num("size", 100))
	pad := ""
	if size > 64 {
		pad = strings.Repeat("x", size-64)
	}
	var tick <-chan time.Time
	if rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer t.Stop()
		tick = t.C
	}
	for i := 0; i < count; i++ {
		if tick != nil {
			select {
			case <-tick:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		payload := map[string]any{"index": i, "ts": time.Now().UnixNano(), "pad": pad}
		if err := rc.Custom("firehose", payload); err != nil {
			return fmt.Errorf("firehose event %d: %w", i, err)
		}
	}
	return nil
}

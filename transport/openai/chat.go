package openai

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentstream/agentstream/runtime/cddlrt"
	"github.com/agentstream/agentstream/server"
)

// chat builds a chat completion from a run's parts: its chunks as they
// come, and the completion they add up to.
type chat struct {
	id, model, thread string
	created           uint64
	run               run
	started           bool
	calls             map[string]int // a tool-call block's index among the calls
	toolCalls         []OaiToolCall
	content, reason   strings.Builder
	finish            OaiFinishReason
	failed            string // the run's error, when it failed
	done              bool
	promptBytes       int
	from              uint64 // the first event of the completion's (those before are another's)
}

func newChat(thread, model string, promptBytes int) *chat {
	return &chat{id: "chatcmpl-" + thread, thread: thread, model: model, created: uint64(time.Now().Unix()),
		calls: map[string]int{}, promptBytes: promptBytes}
}

func (c *chat) chunk(d OaiDelta, finish *OaiFinishReason) OaiChatChunk {
	return OaiChatChunk{ID: c.id, Created: c.created, Model: c.model, Choices: []OaiChunkChoice{{Delta: d, FinishReason: finish}}}
}

// feed reads event e and returns the chunks it makes.
func (c *chat) feed(e *server.Event) []OaiChatChunk {
	if c.done || (e.Seq != 0 && e.Seq < c.from) {
		return nil
	}
	p := c.run.next(e)
	var out []OaiChatChunk
	if !c.started && p.kind != partNone && p.kind != partMessage {
		c.started = true
		role, empty := "assistant", ""
		out = append(out, c.chunk(OaiDelta{Role: &role, Content: &empty}, nil))
	}
	switch p.kind {
	case partText:
		if p.text != "" {
			c.content.WriteString(p.text)
			out = append(out, c.chunk(OaiDelta{Content: &p.text}, nil))
		}
	case partReason:
		if p.text != "" {
			c.reason.WriteString(p.text)
			out = append(out, c.chunk(OaiDelta{ReasoningContent: &p.text}, nil))
		}
	case partCallStart:
		i := len(c.toolCalls)
		c.calls[p.block] = i
		id := WireCallID(c.thread, p.id)
		c.toolCalls = append(c.toolCalls, OaiToolCall{ID: id, Function: OaiFunction{Name: p.name, Arguments: p.text}})
		fn, typ := "function", p.name
		args := p.text
		out = append(out, c.chunk(OaiDelta{ToolCalls: []OaiToolCallDelta{{Index: uint64(i), ID: &id, Type: &fn, Function: OaiFunctionDelta{Name: &typ, Arguments: &args}}}}, nil))
	case partCallArgs:
		if i, ok := c.calls[p.block]; ok && p.text != "" {
			c.toolCalls[i].Function.Arguments += p.text
			args := p.text
			out = append(out, c.chunk(OaiDelta{ToolCalls: []OaiToolCallDelta{{Index: uint64(i), Function: OaiFunctionDelta{Arguments: &args}}}}, nil))
		}
	case partCallEnd:
		// The arguments as the call finished with them, when the deltas
		// said less (a call streamed without deltas).
		if i, ok := c.calls[p.block]; ok && c.toolCalls[i].Function.Arguments == "" {
			c.toolCalls[i].Function.Arguments = p.text
			args := p.text
			out = append(out, c.chunk(OaiDelta{ToolCalls: []OaiToolCallDelta{{Index: uint64(i), Function: OaiFunctionDelta{Arguments: &args}}}}, nil))
		}
	case partWaiting:
		c.done, c.finish = true, OaiFinishReasonToolCalls
		if c.run.interrupt != nil {
			id, name, args, named := interruptCall(c.run.interrupt)
			if !named || !c.hasCall(id) {
				// The interrupt as a call of its own.
				i := len(c.toolCalls)
				wid := WireCallID(c.thread, id)
				if named {
					name, args = "input", "{}"
					if b, err := json.Marshal(c.run.interrupt.payload); err == nil {
						args = string(b)
					}
				}
				c.toolCalls = append(c.toolCalls, OaiToolCall{ID: wid, Function: OaiFunction{Name: name, Arguments: args}})
				fn := "function"
				out = append(out, c.chunk(OaiDelta{ToolCalls: []OaiToolCallDelta{{Index: uint64(i), ID: &wid, Type: &fn, Function: OaiFunctionDelta{Name: &name, Arguments: &args}}}}, nil))
			}
		}
		f := c.finish
		out = append(out, c.chunk(OaiDelta{}, &f))
	case partCompleted, partCancelled:
		c.done, c.finish = true, OaiFinishReasonStop
		f := c.finish
		out = append(out, c.chunk(OaiDelta{}, &f))
	case partFailed:
		c.done, c.failed = true, p.text
	}
	return out
}

func (c *chat) hasCall(id string) bool {
	wid := WireCallID(c.thread, id)
	for _, tc := range c.toolCalls {
		if tc.ID == wid {
			return true
		}
	}
	return false
}

func (c *chat) usage() OaiUsage {
	in, out := tokens(c.promptBytes), tokens(c.content.Len()+c.reason.Len())
	return OaiUsage{PromptTokens: in, CompletionTokens: out, TotalTokens: in + out}
}

// completion is what the chunks added up to.
func (c *chat) completion() OaiChatCompletion {
	msg := OaiAssistantMessage{ToolCalls: c.toolCalls}
	if c.content.Len() > 0 || len(c.toolCalls) == 0 {
		s := c.content.String()
		msg.Content = &s
	}
	if c.reason.Len() > 0 {
		s := c.reason.String()
		msg.ReasoningContent = &s
	}
	return OaiChatCompletion{ID: c.id, Created: c.created, Model: c.model,
		Choices: OaiChatCompletionChoices{Item0: OaiChatChoice{Message: msg, FinishReason: c.finish}}, Usage: c.usage()}
}

// chatFrames writes a streamed completion: `data:` chunks, the usage
// chunk when asked for, then `data: [DONE]`.
type chatFrames struct {
	c      *chat
	usage  bool
	prefix []byte // a delta chunk up to its delta's members
}

func dataFrame(buf []byte, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return buf
	}
	buf = append(buf, "data: "...)
	buf = append(buf, b...)
	return append(buf, "\n\n"...)
}

func (f *chatFrames) Append(buf []byte, e *server.Event) ([]byte, bool) {
	if gone(e) {
		return append(dataFrame(buf, OaiErrorBody{Error: OaiError{Message: errGone.Error(), Type: "server_error", Code: strPtr("history_gone")}}), "data: [DONE]\n\n"...), true
	}
	for _, ch := range f.c.feed(e) {
		buf = f.frame(buf, ch)
	}
	if !f.c.done {
		return buf, false
	}
	if f.c.failed != "" {
		buf = dataFrame(buf, OaiErrorBody{Error: OaiError{Message: f.c.failed, Type: "server_error", Code: strPtr("run_failed")}})
	} else if f.usage {
		u := f.c.usage()
		buf = dataFrame(buf, OaiChatChunk{ID: f.c.id, Created: f.c.created, Model: f.c.model, Choices: []OaiChunkChoice{}, Usage: &u})
	}
	return append(buf, "data: [DONE]\n\n"...), true
}

func (f *chatFrames) AppendEnd(buf []byte, err error) []byte {
	msg := "the server is shutting down"
	if err != nil {
		msg = err.Error()
	}
	return dataFrame(buf, OaiErrorBody{Error: OaiError{Message: msg, Type: "server_error", Code: strPtr("stream_ended")}})
}

// frame appends chunk ch as a `data:` frame: a text or reasoning delta,
// most of a stream, is written straight from the completion's prefix
// (json.Marshal of a generated chunk cost a streamed token 1.8x the
// protocol's own SSE); the rest through the generated type.
func (f *chatFrames) frame(buf []byte, ch OaiChatChunk) []byte {
	if len(ch.Choices) != 1 || ch.Usage != nil {
		return dataFrame(buf, ch)
	}
	c := ch.Choices[0]
	d := c.Delta
	if c.FinishReason != nil || d.Role != nil || d.ToolCalls != nil || (d.Content == nil) == (d.ReasoningContent == nil) {
		return dataFrame(buf, ch)
	}
	if f.prefix == nil {
		f.prefix = append([]byte(`data: {"object":"chat.completion.chunk","id":`), cddlrt.AppendString(nil, f.c.id)...)
		f.prefix = append(f.prefix, `,"created":`...)
		f.prefix = strconv.AppendUint(f.prefix, f.c.created, 10)
		f.prefix = append(f.prefix, `,"model":`...)
		f.prefix = cddlrt.AppendString(f.prefix, f.c.model)
		f.prefix = append(f.prefix, `,"choices":[{"index":0,"delta":{`...)
	}
	buf = append(buf, f.prefix...)
	if d.Content != nil {
		buf = append(buf, `"content":`...)
		buf = cddlrt.AppendString(buf, *d.Content)
	} else {
		buf = append(buf, `"reasoning_content":`...)
		buf = cddlrt.AppendString(buf, *d.ReasoningContent)
	}
	return append(buf, "},\"finish_reason\":null,\"logprobs\":null}]}\n\n"...)
}

func strPtr(s string) *string { return &s }

// chatHeaders are a streamed completion's extra headers.
func chatHeaders(thread string) http.Header {
	return http.Header{"Agentstream-Thread": {thread}}
}

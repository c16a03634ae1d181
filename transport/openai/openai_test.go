package openai_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/assistants"
	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/internal/testkit/gentest"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/santhosh-tekuri/jsonschema/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestGeneratedFilesAreFresh: doc.go's go:generate lines write what is in
// the package.
func TestGeneratedFilesAreFresh(t *testing.T) { gentest.Fresh(t, "doc.go", 7) }

func start(t *testing.T, cfg server.Config, opts transport.Options) *httptest.Server {
	t.Helper()
	srv := server.New(cfg)
	assistants.Register(srv)
	srv.Register("slow", server.AssistantFunc(slow))
	opts.Profiles = []string{transport.ProfileOpenAI}
	h := transport.New(srv, opts)
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.Shutdown(ctx)
		ts.Close()
		_ = srv.Close(ctx)
	})
	return ts
}

// slow writes a word every 20 ms for 10 s: a run to cancel.
func slow(ctx context.Context, rc *server.RunContext) error {
	m, err := rc.StartMessage(protocol.MessageRoleAI, "", nil)
	if err != nil {
		return err
	}
	if _, err := m.StartBlock(&protocol.TextContentBlock{Text: ""}); err != nil {
		return err
	}
	for i := 0; i < 500; i++ {
		if err := rc.Sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
		if err := m.Delta(&protocol.TextDelta{Text: "word "}); err != nil {
			return err
		}
	}
	return nil
}

// do sends a JSON request and returns its status and decoded body.
func do(t *testing.T, method, url, body string, header http.Header) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var v map[string]any
	require.NoError(t, json.Unmarshal(b, &v), "%s", b)
	return resp.StatusCode, v
}

// sse is an open event stream, read frame by frame.
type sse struct {
	t      *testing.T
	resp   *http.Response
	sc     *bufio.Scanner
	cancel context.CancelFunc
}

func openStream(t *testing.T, method, url, body string) *sse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	s := &sse{t: t, resp: resp, sc: bufio.NewScanner(resp.Body), cancel: cancel}
	s.sc.Buffer(nil, 1<<20)
	t.Cleanup(s.close)
	return s
}

func (s *sse) close() {
	s.cancel()
	s.resp.Body.Close()
}

// next reads the next frame: its event name and data (ok false at the
// end of the stream).
func (s *sse) next() (event, data string, ok bool) {
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case line == "":
			if data != "" {
				return event, data, true
			}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			event = line[7:]
		case strings.HasPrefix(line, "data: "):
			data = line[6:]
		default:
			s.t.Fatalf("an unexpected line %q", line)
		}
	}
	return "", "", false
}

// chatStream reads a streamed completion to its [DONE]: its chunks, each
// checked against the generated schema.
func chatStream(t *testing.T, s *sse) []map[string]any {
	t.Helper()
	schema := gentest.Schema(t, "schema_chunk.json")
	var out []map[string]any
	for {
		_, data, ok := s.next()
		require.True(t, ok, "the stream ended before [DONE]")
		if data == "[DONE]" {
			_, _, more := s.next()
			require.False(t, more, "nothing after [DONE]")
			return out
		}
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(data), &v))
		require.NotContains(t, v, "error", "%s", data)
		require.NoError(t, schema.Validate(v), "%s", data)
		out = append(out, v)
	}
}

// delta is a chunk's first choice's delta and finish_reason.
func delta(c map[string]any) (map[string]any, any) {
	ch := c["choices"].([]any)
	if len(ch) == 0 {
		return nil, nil
	}
	first := ch[0].(map[string]any)
	return first["delta"].(map[string]any), first["finish_reason"]
}

// assembled adds up a completion's chunks as a client does.
type assembled struct {
	role, content, reasoning string
	calls                    []map[string]string
	finish                   any
	usage                    map[string]any
}

func assemble(chunks []map[string]any) assembled {
	var a assembled
	for _, c := range chunks {
		if u, ok := c["usage"].(map[string]any); ok {
			a.usage = u
		}
		d, finish := delta(c)
		if finish != nil {
			a.finish = finish
		}
		if d == nil {
			continue
		}
		if r, ok := d["role"].(string); ok {
			a.role = r
		}
		if s, ok := d["content"].(string); ok {
			a.content += s
		}
		if s, ok := d["reasoning_content"].(string); ok {
			a.reasoning += s
		}
		for _, tc := range asList(d["tool_calls"]) {
			m := tc.(map[string]any)
			i := int(m["index"].(float64))
			for len(a.calls) <= i {
				a.calls = append(a.calls, map[string]string{})
			}
			if id, ok := m["id"].(string); ok {
				a.calls[i]["id"] = id
			}
			fn := m["function"].(map[string]any)
			if n, ok := fn["name"].(string); ok {
				a.calls[i]["name"] = n
			}
			if s, ok := fn["arguments"].(string); ok {
				a.calls[i]["arguments"] += s
			}
		}
	}
	return a
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// TestChatCompletions: a streamed completion of echo says the input back
// (role first, content, stop, usage when asked for, [DONE]); without
// stream one body says the same; every chunk fits the schema.
func TestChatCompletions(t *testing.T) {
	ts := start(t, server.Config{}, transport.Options{})
	text := "the quick brown fox jumps over the lazy dog"
	chunks := chatStream(t, openStream(t, "POST", ts.URL+"/v1/chat/completions",
		`{"model": "echo", "stream": true, "stream_options": {"include_usage": true}, "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "`+text+`"}]}`))
	d, _ := delta(chunks[0])
	require.Equal(t, "assistant", d["role"], "the role comes first")
	a := assemble(chunks)
	require.Equal(t, text, a.content)
	require.Equal(t, "stop", a.finish)
	require.NotNil(t, a.usage, "usage with include_usage")
	require.Positive(t, a.usage["completion_tokens"])
	require.Empty(t, asList(chunks[len(chunks)-1]["choices"]), "usage in a chunk of its own")

	code, body := do(t, "POST", ts.URL+"/v1/chat/completions", `{"model": "echo", "messages": [{"role": "user", "content": [{"type": "text", "text": "in parts"}]}]}`, nil)
	require.Equal(t, 200, code)
	raw, _ := json.Marshal(body)
	var v any
	require.NoError(t, json.Unmarshal(raw, &v))
	require.NoError(t, gentest.Schema(t, "schema_completion.json").Validate(v))
	msg := body["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	require.Equal(t, "in parts", msg["content"])
	require.Equal(t, "stop", body["choices"].([]any)[0].(map[string]any)["finish_reason"])
	require.True(t, strings.HasPrefix(body["id"].(string), "chatcmpl-"))
}

// TestChatToolCallAndAnswer: demo's tool call streams with its arguments
// in pieces that add up to its JSON; the run waits for approval, so the
// completion ends with tool_calls; a tool message for that call resumes
// the run and a second completion streams the rest. A tool message for a
// call nothing waits on is refused.
func TestChatToolCallAndAnswer(t *testing.T) {
	ts := start(t, server.Config{}, transport.Options{})
	chunks := chatStream(t, openStream(t, "POST", ts.URL+"/v1/chat/completions",
		`{"model": "demo", "stream": true, "messages": [{"role": "user", "content": "what is it?"}]}`))
	a := assemble(chunks)
	require.Equal(t, "tool_calls", a.finish)
	require.Equal(t, "The user asks a question; I will ask the researcher.", a.reasoning, "reasoning as reasoning_content")
	require.Equal(t, "Let me look that up. ", a.content)
	require.Len(t, a.calls, 1)
	require.Equal(t, "research", a.calls[0]["name"])
	var args map[string]any
	require.NoError(t, json.Unmarshal([]byte(a.calls[0]["arguments"]), &args), "complete JSON: %s", a.calls[0]["arguments"])
	require.Equal(t, map[string]any{"query": "what is it?"}, args)
	pieces := 0
	for _, c := range chunks {
		if d, _ := delta(c); d != nil && d["tool_calls"] != nil {
			pieces++
		}
	}
	require.Greater(t, pieces, 2, "the arguments streamed in pieces")

	callID := a.calls[0]["id"]
	chunks = chatStream(t, openStream(t, "POST", ts.URL+"/v1/chat/completions",
		`{"model": "demo", "stream": true, "messages": [{"role": "user", "content": "what is it?"},
		{"role": "assistant", "content": null, "tool_calls": [{"id": "`+callID+`", "type": "function", "function": {"name": "research", "arguments": "{}"}}]},
		{"role": "tool", "tool_call_id": "`+callID+`", "content": "{\"approved\": true}"}]}`))
	a = assemble(chunks)
	require.Equal(t, "stop", a.finish)
	require.Equal(t, "Here is what I found: agentstream streams agent events to many clients at once.", a.content)
	require.Equal(t, "chatcmpl-"+strings.Split(callID, "~")[0], chunks[0]["id"], "the same thread")

	code, body := do(t, "POST", ts.URL+"/v1/chat/completions", `{"model": "demo", "messages": [{"role": "tool", "tool_call_id": "`+callID+`", "content": "again"}]}`, nil)
	require.Equal(t, 409, code)
	require.Equal(t, "conflict", body["error"].(map[string]any)["code"])
}

// responseEvents reads a response's stream to its end: each event
// checked against the schema, its name equal to its type.
func responseEvents(t *testing.T, s *sse) []map[string]any {
	t.Helper()
	schema := gentest.Schema(t, "schema_event.json")
	var out []map[string]any
	for {
		event, data, ok := s.next()
		if !ok {
			return out
		}
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(data), &v))
		require.NoError(t, schema.Validate(v), "%s", data)
		require.Equal(t, event, v["type"])
		out = append(out, v)
	}
}

func seqs(evs []map[string]any) []int {
	out := make([]int, len(evs))
	for i, e := range evs {
		out[i] = int(e["sequence_number"].(float64))
	}
	return out
}

func types(evs []map[string]any) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e["type"].(string)
	}
	return out
}

// TestResponses: demo's response streams its reasoning as summary text,
// its text and its function call, numbered from 0 without a gap, and
// ends incomplete (the run waits for approval); GET gives the same
// object; the answer (previous_response_id and a function_call_output)
// streams the rest of the run as a new response that completes; a new
// message with previous_response_id runs again on the same thread.
func TestResponses(t *testing.T) {
	ts := start(t, server.Config{}, transport.Options{})
	evs := responseEvents(t, openStream(t, "POST", ts.URL+"/v1/responses", `{"model": "demo", "input": "what is it?", "stream": true}`))
	for i, n := range seqs(evs) {
		require.Equal(t, i, n, "sequence numbers from 0, no gap")
	}
	ty := types(evs)
	require.Equal(t, []string{"response.created", "response.in_progress", "response.output_item.added", "response.reasoning_summary_part.added"}, ty[:4])
	require.Equal(t, "response.incomplete", ty[len(ty)-1])
	reasoning, args := "", ""
	for _, e := range evs {
		switch e["type"] {
		case "response.reasoning_summary_text.delta":
			reasoning += e["delta"].(string)
		case "response.function_call_arguments.delta":
			args += e["delta"].(string)
		}
	}
	require.Equal(t, "The user asks a question; I will ask the researcher.", reasoning)
	require.JSONEq(t, `{"query": "what is it?"}`, args)
	final := evs[len(evs)-1]["response"].(map[string]any)
	require.Equal(t, "incomplete", final["status"])
	require.Equal(t, "interrupt", final["incomplete_details"].(map[string]any)["reason"])
	require.Equal(t, "Let me look that up. ", final["output_text"])
	out := asList(final["output"])
	require.Len(t, out, 3, "reasoning, message, function call")
	call := out[2].(map[string]any)
	require.Equal(t, "function_call", call["type"])
	require.Equal(t, "research", call["name"])

	id := final["id"].(string)
	code, got := do(t, "GET", ts.URL+"/v1/responses/"+id, "", nil)
	require.Equal(t, 200, code)
	raw, _ := json.Marshal(got)
	var v any
	require.NoError(t, json.Unmarshal(raw, &v))
	require.NoError(t, gentest.Schema(t, "schema_response.json").Validate(v))
	// The input's size is known to the request that made the response.
	delete(final, "usage")
	require.Equal(t, float64(0), got["usage"].(map[string]any)["input_tokens"])
	delete(got, "usage")
	require.Equal(t, final, got, "GET gives what the stream ended with")

	evs = responseEvents(t, openStream(t, "POST", ts.URL+"/v1/responses",
		`{"model": "demo", "previous_response_id": "`+id+`", "stream": true, "input": [{"type": "function_call_output", "call_id": "`+call["call_id"].(string)+`", "output": "{\"approved\": true}"}]}`))
	done := evs[len(evs)-1]
	require.Equal(t, "response.completed", done["type"])
	resp := done["response"].(map[string]any)
	require.Equal(t, "Here is what I found: agentstream streams agent events to many clients at once.", resp["output_text"])
	require.Equal(t, id, resp["previous_response_id"])
	thread := strings.TrimPrefix(id, "resp_")
	thread = thread[:strings.LastIndexByte(thread, '_')]
	require.True(t, strings.HasPrefix(resp["id"].(string), "resp_"+thread+"_"), "the same thread")

	code, next := do(t, "POST", ts.URL+"/v1/responses", `{"model": "echo", "previous_response_id": "`+resp["id"].(string)+`", "input": [{"role": "user", "content": "again"}]}`, nil)
	require.Equal(t, 200, code)
	require.Equal(t, "completed", next["status"])
	require.Equal(t, "again", next["output_text"])
	require.True(t, strings.HasPrefix(next["id"].(string), "resp_"+thread+"_"), "the same thread")
}

// TestResponseResumes: a response's stream read again with
// starting_after=N gives exactly the events after N, for every N; a
// stream dropped mid-way and resumed from the last sequence_number it
// gave yields every event once.
func TestResponseResumes(t *testing.T) {
	ts := start(t, server.Config{}, transport.Options{})
	s := openStream(t, "POST", ts.URL+"/v1/responses", `{"model": "demo", "input": "resume me", "stream": true}`)
	var got []map[string]any
	schema := gentest.Schema(t, "schema_event.json")
	for len(got) < 7 {
		_, data, ok := s.next()
		require.True(t, ok)
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(data), &v))
		require.NoError(t, schema.Validate(v))
		got = append(got, v)
	}
	s.close() // dropped
	id := got[0]["response"].(map[string]any)["id"].(string)
	last := got[len(got)-1]["sequence_number"].(float64)
	rest := responseEvents(t, openStream(t, "GET", ts.URL+"/v1/responses/"+id+"?stream=true&starting_after="+jsonNum(last), ""))
	all := append(got, rest...)
	for i, n := range seqs(all) {
		require.Equal(t, i, n, "every event once, in order")
	}
	require.Equal(t, "response.incomplete", all[len(all)-1]["type"])

	full := responseEvents(t, openStream(t, "GET", ts.URL+"/v1/responses/"+id+"?stream=true", ""))
	require.Equal(t, len(all), len(full))
	for i := range full {
		if i == 0 || i == 1 {
			continue // created and in_progress carry the response as it was then
		}
		require.Equal(t, all[i], full[i], "event %d read again", i)
	}
	for _, n := range []int{0, 5, len(full) / 2, len(full) - 2} {
		after := responseEvents(t, openStream(t, "GET", ts.URL+"/v1/responses/"+id+"?stream=true&starting_after="+jsonNum(float64(n)), ""))
		require.Equal(t, full[n+1:], after, "after %d", n)
	}
	code, body := do(t, "GET", ts.URL+"/v1/responses/"+id+"?stream=true&starting_after=x", "", nil)
	require.Equal(t, 400, code)
	require.Equal(t, "starting_after", body["error"].(map[string]any)["param"])
}

func jsonNum(f float64) string {
	b, _ := json.Marshal(f)
	return string(b)
}

// TestResponseCancel: cancelling a response under way ends its run; the
// answer and the stream's last event say cancelled.
func TestResponseCancel(t *testing.T) {
	ts := start(t, server.Config{}, transport.Options{})
	s := openStream(t, "POST", ts.URL+"/v1/responses", `{"model": "slow", "input": "x", "stream": true, "metadata": {}}`)
	_, data, ok := s.next()
	require.True(t, ok)
	var created map[string]any
	require.NoError(t, json.Unmarshal([]byte(data), &created))
	id := created["response"].(map[string]any)["id"].(string)
	code, body := do(t, "POST", ts.URL+"/v1/responses/"+id+"/cancel", "", nil)
	require.Equal(t, 200, code, "%v", body)
	require.Equal(t, "cancelled", body["status"])
	var lastType string
	for {
		ev, _, ok := s.next()
		if !ok {
			break
		}
		lastType = ev
	}
	require.Equal(t, "response.cancelled", lastType)
}

// TestErrors: what is refused gets OpenAI's error shape and status.
func TestErrors(t *testing.T) {
	ts := start(t, server.Config{}, transport.Options{})
	deep := strings.Repeat("[", 9000) + strings.Repeat("]", 9000)
	many := func(n int, item string) string { return strings.TrimSuffix(strings.Repeat(item+",", n), ",") }
	msg := `{"role": "user", "content": "x"}`
	for _, c := range []struct {
		method, path, body string
		status             int
		param              string
	}{
		{"POST", "/v1/chat/completions", `{"model": "nope", "messages": [{"role": "user", "content": "x"}]}`, 404, "model"},
		{"POST", "/v1/chat/completions", `{"model": "echo", "messages": []}`, 400, ""},
		{"POST", "/v1/chat/completions", `{"model": "echo", "messages": [{"role": "robot", "content": "x"}]}`, 400, ""},
		{"POST", "/v1/chat/completions", `{"model": "echo"`, 400, ""},
		// Limits and OpenAI's own parameter checks.
		{"POST", "/v1/chat/completions", `{"model": "echo", "messages": [` + msg + `], "metadata": ` + deep + `}`, 400, ""},
		{"POST", "/v1/chat/completions", `{"model": "echo", "messages": [` + msg + `], "metadata": [` + many(60_000, "1") + `]}`, 400, ""},
		{"POST", "/v1/chat/completions", `{"model": "echo", "messages": [` + many(2049, msg) + `]}`, 400, ""},
		{"POST", "/v1/chat/completions", `{"model": "echo", "messages": [` + msg + `], "n": -1}`, 400, ""},
		{"POST", "/v1/chat/completions", `{"model": "echo", "messages": [` + msg + `], "n": 5}`, 400, "n"},
		{"POST", "/v1/chat/completions", `{"model": "echo", "messages": [` + msg + `], "temperature": "NaN"}`, 400, ""},
		{"POST", "/v1/chat/completions", `{"model": "echo", "messages": [` + msg + `], "temperature": 2.5}`, 400, "temperature"},
		{"POST", "/v1/chat/completions", `{"model": "echo", "messages": [` + msg + `], "top_p": -0.1}`, 400, "top_p"},
		{"POST", "/v1/chat/completions", `{"model": "echo", "messages": [` + msg + `], "max_tokens": -5}`, 400, ""},
		{"POST", "/v1/responses", `{"model": "echo", "input": [` + many(2049, `{"role": "user", "content": "x"}`) + `]}`, 400, ""},
		{"POST", "/v1/responses", `{"model": "echo", "input": "x", "temperature": 9}`, 400, "temperature"},
		{"POST", "/v1/responses", `{"model": "echo", "input": "x", "metadata": ` + deep + `}`, 400, ""},
		{"POST", "/v1/responses", `{"model": "echo", "input": 7}`, 400, ""},
		{"POST", "/v1/responses", `{"model": "echo", "input": "x", "previous_response_id": "resp_nope"}`, 400, "previous_response_id"},
		{"POST", "/v1/responses", `{"model": "echo", "input": []}`, 400, "input"},
		{"GET", "/v1/responses/resp_oai-nothing_1", "", 404, "id"},
		{"GET", "/v1/responses/whatever", "", 404, "id"},
		{"POST", "/v1/responses/resp_oai-nothing_1/cancel", "", 404, "id"},
	} {
		code, body := do(t, c.method, ts.URL+c.path, c.body, nil)
		require.Equal(t, c.status, code, "%s %s %s: %v", c.method, c.path, c.body, body)
		e, ok := body["error"].(map[string]any)
		require.True(t, ok, "%v", body)
		require.NotEmpty(t, e["message"])
		require.NotEmpty(t, e["type"])
		if c.param != "" {
			require.Equal(t, c.param, e["param"], "%v", e)
		}
	}
	req, _ := http.NewRequest("POST", ts.URL+"/v1/chat/completions", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 415, resp.StatusCode)

	code, models := do(t, "GET", ts.URL+"/v1/models", "", nil)
	require.Equal(t, 200, code)
	var ids []string
	for _, m := range asList(models["data"]) {
		ids = append(ids, m.(map[string]any)["id"].(string))
	}
	require.Contains(t, ids, "echo")
	require.Contains(t, ids, "demo")
}

var _ = jsonschema.Draft2020

// TestCredentials: with authentication on, the transport's refusals in
// front of the routes come in OpenAI's shape (401 without or with a
// wrong key); another principal's response is refused; the owner reads
// it.
func TestCredentials(t *testing.T) {
	a, err := auth.New(context.Background(), auth.Config{APIKeys: map[string]auth.Principal{"sk-alice": {Subject: "alice"}, "sk-bob": {Subject: "bob"}}})
	require.NoError(t, err)
	t.Cleanup(a.Close)
	ts := start(t, server.Config{}, transport.Options{Auth: a})
	body := `{"model": "echo", "input": "mine"}`
	for _, key := range []string{"", "Bearer sk-nobody"} {
		code, got := do(t, "POST", ts.URL+"/v1/responses", body, http.Header{"Authorization": {key}})
		require.Equal(t, 401, code)
		e := got["error"].(map[string]any)
		require.Equal(t, "authentication_error", e["type"], "%v", got)
		require.NotEmpty(t, e["message"])
	}
	code, got := do(t, "POST", ts.URL+"/v1/responses", body, http.Header{"Authorization": {"Bearer sk-alice"}})
	require.Equal(t, 200, code, "%v", got)
	id := got["id"].(string)
	code, got = do(t, "GET", ts.URL+"/v1/responses/"+id, "", http.Header{"Authorization": {"Bearer sk-bob"}})
	require.Contains(t, []int{403, 404}, code, "%v", got)
	require.NotNil(t, got["error"], "%v", got)
	code, got = do(t, "GET", ts.URL+"/v1/responses/"+id, "", http.Header{"Authorization": {"Bearer sk-alice"}})
	require.Equal(t, 200, code)
	require.Equal(t, "mine", got["output_text"])
}

// TestTrimmedHistory: a response whose first events the thread no longer
// keeps is not renumbered from what is left: GET says 503 with why, and
// its stream read again ends with an error event.
func TestTrimmedHistory(t *testing.T) {
	ts := start(t, server.Config{BufferEvents: 8}, transport.Options{})
	code, got := do(t, "POST", ts.URL+"/v1/responses", `{"model": "echo", "input": "one two three four five six seven eight nine ten eleven twelve"}`, nil)
	require.Equal(t, 200, code, "%v", got)
	id := got["id"].(string)
	code, got = do(t, "GET", ts.URL+"/v1/responses/"+id, "", nil)
	require.Equal(t, 503, code, "%v", got)
	require.Contains(t, got["error"].(map[string]any)["message"], "no longer kept")
	evs := responseEvents(t, openStream(t, "GET", ts.URL+"/v1/responses/"+id+"?stream=true", ""))
	require.Len(t, evs, 1)
	require.Equal(t, "error", evs[0]["type"])
	require.Equal(t, "history_gone", evs[0]["code"])
}

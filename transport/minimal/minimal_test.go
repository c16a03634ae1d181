package minimal_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/assistants"
	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/internal/testkit/gentest"
	"github.com/agentstream/agentstream/internal/testkit/wiretest"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/agentstream/agentstream/transport/minimal"
	"github.com/agentstream/agentstream/transport/wire"
	"github.com/santhosh-tekuri/jsonschema/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// frameSchema is the generated JSON Schema every frame is checked
// against.
func frameSchema(t *testing.T) *jsonschema.Schema { return gentest.Schema(t, "schema.json") }

// workflow is an assistant that writes text, calls a tool that builds a
// node, saves the workflow in its state, and, asked to, fails a tool,
// asks for input or fails.
func workflow(ctx context.Context, rc *server.RunContext) error {
	in, _ := rc.Input().(map[string]any)
	msgs, _ := in["messages"].([]any)
	text := ""
	if len(msgs) > 0 {
		text, _ = msgs[0].(map[string]any)["content"].(string)
	}
	say := func(words ...string) error {
		m, err := rc.StartMessage(protocol.MessageRoleAI, "", nil)
		if err != nil {
			return err
		}
		if _, err := m.StartBlock(&protocol.TextContentBlock{}); err != nil {
			return err
		}
		for _, w := range words {
			if err := m.Delta(&protocol.TextDelta{Text: w}); err != nil {
				return err
			}
		}
		if err := m.FinishBlock(&protocol.TextContentBlock{Text: strings.Join(words, "")}); err != nil {
			return err
		}
		return m.Finish(nil)
	}
	if err := say("I'll create ", "a workflow."); err != nil {
		return err
	}
	tc, err := rc.StartTool("call_1", "create_node", map[string]any{"node_type": "trigger", "name": "Start"})
	if err != nil {
		return err
	}
	node := map[string]any{"id": "abc-123", "name": "Start", "type": "trigger", "trigger": true, "parameters": map[string]any{}, "output": map[string]any{}, "position": []any{100, 100}}
	if err := tc.Finish(map[string]any{"node": node}); err != nil {
		return err
	}
	if err := rc.Values(map[string]any{"workflow_nodes": []any{node}, "workflow_edges": []any{}}); err != nil {
		return err
	}
	switch text {
	case "fail a tool":
		bad, err := rc.StartTool("call_2", "create_edge", map[string]any{"src": "abc-123"})
		if err != nil {
			return err
		}
		if err := bad.Error("no such node: dst", "not_found"); err != nil {
			return err
		}
	case "fail":
		return errors.New("the model is down")
	case "ask":
		if _, err := rc.Interrupt(ctx, map[string]any{"question": "go on?"}); err != nil {
			return err
		}
	case "wait":
		if err := rc.Sleep(ctx, time.Hour); err != nil {
			return err
		}
	}
	return say("Done! ", "Your workflow is ready.")
}

func start(t *testing.T, opts transport.Options) (*httptest.Server, *server.Server) {
	t.Helper()
	srv := server.New(server.Config{})
	assistants.Register(srv)
	srv.Register("workflow", server.AssistantFunc(workflow))
	opts.Profiles = []string{transport.ProfileMinimal}
	h := transport.New(srv, opts)
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.Shutdown(ctx)
		ts.Close()
		_ = srv.Close(ctx)
	})
	return ts, srv
}

// stream posts a request and reads its frames (each checked against the
// schema) until the stream ends.
func stream(t *testing.T, base, body string, header http.Header) (*http.Response, []map[string]any) {
	t.Helper()
	req, err := http.NewRequest("POST", base+"/minimal/stream", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp, nil
	}
	schema := frameSchema(t)
	var frames []map[string]any
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, ":") {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		require.True(t, ok, "a data-only frame: %q", line)
		var v any
		require.NoError(t, json.Unmarshal([]byte(data), &v))
		require.NoError(t, schema.Validate(v), "frame %s", data)
		frames = append(frames, v.(map[string]any))
	}
	require.NoError(t, sc.Err())
	return resp, frames
}

func types(frames []map[string]any) []string {
	out := make([]string, len(frames))
	for i, f := range frames {
		out[i] = f["type"].(string)
	}
	return out
}

// tokens concatenates the token frames, as the seed's client does.
func tokens(frames []map[string]any) string {
	var b strings.Builder
	for _, f := range frames {
		if f["type"] == "token" {
			b.WriteString(f["content"].(string))
		}
	}
	return b.String()
}

// TestMinimalStreamsARun: every frame kind of the seed, in order, each
// valid against the generated schema; the tokens concatenate to the
// assistant's text; the thread is an ordinary thread, whose state the
// protocol's own route shows.
func TestMinimalStreamsARun(t *testing.T) {
	ts, _ := start(t, transport.Options{})
	resp, frames := stream(t, ts.URL, `{"assistant_id": "workflow", "message": "fail a tool"}`, nil)
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	require.Equal(t, []string{"stream_start", "token", "token", "tool_call", "tool_result", "workflow_state", "tool_call", "warning", "token", "token", "stream_end"}, types(frames))
	require.Equal(t, "I'll create a workflow.Done! Your workflow is ready.", tokens(frames))
	call := frames[3]
	require.Equal(t, "create_node", call["name"])
	require.Equal(t, "call_1", call["call_id"])
	var args map[string]any
	require.NoError(t, json.Unmarshal([]byte(call["arguments"].(string)), &args), "arguments is a JSON string")
	require.Equal(t, map[string]any{"node_type": "trigger", "name": "Start"}, args)
	require.Equal(t, "call_1", frames[4]["call_id"])
	require.Equal(t, "abc-123", frames[4]["output"].(map[string]any)["node"].(map[string]any)["id"])
	wf := frames[5]
	require.Len(t, wf["workflow_nodes"], 1)
	require.Equal(t, "abc-123", wf["workflow_nodes"].([]any)[0].(map[string]any)["id"])
	require.Equal(t, []any{}, wf["workflow_edges"])
	require.Contains(t, frames[7]["message"], "no such node: dst")

	thread := resp.Header.Get("Agentstream-Thread")
	require.NotEmpty(t, thread)
	st, err := http.Get(ts.URL + "/threads/" + thread + "/state")
	require.NoError(t, err)
	b, _ := io.ReadAll(st.Body)
	st.Body.Close()
	require.Equal(t, 200, st.StatusCode)
	require.Contains(t, string(b), "abc-123", "the run's state is the thread's")
}

// TestMinimalErrorsEndTheStream: a run that fails ends its stream with
// error (the run's message); one that asks for input, which this wire
// cannot answer, warns and ends with error naming the thread.
func TestMinimalErrorsEndTheStream(t *testing.T) {
	ts, _ := start(t, transport.Options{})
	_, frames := stream(t, ts.URL, `{"assistant_id": "workflow", "message": "fail"}`, nil)
	last := frames[len(frames)-1]
	require.Equal(t, "error", last["type"])
	require.Contains(t, last["message"], "the model is down")

	resp, frames := stream(t, ts.URL, `{"assistant_id": "workflow", "message": "ask", "thread_id": "asks"}`, nil)
	require.Equal(t, "asks", resp.Header.Get("Agentstream-Thread"))
	kinds := types(frames)
	require.Equal(t, "warning", kinds[len(kinds)-2])
	require.Contains(t, frames[len(frames)-2]["message"], "input.respond on thread asks")
	require.Equal(t, "error", kinds[len(kinds)-1])
}

// TestMinimalRefusals: a bad body is 400 (with the path of the problem),
// an unknown assistant 400, a thread with a run going 409, a body that is
// not JSON 415.
func TestMinimalRefusals(t *testing.T) {
	ts, _ := start(t, transport.Options{})
	post := func(body, ctype string) (int, string) {
		resp, err := http.Post(ts.URL+"/minimal/stream", ctype, strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := post(`{"assistant_id": "workflow"}`, "application/json")
	require.Equal(t, 400, code)
	require.Contains(t, body, "message")
	code, body = post(`{"assistant_id": "nope", "message": "hi"}`, "application/json")
	require.Equal(t, 400, code)
	require.Contains(t, body, "unknown assistant")
	code, _ = post(`{"assistant_id": "workflow", "message": "hi"}`, "text/plain")
	require.Equal(t, 415, code)
	code, _ = post(`{"assistant_id": "workflow", "message": "hi", "thread_id": "bad id"}`, "application/json")
	require.Equal(t, 400, code)

	// A run goes on on thread busy: a second stream there is 409.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/minimal/stream", strings.NewReader(`{"assistant_id": "workflow", "message": "wait", "thread_id": "busy"}`))
	req.Header.Set("Content-Type", "application/json")
	first, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer first.Body.Close()
	require.Equal(t, 200, first.StatusCode)
	code, body = post(`{"assistant_id": "workflow", "message": "hi", "thread_id": "busy"}`, "application/json")
	require.Equal(t, 409, code, body)
	cancel()
	// The first stream's client left; its run goes on until cancelled.
	r, err := http.Post(ts.URL+"/threads/busy/commands", "application/json", strings.NewReader(`{"id": 1, "method": "run.cancel", "params": {}}`))
	require.NoError(t, err)
	r.Body.Close()
}

// TestMinimalKeepAlive: a quiet stream gets comment lines.
func TestMinimalKeepAlive(t *testing.T) {
	srv := server.New(server.Config{})
	srv.Register("workflow", server.AssistantFunc(workflow))
	url := wiretest.Serve(t, srv, 30*time.Millisecond, func(c wire.Context) wire.Wire { return minimal.New(c) })
	req, _ := http.NewRequest("POST", url+"/minimal/stream", strings.NewReader(`{"assistant_id": "workflow", "message": "wait"}`))
	req.Header.Set("Content-Type", "application/json")
	wiretest.KeepAlive(t, req, ": keep-alive")
}

// TestMinimalAuth: with authentication on, no credential is 401; a thread
// another principal owns is 403; its owner streams it.
func TestMinimalAuth(t *testing.T) {
	keys, err := auth.New(context.Background(), auth.Config{APIKeys: map[string]auth.Principal{"ka": {Subject: "alice"}, "kb": {Subject: "bob"}}})
	require.NoError(t, err)
	ts, _ := start(t, transport.Options{Auth: keys})
	resp, _ := stream(t, ts.URL, `{"assistant_id": "workflow", "message": "hi", "thread_id": "alices"}`, nil)
	require.Equal(t, 401, resp.StatusCode)
	resp, frames := stream(t, ts.URL, `{"assistant_id": "workflow", "message": "hi", "thread_id": "alices"}`, http.Header{"X-Api-Key": {"ka"}})
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "stream_end", frames[len(frames)-1]["type"])
	resp, _ = stream(t, ts.URL, `{"assistant_id": "workflow", "message": "hi", "thread_id": "alices"}`, http.Header{"X-Api-Key": {"kb"}})
	require.Equal(t, 403, resp.StatusCode)
}

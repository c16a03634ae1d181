package instanceai_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/assistants"
	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/diskstore"
	"github.com/agentstream/agentstream/internal/testkit/gentest"
	"github.com/agentstream/agentstream/internal/testkit/wiretest"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/agentstream/agentstream/transport/instanceai"
	"github.com/agentstream/agentstream/transport/wire"
	"github.com/santhosh-tekuri/jsonschema/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestGeneratedFilesAreFresh: doc.go's go:generate lines (the Go types
// and the JSON Schema) write what is in the package.
func TestGeneratedFilesAreFresh(t *testing.T) { gentest.Fresh(t, "doc.go", 2) }

// orchestrator is an assistant shaped like the seed's: a title, a status,
// reasoning and text, a tool that succeeds and one that fails, a task
// list, a filesystem request, a delegated builder subagent with its own
// tool and text, a debugger subagent whose message fails and that is
// still working while the run waits for the user to confirm a
// destructive tool, then the answer. "fail" fails the run; "wait" waits
// until cancelled.
func orchestrator(ctx context.Context, rc *server.RunContext) error {
	in, _ := rc.Input().(map[string]any)
	msgs, _ := in["messages"].([]any)
	text := ""
	if len(msgs) > 0 {
		text, _ = msgs[0].(map[string]any)["content"].(string)
	}
	if text == "wait" {
		return rc.Sleep(ctx, time.Hour)
	}
	say := func(rc *server.RunContext, reasoning []string, words ...string) error {
		m, err := rc.StartMessage(protocol.MessageRoleAI, "", nil)
		if err != nil {
			return err
		}
		if len(reasoning) > 0 {
			if _, err := m.StartBlock(&protocol.ReasoningContentBlock{}); err != nil {
				return err
			}
			for _, w := range reasoning {
				if err := m.Delta(&protocol.ReasoningDelta{Reasoning: w}); err != nil {
					return err
				}
			}
			r := strings.Join(reasoning, "")
			if err := m.FinishBlock(&protocol.ReasoningContentBlock{Reasoning: &r}); err != nil {
				return err
			}
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
	steps := []func() error{
		func() error { return rc.Custom("thread-title-updated", map[string]any{"title": "Weather to Slack"}) },
		func() error { return rc.Custom("status", map[string]any{"message": "Searching nodes..."}) },
		func() error { return say(rc, []string{"Let me ", "check."}, "You have ", "3 workflows. ") },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
	}
	list, err := rc.StartTool("tc_list", "list-workflows", map[string]any{"limit": 10})
	if err != nil {
		return err
	}
	if err := list.Finish(map[string]any{"workflows": []any{map[string]any{"id": "1", "name": "My Workflow", "active": true}}}); err != nil {
		return err
	}
	get, err := rc.StartTool("tc_get", "get-workflow", map[string]any{"id": "9"})
	if err != nil {
		return err
	}
	if err := get.Error("Workflow not found", "not_found"); err != nil {
		return err
	}
	if err := rc.Custom("tasks-update", map[string]any{"tasks": []any{
		map[string]any{"id": "t1", "description": "Build weather workflow", "status": "in_progress"},
		map[string]any{"id": "t2", "description": "Test end-to-end", "status": "pending"}}}); err != nil {
		return err
	}
	if err := rc.Custom("filesystem-request", map[string]any{"requestId": "fs1", "operation": "read", "args": map[string]any{"path": "notes.md"}}); err != nil {
		return err
	}
	if err := rc.Custom("progress", map[string]any{"step": 1}); err != nil { // not one of the wire's: left out
		return err
	}
	delegate, err := rc.StartTool("tc_delegate", "delegate", map[string]any{"role": "workflow builder", "tools": []any{"create-workflow", "list-nodes"}})
	if err != nil {
		return err
	}
	builder, err := rc.StartSubagent("builder", "workflow builder", &protocol.LifecycleCause{Value: &protocol.LifecycleCauseToolCall{ToolCallID: "tc_delegate"}})
	if err != nil {
		return err
	}
	create, err := builder.Context().StartTool("tc_create", "create-workflow", map[string]any{"name": "Weather"})
	if err != nil {
		return err
	}
	if err := create.Finish(map[string]any{"id": "wf-123"}); err != nil {
		return err
	}
	if err := say(builder.Context(), nil, "Created wf-123 ", "with 3 nodes"); err != nil {
		return err
	}
	if err := builder.End(nil); err != nil {
		return err
	}
	if err := delegate.Finish("Created wf-123 with 3 nodes"); err != nil {
		return err
	}
	debugger, err := rc.StartSubagent("debugger", "execution debugger", nil)
	if err != nil {
		return err
	}
	m, err := debugger.Context().StartMessage(protocol.MessageRoleAI, "", nil)
	if err != nil {
		return err
	}
	if err := m.Fail("LLM provider unavailable"); err != nil {
		return err
	}
	del, err := rc.StartTool("tc_del", "delete-workflow", map[string]any{"workflowId": "wf-123"})
	if err != nil {
		return err
	}
	answer, err := rc.Interrupt(ctx, map[string]any{"toolCallId": "tc_del", "severity": "warning", "message": "Archive workflow 'My Workflow'?", "inputType": "approval"})
	if err != nil {
		return err
	}
	if err := debugger.End(errors.New("gave up")); err != nil {
		return err
	}
	if a, _ := answer.(map[string]any); a["approved"] == true {
		if err := del.Finish(map[string]any{"archived": true}); err != nil {
			return err
		}
	} else if err := del.Error("denied by the user", "denied"); err != nil {
		return err
	}
	if text == "fail" {
		return errors.New("LLM provider unavailable")
	}
	return say(rc, nil, "Done!")
}

func start(t *testing.T, cfg server.Config, opts transport.Options) (*httptest.Server, *server.Server) {
	t.Helper()
	srv := server.New(cfg)
	assistants.Register(srv)
	srv.Register("orchestrator", server.AssistantFunc(orchestrator))
	opts.Profiles = []string{transport.ProfileInstanceAI}
	if opts.InstanceAIAssistant == "" {
		opts.InstanceAIAssistant = "orchestrator"
	}
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

// frame is one event of the stream: its id (0 when it has none) and data.
type frame struct {
	id   uint64
	data map[string]any
}

func (f frame) typ() string { return f.data["type"].(string) }
func (f frame) payload() map[string]any {
	p, _ := f.data["payload"].(map[string]any)
	return p
}

// eventStream is an open GET /instance-ai/events, read frame by frame,
// each checked against the generated schema.
type eventStream struct {
	t      *testing.T
	resp   *http.Response
	sc     *bufio.Scanner
	schema *jsonschema.Schema
	cancel context.CancelFunc
	lastID uint64
}

func open(t *testing.T, url string, header http.Header) *eventStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	require.NoError(t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	s := &eventStream{t: t, resp: resp, sc: bufio.NewScanner(resp.Body), schema: gentest.Schema(t, "schema.json"), cancel: cancel}
	t.Cleanup(s.close)
	return s
}

func (s *eventStream) close() {
	s.cancel()
	s.resp.Body.Close()
}

// next reads the next frame (keep-alive comments skipped).
func (s *eventStream) next() frame {
	s.t.Helper()
	var f frame
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case line == "":
			if f.data != nil {
				return f
			}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			n, err := strconv.ParseUint(line[4:], 10, 64)
			require.NoError(s.t, err, "an id is an integer")
			require.Greater(s.t, n, s.lastID, "ids increase")
			f.id, s.lastID = n, n
		case strings.HasPrefix(line, "data: "):
			var v any
			require.NoError(s.t, json.Unmarshal([]byte(line[6:]), &v))
			require.NoError(s.t, s.schema.Validate(v), "frame %s", line[6:])
			f.data = v.(map[string]any)
		default:
			s.t.Fatalf("an unexpected line %q", line)
		}
	}
	s.t.Fatalf("the stream ended: %v", s.sc.Err())
	return f
}

// until reads frames up to and with the first of type typ.
func (s *eventStream) until(typ string) []frame {
	s.t.Helper()
	var out []frame
	for {
		f := s.next()
		out = append(out, f)
		if f.typ() == typ {
			return out
		}
	}
}

// do sends a request and returns its status and decoded JSON body.
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
	_ = json.Unmarshal(b, &v)
	return resp.StatusCode, v
}

// agentNode and buildTree are a client's agent activity tree built from
// the events as seed 000 describes it: run-start's agent is the root,
// agent-spawned adds a node under its parentId, text-delta appends to its
// agent's text, tool-call adds a tool to its agent, agent-completed marks
// the node done.
type agentNode struct {
	Role     string
	Status   string
	Text     string
	Tools    []string
	Children []*agentNode
}

func buildTree(frames []frame) *agentNode {
	nodes := map[string]*agentNode{}
	var root *agentNode
	for _, f := range frames {
		id, _ := f.data["agentId"].(string)
		p := f.payload()
		switch f.typ() {
		case "run-start":
			root = &agentNode{Role: "orchestrator", Status: "active"}
			nodes[id] = root
		case "agent-spawned":
			n := &agentNode{Role: p["role"].(string), Status: "active"}
			nodes[id] = n
			parent := nodes[p["parentId"].(string)]
			parent.Children = append(parent.Children, n)
		case "text-delta":
			nodes[id].Text += p["text"].(string)
		case "tool-call":
			nodes[id].Tools = append(nodes[id].Tools, p["toolName"].(string))
		case "agent-completed":
			nodes[id].Status = "completed"
		case "run-finish":
			root.Status = p["status"].(string)
		}
	}
	return root
}

// TestInstanceAIChat: a chat message runs the assistant; the stream,
// opened before it as the frontend does, carries every event type of the
// seed's table with its payload fields, each valid against the generated
// schema, with increasing integer ids; the confirmation is answered at
// /instance-ai/confirm/{requestId}; the agent tree a client builds from
// the events is the run's; the status while the run waits shows it
// suspended with its working subagent; the messages rebuild the
// conversation.
func TestInstanceAIChat(t *testing.T) {
	ts, _ := start(t, server.Config{}, transport.Options{})
	s := open(t, ts.URL+"/instance-ai/events/th1", nil)
	require.Equal(t, 200, s.resp.StatusCode)
	require.Equal(t, "text/event-stream", s.resp.Header.Get("Content-Type"))
	require.Equal(t, "no", s.resp.Header.Get("X-Accel-Buffering"))
	require.Equal(t, "no-cache", s.resp.Header.Get("Cache-Control"))

	code, body := do(t, "POST", ts.URL+"/instance-ai/chat/th1", `{"message": "build it", "researchMode": false}`, nil)
	require.Equal(t, 200, code, body)
	runID := body["runId"].(string)
	require.NotEmpty(t, runID)

	frames := s.until("confirmation-request")
	cr := frames[len(frames)-1].payload()
	require.Equal(t, "tc_del", cr["toolCallId"])
	require.Equal(t, "delete-workflow", cr["toolName"], "named from the run's tool-call")
	require.Equal(t, map[string]any{"workflowId": "wf-123"}, cr["args"])
	require.Equal(t, "warning", cr["severity"])
	require.Equal(t, "Archive workflow 'My Workflow'?", cr["message"])
	require.Equal(t, "approval", cr["inputType"])

	// Suspended, with the debugger still working.
	code, st := do(t, "GET", ts.URL+"/instance-ai/threads/th1/status", "", nil)
	require.Equal(t, 200, code)
	require.Equal(t, true, st["hasActiveRun"])
	require.Equal(t, true, st["isSuspended"])
	require.Equal(t, runID, st["activeRunId"])
	tasks := st["backgroundTasks"].([]any)
	require.Len(t, tasks, 1)
	task := tasks[0].(map[string]any)
	require.Equal(t, "execution debugger", task["role"])
	require.Greater(t, task["startedAt"].(float64), float64(1.7e9))

	// A chat while it waits is refused; the confirmation resumes it.
	code, _ = do(t, "POST", ts.URL+"/instance-ai/chat/th1", `{"message": "again"}`, nil)
	require.Equal(t, 409, code)
	code, body = do(t, "POST", ts.URL+"/instance-ai/confirm/"+cr["requestId"].(string), `{"approved": true}`, nil)
	require.Equal(t, 200, code, body)
	require.Equal(t, map[string]any{"ok": true}, body)
	code, _ = do(t, "POST", ts.URL+"/instance-ai/confirm/"+cr["requestId"].(string), `{"approved": true}`, nil)
	require.Equal(t, 404, code, "answered already")
	frames = append(frames, s.until("run-finish")...)

	seen := map[string]frame{}
	for _, f := range frames {
		require.Equal(t, runID, f.data["runId"], "every event carries the run's id: %v", f.data)
		require.NotZero(t, f.id)
		if _, ok := seen[f.typ()]; !ok {
			seen[f.typ()] = f
		}
	}
	for _, typ := range []string{"run-start", "run-finish", "text-delta", "reasoning-delta", "tool-call", "tool-result", "tool-error",
		"agent-spawned", "agent-completed", "confirmation-request", "tasks-update", "status", "error", "thread-title-updated", "filesystem-request"} {
		require.Contains(t, seen, typ)
	}
	require.Equal(t, "run-start", frames[0].typ(), "always the first event of a run")
	root := frames[0].data["agentId"]
	require.Equal(t, map[string]any{"status": "completed"}, frames[len(frames)-1].payload())
	require.Equal(t, "Let me ", seen["reasoning-delta"].payload()["text"])
	require.Equal(t, map[string]any{"toolCallId": "tc_list", "toolName": "list-workflows", "args": map[string]any{"limit": float64(10)}}, seen["tool-call"].payload())
	require.Equal(t, "tc_list", seen["tool-result"].payload()["toolCallId"])
	require.Equal(t, map[string]any{"toolCallId": "tc_get", "error": "Workflow not found"}, seen["tool-error"].payload())
	require.Equal(t, map[string]any{"title": "Weather to Slack"}, seen["thread-title-updated"].payload())
	require.Equal(t, map[string]any{"message": "Searching nodes..."}, seen["status"].payload())
	require.Len(t, seen["tasks-update"].payload()["tasks"], 2)
	require.Equal(t, map[string]any{"requestId": "fs1", "operation": "read", "args": map[string]any{"path": "notes.md"}}, seen["filesystem-request"].payload())
	spawned := seen["agent-spawned"]
	require.Equal(t, map[string]any{"parentId": root, "role": "workflow builder", "tools": []any{"create-workflow", "list-nodes"}}, spawned.payload())
	require.Equal(t, map[string]any{"role": "workflow builder", "result": "Created wf-123 with 3 nodes"}, seen["agent-completed"].payload())
	require.Equal(t, "LLM provider unavailable", seen["error"].payload()["content"])
	require.NotEqual(t, root, seen["error"].data["agentId"], "the debugger's error is the debugger's")
	for _, f := range frames {
		require.NotEqual(t, "progress", f.typ())
	}

	want := &agentNode{Role: "orchestrator", Status: "completed", Text: "You have 3 workflows. Done!", Tools: []string{"list-workflows", "get-workflow", "delegate", "delete-workflow"},
		Children: []*agentNode{
			{Role: "workflow builder", Status: "completed", Text: "Created wf-123 with 3 nodes", Tools: []string{"create-workflow"}},
			{Role: "execution debugger", Status: "completed"},
		}}
	require.Equal(t, want, buildTree(frames))

	// Session restore: the messages rebuild the conversation and its tree.
	code, ms := do(t, "GET", ts.URL+"/instance-ai/threads/th1/messages", "", nil)
	require.Equal(t, 200, code)
	require.Equal(t, "th1", ms["threadId"])
	require.Equal(t, float64(frames[len(frames)-1].id+1), ms["nextEventId"], "the cursor after the last event")
	msgs := ms["messages"].([]any)
	require.Len(t, msgs, 2)
	user, answer := msgs[0].(map[string]any), msgs[1].(map[string]any)
	require.Equal(t, "user", user["role"])
	require.Equal(t, "build it", user["content"])
	require.Equal(t, "assistant", answer["role"])
	require.Equal(t, "You have 3 workflows. Done!", answer["content"])
	require.Equal(t, "Let me check.", answer["reasoning"])
	require.Equal(t, false, answer["isStreaming"])
	tree := answer["agentTree"].(map[string]any)
	require.Equal(t, root, tree["agentId"])
	require.Equal(t, "completed", tree["status"])
	calls := tree["toolCalls"].([]any)
	require.Len(t, calls, 4)
	require.Equal(t, "Workflow not found", calls[1].(map[string]any)["error"])
	require.Equal(t, map[string]any{"archived": true}, calls[3].(map[string]any)["result"])
	require.Equal(t, false, calls[3].(map[string]any)["isLoading"])
	kids := tree["children"].([]any)
	require.Len(t, kids, 2)
	require.Equal(t, "Created wf-123 with 3 nodes", kids[0].(map[string]any)["textContent"])
	require.Equal(t, "error", kids[1].(map[string]any)["status"])

	code, st = do(t, "GET", ts.URL+"/instance-ai/threads/th1/status", "", nil)
	require.Equal(t, 200, code)
	require.Equal(t, map[string]any{"hasActiveRun": false, "isSuspended": false, "backgroundTasks": []any{}}, st)

	// Connected from the restored cursor, the stream carries only what
	// comes next: the next run.
	s2 := open(t, ts.URL+"/instance-ai/events/th1?lastEventId="+strconv.FormatUint(uint64(ms["nextEventId"].(float64))-1, 10), nil)
	code, body = do(t, "POST", ts.URL+"/instance-ai/chat/th1", `{"message": "fail"}`, nil)
	require.Equal(t, 200, code, body)
	f := s2.next()
	require.Equal(t, "run-start", f.typ())
	require.Equal(t, body["runId"], f.data["runId"])
	next := s2.until("confirmation-request")
	cr = next[len(next)-1].payload()
	code, _ = do(t, "POST", ts.URL+"/instance-ai/confirm/"+cr["requestId"].(string), `{"approved": false}`, nil)
	require.Equal(t, 200, code)
	next = s2.until("run-finish")
	denied := false
	for _, f := range next {
		if f.typ() == "tool-error" && f.payload()["toolCallId"] == "tc_del" {
			denied = f.payload()["error"] == "denied by the user"
		}
	}
	require.True(t, denied, "a denial makes the tool's tool-error")
	require.Equal(t, map[string]any{"status": "error", "reason": "LLM provider unavailable"}, next[len(next)-1].payload())
}

// TestInstanceAIResume: Last-Event-ID and ?lastEventId replay the events
// after the cursor, nothing lost or repeated (the header wins over the
// query); no cursor replays the whole history; a run started through the
// protocol's own wire shows here.
func TestInstanceAIResume(t *testing.T) {
	ts, _ := start(t, server.Config{}, transport.Options{})
	// The run is the built-in demo's, started with the protocol's command.
	code, body := do(t, "POST", ts.URL+"/threads/th2/commands", `{"id": 1, "method": "run.start", "params": {"assistant_id": "demo", "input": {"messages": [{"role": "user", "content": "hi"}]}}}`, nil)
	require.Equal(t, 200, code, body)
	s := open(t, ts.URL+"/instance-ai/events/th2", nil)
	first := s.until("confirmation-request")
	cr := first[len(first)-1].payload()
	require.Equal(t, "research", cr["toolName"])
	require.Equal(t, "Use the research result?", cr["message"])
	code, _ = do(t, "POST", ts.URL+"/instance-ai/confirm/"+cr["requestId"].(string), `{"approved": true}`, nil)
	require.Equal(t, 200, code)
	all := append(first, s.until("run-finish")...)
	require.Equal(t, "completed", all[len(all)-1].payload()["status"])
	require.Equal(t, "researcher", buildTree(all).Children[0].Role)

	for _, cut := range []int{0, 3, len(all) / 2, len(all) - 2} {
		after := strconv.FormatUint(all[cut].id, 10)
		for _, how := range []struct {
			url    string
			header http.Header
		}{
			{"/instance-ai/events/th2", http.Header{"Last-Event-Id": {after}}},
			{"/instance-ai/events/th2?lastEventId=" + after, nil},
			{"/instance-ai/events/th2?lastEventId=1", http.Header{"Last-Event-Id": {after}}},
		} {
			r := open(t, ts.URL+how.url, how.header)
			got := r.until("run-finish")
			require.Equal(t, all[cut+1:], got, "resumed after %s (%s)", after, how.url)
			r.close()
		}
	}
	again := open(t, ts.URL+"/instance-ai/events/th2", nil)
	require.Equal(t, all, again.until("run-finish"), "no cursor: the whole history")
}

// TestInstanceAICancel: cancel is idempotent and ends the run with
// run-finish cancelled / user_cancelled; a second chat while a run is
// active is 409; after the cancel a new chat runs.
func TestInstanceAICancel(t *testing.T) {
	ts, _ := start(t, server.Config{}, transport.Options{})
	code, body := do(t, "POST", ts.URL+"/instance-ai/chat/th3/cancel", "", nil)
	require.Equal(t, 200, code, body)
	require.Equal(t, map[string]any{"cancelled": false}, body, "no such thread: nothing to cancel")
	s := open(t, ts.URL+"/instance-ai/events/th3", nil)
	code, body = do(t, "POST", ts.URL+"/instance-ai/chat/th3", `{"message": "wait"}`, nil)
	require.Equal(t, 200, code, body)
	code, _ = do(t, "POST", ts.URL+"/instance-ai/chat/th3", `{"message": "again"}`, nil)
	require.Equal(t, 409, code)
	code, _ = do(t, "GET", ts.URL+"/instance-ai/threads/th3/status", "", nil)
	require.Equal(t, 200, code)
	code, body = do(t, "POST", ts.URL+"/instance-ai/chat/th3/cancel", "", nil)
	require.Equal(t, 200, code)
	require.Equal(t, map[string]any{"cancelled": true}, body)
	frames := s.until("run-finish")
	require.Equal(t, map[string]any{"status": "cancelled", "reason": "user_cancelled"}, frames[len(frames)-1].payload())
	code, body = do(t, "POST", ts.URL+"/instance-ai/chat/th3/cancel", "", nil)
	require.Equal(t, 200, code)
	require.Equal(t, map[string]any{"cancelled": false}, body, "cancelling again changes nothing")
	code, body = do(t, "POST", ts.URL+"/instance-ai/chat/th3", `{"message": "hello"}`, nil)
	require.Equal(t, 200, code, body)
	require.Equal(t, body["runId"], s.until("run-start")[0].data["runId"])
}

// TestInstanceAIHistoryTrimmed: when the thread's oldest events are no
// longer kept, a stream from the start, or from a cursor before them,
// begins with an error event (statusCode 410, no id) saying which are
// gone, and the frames of a run whose run-start is gone say run-unknown;
// a reader that joins so, mid-run, never makes a reader that knows the
// run get run-unknown. A cursor past the thread's last event (from before
// a restart) gets the same notice and the history from the start.
func TestInstanceAIHistoryTrimmed(t *testing.T) {
	ts, _ := start(t, server.Config{BufferEvents: 16}, transport.Options{})
	s := open(t, ts.URL+"/instance-ai/events/th4", nil)
	code, started := do(t, "POST", ts.URL+"/instance-ai/chat/th4", `{"message": "x"}`, nil)
	require.Equal(t, 200, code)
	frames := s.until("confirmation-request")

	// A reader joins while the run waits: its run-start is gone.
	late := open(t, ts.URL+"/instance-ai/events/th4", nil)
	gone := late.next()
	require.Equal(t, "error", gone.typ())
	require.Zero(t, gone.id)
	require.Equal(t, float64(410), gone.payload()["statusCode"])
	require.Contains(t, gone.payload()["content"], "no longer kept")
	replayed := late.until("confirmation-request")
	require.Equal(t, "run-unknown", replayed[0].data["runId"])

	code, _ = do(t, "POST", ts.URL+"/instance-ai/confirm/"+frames[len(frames)-1].payload()["requestId"].(string), `{"approved": true}`, nil)
	require.Equal(t, 200, code)
	for _, f := range s.until("run-finish") {
		require.Equal(t, started["runId"], f.data["runId"], "the reader that saw the run-start")
	}
	rest := late.until("run-finish")
	require.Equal(t, "completed", rest[len(rest)-1].payload()["status"])

	r := open(t, ts.URL+"/instance-ai/events/th4?lastEventId=100000", nil)
	gone = r.next()
	require.Equal(t, float64(410), gone.payload()["statusCode"])
	require.Contains(t, gone.payload()["content"], "past this thread's last")
}

// TestInstanceAIRefusals: bad input gets a clear error and changes
// nothing.
func TestInstanceAIRefusals(t *testing.T) {
	ts, _ := start(t, server.Config{}, transport.Options{})
	for _, c := range []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/instance-ai/chat/th5", `{"text": "no message"}`, 400},
		{"POST", "/instance-ai/chat/th5", `{"message": 7}`, 400},
		{"POST", "/instance-ai/chat/th5", `not json`, 400},
		{"POST", "/instance-ai/chat/th5", `{"message": "x", "extra": ` + strings.Repeat("[", 9000) + strings.Repeat("]", 9000) + `}`, 400},
		{"POST", "/instance-ai/chat/th5", `{"message": "x", "extra": [` + strings.TrimSuffix(strings.Repeat("1,", 20_000), ",") + `]}`, 400},
		{"POST", "/instance-ai/confirm/th5~int_x", `{"approved": ` + strings.Repeat("[", 9000) + strings.Repeat("]", 9000) + `}`, 400},
		{"POST", "/instance-ai/chat/bad%20id", `{"message": "x"}`, 400},
		{"POST", "/instance-ai/confirm/no-tilde", `{"approved": true}`, 400},
		{"POST", "/instance-ai/confirm/th5~int_x", `{"approved": true}`, 404},
		{"GET", "/instance-ai/threads/bad%20id/messages", "", 400},
	} {
		code, body := do(t, c.method, ts.URL+c.path, c.body, nil)
		require.Equal(t, c.want, code, "%s %s %s: %v", c.method, c.path, c.body, body)
		require.NotEmpty(t, body["error"], "an ErrorResponse")
	}
	resp, err := http.Post(ts.URL+"/instance-ai/chat/th5", "text/plain", strings.NewReader(`{"message": "x"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 415, resp.StatusCode)
	r, err := http.NewRequest("GET", ts.URL+"/instance-ai/events/th5", nil)
	require.NoError(t, err)
	r.Header.Set("Last-Event-ID", "abc")
	resp, err = http.DefaultClient.Do(r)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 400, resp.StatusCode)
	// A thread nobody wrote: empty messages and an idle status.
	code, body := do(t, "GET", ts.URL+"/instance-ai/threads/never/messages", "", nil)
	require.Equal(t, 200, code)
	require.Equal(t, map[string]any{"threadId": "never", "messages": []any{}, "nextEventId": float64(1)}, body)
	code, body = do(t, "GET", ts.URL+"/instance-ai/threads/never/status", "", nil)
	require.Equal(t, 200, code)
	require.Equal(t, false, body["hasActiveRun"])
}

// TestInstanceAIAuth: with authentication on, no credential is 401 and
// another principal's thread is 403 on every route; its owner uses them.
func TestInstanceAIAuth(t *testing.T) {
	keys, err := auth.New(context.Background(), auth.Config{APIKeys: map[string]auth.Principal{"ka": {Subject: "alice"}, "kb": {Subject: "bob"}}})
	require.NoError(t, err)
	ts, _ := start(t, server.Config{}, transport.Options{Auth: keys})
	alice, bob := http.Header{"X-Api-Key": {"ka"}}, http.Header{"X-Api-Key": {"kb"}}
	code, _ := do(t, "POST", ts.URL+"/instance-ai/chat/alices", `{"message": "x"}`, nil)
	require.Equal(t, 401, code)
	code, body := do(t, "POST", ts.URL+"/instance-ai/chat/alices", `{"message": "x"}`, alice)
	require.Equal(t, 200, code, body)
	s := open(t, ts.URL+"/instance-ai/events/alices", alice)
	frames := s.until("confirmation-request")
	reqID := frames[len(frames)-1].payload()["requestId"].(string)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/instance-ai/chat/alices", `{"message": "x"}`},
		{"POST", "/instance-ai/chat/alices/cancel", ""},
		{"POST", "/instance-ai/confirm/" + reqID, `{"approved": true}`},
		{"GET", "/instance-ai/events/alices", ""},
		{"GET", "/instance-ai/threads/alices/messages", ""},
		{"GET", "/instance-ai/threads/alices/status", ""},
	} {
		code, _ := do(t, c.method, ts.URL+c.path, c.body, bob)
		require.Equal(t, 403, code, "%s %s as bob", c.method, c.path)
		code, _ = do(t, c.method, ts.URL+c.path, c.body, nil)
		require.Equal(t, 401, code, "%s %s with no credential", c.method, c.path)
	}
	code, _ = do(t, "POST", ts.URL+"/instance-ai/confirm/"+reqID, `{"approved": true}`, alice)
	require.Equal(t, 200, code)
	rest := s.until("run-finish")
	require.Equal(t, "completed", rest[len(rest)-1].payload()["status"])
}

// TestInstanceAIKeepAlive: a quiet stream gets comment lines.
func TestInstanceAIKeepAlive(t *testing.T) {
	url := wiretest.Serve(t, server.New(server.Config{}), 30*time.Millisecond, func(c wire.Context) wire.Wire {
		return instanceai.New(c, instanceai.Options{})
	})
	req, _ := http.NewRequest("GET", url+"/instance-ai/events/quiet", nil)
	wiretest.KeepAlive(t, req, ": keep-alive")
}

// TestInstanceAIFullHistoryOnDisk: on the disk engine a stream without a
// cursor replays the thread's whole history, longer than the hot cache
// in memory, from the disk: no gone-events frame, the run from its
// run-start to its run-finish.
func TestInstanceAIFullHistoryOnDisk(t *testing.T) {
	eng, err := diskstore.Open(diskstore.Options{Dir: t.TempDir(), BufferEvents: 4})
	require.NoError(t, err)
	ts, _ := start(t, server.Config{Engine: eng}, transport.Options{})
	s := open(t, ts.URL+"/instance-ai/events/th9", nil)
	code, _ := do(t, "POST", ts.URL+"/instance-ai/chat/th9", `{"message": "x"}`, nil)
	require.Equal(t, 200, code)
	frames := s.until("confirmation-request")
	code, _ = do(t, "POST", ts.URL+"/instance-ai/confirm/"+frames[len(frames)-1].payload()["requestId"].(string), `{"approved": true}`, nil)
	require.Equal(t, 200, code)
	live := append(frames, s.until("run-finish")...)
	require.Greater(t, len(live), 4, "more than the hot cache holds")
	require.Less(t, eng.Stores().Log.Len(context.Background(), "th9"), int(live[len(live)-1].id), "the hot cache holds less than the run")

	again := open(t, ts.URL+"/instance-ai/events/th9", nil).until("run-finish")
	require.Equal(t, "run-start", again[0].typ(), "from the first event, read from the disk")
	require.Equal(t, len(live), len(again))
	for i := range live {
		require.Equal(t, live[i].id, again[i].id)
		require.Equal(t, live[i].data, again[i].data)
	}
}

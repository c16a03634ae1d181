package langgraph_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/agentstream/agentstream/transport/langgraph"
)

// sseFrames reads a response's SSE frames (event, data, id) until fn says
// stop or the stream ends, and closes it.
func sseFrames(resp *http.Response, fn func(event, data, id string) bool) {
	defer resp.Body.Close()
	var event, data, id string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = line[7:]
		case strings.HasPrefix(line, "data: "):
			data = line[6:]
		case strings.HasPrefix(line, "id: "):
			id = line[4:]
		case line == "" && event != "":
			if !fn(event, data, id) {
				return
			}
			event, data, id = "", "", ""
		}
	}
}

type sseFrame struct{ event, data string }

// streamAll posts a run stream and reads it to its end.
func streamAll(t *testing.T, url, body string) []sseFrame {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	var out []sseFrame
	sseFrames(resp, func(event, data, _ string) bool {
		out = append(out, sseFrame{event, data})
		return true
	})
	return out
}

func decode(t *testing.T, data string) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(data), &m), data)
	return m
}

// TestRunStreamModesShowTheSteps: the modes tasks, checkpoints and debug,
// derived from the run's updates, checkpoints and interrupts: the demo's
// interrupt is a task whose result carries it; resumed, its update is a
// task with its values, and its checkpoint is the thread's (the id
// GET /state reads) with the values it saved.
func TestRunStreamModesShowTheSteps(t *testing.T) {
	n := start(t, server.Config{}, transport.Options{})
	url := n.url + "/threads/steps/runs/stream"
	asked := streamAll(t, url, `{"assistant_id": "demo", "input": {"messages": [{"role": "user", "content": "q"}]}, "stream_mode": ["tasks", "debug"]}`)
	var tasks []map[string]any
	var debug []string
	for _, f := range asked {
		switch f.event {
		case "tasks":
			tasks = append(tasks, decode(t, f.data))
		case "debug":
			d := decode(t, f.data)
			debug = append(debug, d["type"].(string))
			assert.NotEmpty(t, d["timestamp"])
			assert.NotNil(t, d["payload"])
		}
	}
	require.Len(t, tasks, 2, "the interrupted task: its start and its result")
	assert.Equal(t, tasks[0]["id"], tasks[1]["id"])
	assert.Equal(t, "demo", tasks[0]["name"])
	interrupts := tasks[1]["interrupts"].([]any)
	require.Len(t, interrupts, 1)
	assert.Equal(t, "Use the research result?", interrupts[0].(map[string]any)["value"].(map[string]any)["question"])
	assert.Equal(t, []string{"checkpoint", "task", "task_result"}, debug, "the checkpoint with the question, then the task")

	resumed := streamAll(t, url, `{"assistant_id": "demo", "command": {"resume": {"approved": true}}, "stream_mode": ["tasks", "checkpoints", "debug"]}`)
	var results, checkpoints []map[string]any
	debug = nil
	for _, f := range resumed {
		switch f.event {
		case "tasks":
			if d := decode(t, f.data); d["result"] != nil {
				results = append(results, d)
			}
		case "checkpoints":
			checkpoints = append(checkpoints, decode(t, f.data))
		case "debug":
			debug = append(debug, decode(t, f.data)["type"].(string))
		}
	}
	require.Len(t, results, 1)
	assert.Equal(t, "agent", results[0]["name"])
	assert.Equal(t, map[string]any{"approved": true}, results[0]["result"])
	require.Len(t, checkpoints, 1)
	cp := checkpoints[0]
	assert.Equal(t, true, cp["values"].(map[string]any)["approved"])
	assert.Equal(t, []any{}, cp["next"])
	var state map[string]any
	require.Equal(t, 200, call(t, "GET", n.url+"/threads/steps/state", "", "", &state))
	assert.Equal(t, state["checkpoint"].(map[string]any)["checkpoint_id"], cp["config"].(map[string]any)["configurable"].(map[string]any)["checkpoint_id"],
		"the streamed checkpoint is the thread's")
	assert.Equal(t, []string{"task", "task_result", "checkpoint"}, debug)
}

// TestRunStreamSubgraphs: with stream_subgraphs a subagent's frames are
// named MODE|NAMESPACE (the demo's researcher: its progress and its
// message, the message's metadata naming the namespace); without it only
// the root graph's frames are streamed.
func TestRunStreamSubgraphs(t *testing.T) {
	n := start(t, server.Config{}, transport.Options{})
	kinds := func(frames []sseFrame) map[string]int {
		m := map[string]int{}
		for _, f := range frames {
			m[f.event]++
		}
		return m
	}
	stream := func(thread string, subgraphs bool) []sseFrame {
		b, _ := json.Marshal(map[string]any{"assistant_id": "demo", "input": map[string]any{"messages": []any{map[string]any{"role": "user", "content": "q"}}},
			"stream_mode": []string{"custom", "messages-tuple", "updates"}, "stream_subgraphs": subgraphs})
		return streamAll(t, n.url+"/threads/"+thread+"/runs/stream", string(b))
	}
	deep := stream("sub-1", true)
	k := kinds(deep)
	assert.Equal(t, 3, k["custom|researcher"], "the researcher's three progress events")
	assert.Positive(t, k["messages|researcher"])
	assert.Positive(t, k["messages"], "the root's own message")
	assert.Equal(t, 1, k["updates"], "the interrupt")
	for _, f := range deep {
		if f.event == "messages|researcher" {
			var tuple []map[string]any
			require.NoError(t, json.Unmarshal([]byte(f.data), &tuple))
			assert.Equal(t, "researcher", tuple[1]["langgraph_checkpoint_ns"])
		}
	}
	flat := kinds(stream("sub-2", false))
	for kind := range flat {
		assert.NotContains(t, kind, "|", "no subgraph frames without stream_subgraphs")
	}
	assert.Zero(t, flat["custom"], "the demo's custom events are all the researcher's")
	assert.Positive(t, flat["messages"])
}

// TestOnDisconnectCancel: a stream started with on_disconnect "cancel"
// (or a join with cancel_on_disconnect=1) whose client goes before the
// run ends cancels the run; with "continue", the default, the run ends
// by itself.
func TestOnDisconnectCancel(t *testing.T) {
	n := start(t, server.Config{}, transport.Options{})
	const words = "a b c d e f g h i j k l"
	run := func(thread, extra string) (string, *http.Response) {
		resp, err := http.Post(n.url+"/threads/"+thread+"/runs/stream", "application/json", strings.NewReader(
			`{"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "`+words+`"}]}, "config": {"token_delay_ms": 40}, "stream_mode": "messages-tuple"`+extra+`}`))
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
		return strings.TrimPrefix(resp.Header.Get("Content-Location"), "/threads/"+thread+"/runs/"), resp
	}
	cut := func(resp *http.Response) {
		got := 0
		sseFrames(resp, func(event, _, _ string) bool {
			if event == "messages" {
				got++
			}
			return got < 2 // then the client goes
		})
	}
	ended := func(thread, runID string) string {
		var rec langgraph.LgRun
		require.Eventually(t, func() bool {
			return call(t, "GET", n.url+"/threads/"+thread+"/runs/"+runID, "", "", &rec) == 200 && rec.Status != "running" && rec.Status != "pending"
		}, 10*time.Second, 10*time.Millisecond)
		return string(rec.Status)
	}
	answered := func(thread string) bool {
		var state map[string]any
		require.Equal(t, 200, call(t, "GET", n.url+"/threads/"+thread+"/state", "", "", &state))
		msgs, _ := state["values"].(map[string]any)["messages"].([]any)
		return len(msgs) == 2
	}

	id, resp := run("od-cancel", `, "on_disconnect": "cancel"`)
	cut(resp)
	assert.Equal(t, "interrupted", ended("od-cancel", id), "cancelled as its client went")
	assert.False(t, answered("od-cancel"))

	id, resp = run("od-continue", "")
	cut(resp)
	assert.Equal(t, "success", ended("od-continue", id), "the run goes on without its client")
	assert.True(t, answered("od-continue"))

	// A join that asks for it cancels too (it streams the default modes,
	// messages-tuple among them).
	id, resp = run("od-join", "")
	resp.Body.Close()
	req, err := http.NewRequest("GET", n.url+"/threads/od-join/runs/"+id+"/stream?cancel_on_disconnect=1", nil)
	require.NoError(t, err)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	cut(resp)
	assert.Equal(t, "interrupted", ended("od-join", id))
	assert.False(t, answered("od-join"))
}

// TestLegacyMessagesShareFramesOnlyWhereTheTextIsTheSame: readers of the
// legacy messages mode share a messages/partial frame only when they hold
// as much of the message: one from the run's start reads the whole text,
// one that joined in the middle of the message only what it saw.
func TestLegacyMessagesShareFramesOnlyWhereTheTextIsTheSame(t *testing.T) {
	n := start(t, server.Config{}, transport.Options{})
	const words = "a b c d e f g h i j k l"
	resp, err := http.Post(n.url+"/threads/legacy/runs/stream", "application/json", strings.NewReader(
		`{"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "`+words+`"}]}, "config": {"token_delay_ms": 30}, "stream_mode": "messages"}`))
	require.NoError(t, err)
	runID := strings.TrimPrefix(resp.Header.Get("Content-Location"), "/threads/legacy/runs/")
	partials := func(resp *http.Response, stop int) []string {
		var out []string
		sseFrames(resp, func(event, data, _ string) bool {
			if event == "messages/partial" {
				var m []map[string]any
				require.NoError(t, json.Unmarshal([]byte(data), &m))
				out = append(out, m[0]["content"].(string))
			}
			return stop == 0 || len(out) < stop
		})
		return out
	}
	first := partials(resp, 4) // the run has streamed 4 words
	join := func(lastEventID string) []string {
		req, err := http.NewRequest("GET", n.url+"/threads/legacy/runs/"+runID+"/stream?stream_mode=messages", nil)
		require.NoError(t, err)
		if lastEventID != "" {
			req.Header.Set("Last-Event-ID", lastEventID)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		return partials(resp, 0)
	}
	type result struct{ whole, late []string }
	done := make(chan result)
	go func() {
		var r result
		r.late = join("") // from now: mid-message
		done <- r
	}()
	whole := join("-1")
	r := <-done
	require.Equal(t, "a ", first[0])
	require.Equal(t, words, whole[len(whole)-1], "from the run's start: the whole text")
	require.NotEmpty(t, r.late)
	last := r.late[len(r.late)-1]
	require.Less(t, len(last), len(words), "joined mid-message: only what it saw")
	require.True(t, strings.HasSuffix(words, last), "%q", last)
}

// TestRunStreamOfLostEventsEndsAtOnce: a run whose record says it ended
// but whose events the thread's stream no longer holds (a crash lost
// them, or the retention policy dropped them) is joined from its start
// (Last-Event-ID -1, as useStream sends): the stream ends at once with an
// error frame naming what was lost, on each route that streams a run,
// where it used to stay open with nothing to send. A run whose events
// are kept replays as before.
func TestRunStreamOfLostEventsEndsAtOnce(t *testing.T) {
	onEachEngine(t, func(t *testing.T, n *node) {
		const thread = "5b0e4f8e-5d2a-4c1b-9a63-2f8d7c6b5a43"
		require.Equal(t, 200, call(t, "POST", n.url+"/threads", `{"thread_id": "`+thread+`"}`, "", nil))
		require.Equal(t, 200, call(t, "POST", n.url+"/threads/"+thread+"/runs/wait", `{"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "kept"}]}}`, "", nil))
		var runs []langgraph.LgRun
		require.Equal(t, 200, call(t, "GET", n.url+"/threads/"+thread+"/runs", "", "", &runs))
		require.Len(t, runs, 1)
		last := n.srv.LastSeq(thread)
		rc := n.srv.Resources().Stores().Runs
		now := time.Now().UTC()
		// Its events after After are gone: nothing follows After.
		gone := server.RunRecord{ID: "0e1c2f3a-0000-4000-8000-000000000001", Thread: thread, Assistant: "echo", Status: server.RunSuccess, CreatedAt: now, UpdatedAt: now, After: last}
		// Its start is gone: what follows After is the middle of another run.
		replaced := server.RunRecord{ID: "0e1c2f3a-0000-4000-8000-000000000002", Thread: thread, Assistant: "echo", Status: server.RunError, CreatedAt: now, UpdatedAt: now, After: 1}
		for _, rec := range []server.RunRecord{gone, replaced} {
			require.NoError(t, rc.SetRun(context.Background(), rec))
		}
		join := func(path string) (events []string, data string) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, "GET", n.url+path, nil)
			require.NoError(t, err)
			req.Header.Set("Last-Event-ID", "-1")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			require.Equal(t, 200, resp.StatusCode)
			sseFrames(resp, func(event, d, _ string) bool {
				events = append(events, event)
				if event == "error" {
					data = d
				}
				return true
			})
			require.NoError(t, ctx.Err(), "the stream of %s did not end", path)
			return events, data
		}
		for _, rec := range []server.RunRecord{gone, replaced} {
			for _, path := range []string{"/threads/" + thread + "/runs/" + rec.ID + "/stream", "/runs/" + rec.ID + "/stream"} {
				events, data := join(path)
				require.Equal(t, []string{"error"}, events, path)
				require.Contains(t, data, "RunEventsLost", path)
				require.Contains(t, data, rec.Status, path)
			}
		}
		events, data := join("/threads/" + thread + "/runs/" + runs[0].RunID + "/stream")
		require.Empty(t, data, "a run whose events are kept")
		require.Contains(t, events, "values")
	})
}

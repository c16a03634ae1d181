package langgraph_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/agentstream/agentstream/transport/langgraph"
)

// TestRunBatches: POST /runs/batch starts each run (stateless, or on its
// thread_id) and answers them in order; one bad run refuses the batch
// before any starts, naming its place.
func TestRunBatches(t *testing.T) {
	n := start(t, server.Config{}, transport.Options{})
	var runs []langgraph.LgRun
	require.Equal(t, 200, call(t, "POST", n.url+"/runs/batch", `[
		{"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "a"}]}},
		{"assistant_id": "echo", "thread_id": "b1", "input": {"messages": [{"role": "user", "content": "b"}]}},
		{"assistantId": "echo", "onCompletion": "keep", "input": {"messages": [{"role": "user", "content": "c"}]}}]`, "", &runs))
	require.Len(t, runs, 3)
	require.Equal(t, "b1", runs[1].ThreadID)
	require.Eventually(t, func() bool { return call(t, "GET", n.url+"/threads/"+runs[0].ThreadID, "", "", nil) == 404 }, 5*time.Second, 10*time.Millisecond, "a stateless run's thread goes as it ends")
	var values map[string]any
	require.Equal(t, 200, call(t, "GET", n.url+"/threads/b1/runs/"+runs[1].RunID+"/join", "", "", &values))
	require.Len(t, values["messages"], 2)
	require.Equal(t, 200, call(t, "GET", n.url+"/threads/"+runs[2].ThreadID+"/runs/"+runs[2].RunID+"/join", "", "", &values))
	time.Sleep(50 * time.Millisecond)
	require.Equal(t, 200, call(t, "GET", n.url+"/threads/"+runs[2].ThreadID, "", "", nil), "onCompletion (as the SDK sends it in a batch) keep: kept")

	var e langgraph.LgError
	require.Equal(t, 422, call(t, "POST", n.url+"/runs/batch", `[{"assistant_id": "echo", "thread_id": "b2", "input": {}}, {"assistant_id": "echo", "nope": 1}]`, "", nil))
	require.Equal(t, 404, call(t, "GET", n.url+"/threads/b2", "", "", &e), "nothing started")
	require.Equal(t, 422, call(t, "POST", n.url+"/runs/batch", `[]`, "", nil))
	require.Equal(t, 404, call(t, "POST", n.url+"/runs/batch", `[{"assistant_id": "nope"}]`, "", nil))
}

// TestCancelMany: POST /runs/cancel cancels the runs named, or those of
// a status of one thread or of every thread; rollback puts the state back
// and deletes them.
func TestCancelMany(t *testing.T) {
	n := start(t, server.Config{}, transport.Options{})
	long := `{"assistant_id": "firehose", "input": {"count": 100000, "rate": 50}}`
	var r1, r2, r3 langgraph.LgRun
	require.Equal(t, 200, call(t, "POST", n.url+"/threads/c1/runs", long, "", &r1))
	require.Equal(t, 200, call(t, "POST", n.url+"/threads/c2/runs", long, "", &r2))
	require.Equal(t, 200, call(t, "POST", n.url+"/threads/c3/runs", long, "", &r3))
	status := func(thread, run string) string {
		var rec langgraph.LgRun
		if call(t, "GET", n.url+"/threads/"+thread+"/runs/"+run, "", "", &rec) != 200 {
			return "gone"
		}
		return string(rec.Status)
	}
	for _, p := range [][2]string{{"c1", r1.RunID}, {"c2", r2.RunID}, {"c3", r3.RunID}} {
		require.Eventually(t, func() bool { return status(p[0], p[1]) == "running" }, 5*time.Second, 10*time.Millisecond)
	}
	require.Equal(t, 204, call(t, "POST", n.url+"/runs/cancel", `{"run_ids": ["`+r1.RunID+`"]}`, "", nil))
	require.Eventually(t, func() bool { return status("c1", r1.RunID) == "interrupted" || status("c1", r1.RunID) == "error" }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, "running", status("c2", r2.RunID), "only the one named")
	require.Equal(t, 204, call(t, "POST", n.url+"/runs/cancel", `{"thread_id": "c2", "status": "running"}`, "", nil))
	require.Eventually(t, func() bool { return status("c2", r2.RunID) != "running" }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, "running", status("c3", r3.RunID))
	require.Equal(t, 204, call(t, "POST", n.url+"/runs/cancel?action=rollback", `{"status": "all"}`, "", nil))
	require.Equal(t, "gone", status("c3", r3.RunID), "rolled back and deleted")

	require.Equal(t, 422, call(t, "POST", n.url+"/runs/cancel", `{}`, "", nil))
	require.Equal(t, 422, call(t, "POST", n.url+"/runs/cancel?action=undo", `{"status": "all"}`, "", nil))
	require.Equal(t, 404, call(t, "POST", n.url+"/runs/cancel", `{"run_ids": ["run_nope"]}`, "", nil))
}

// TestPruneThreads: POST /threads/prune deletes the threads named and
// counts them; a thread with a run going on refuses it before any is
// deleted; keep_latest is refused.
func TestPruneThreads(t *testing.T) {
	n := start(t, server.Config{}, transport.Options{})
	for _, id := range []string{"p1", "p2"} {
		require.Equal(t, 200, call(t, "POST", n.url+"/threads", `{"thread_id": "`+id+`"}`, "", nil))
	}
	var busy langgraph.LgRun
	require.Equal(t, 200, call(t, "POST", n.url+"/threads/p3/runs", `{"assistant_id": "firehose", "input": {"count": 100000, "rate": 50}}`, "", &busy))
	require.Eventually(t, func() bool {
		var th langgraph.LgThread
		return call(t, "GET", n.url+"/threads/p3", "", "", &th) == 200 && th.Status == "busy"
	}, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, 409, call(t, "POST", n.url+"/threads/prune", `{"thread_ids": ["p1", "p3"]}`, "", nil))
	require.Equal(t, 200, call(t, "GET", n.url+"/threads/p1", "", "", nil), "nothing was pruned")
	var out langgraph.LgThreadsPruned
	require.Equal(t, 200, call(t, "POST", n.url+"/threads/prune", `{"thread_ids": ["p1", "p2", "never"]}`, "", &out))
	require.Equal(t, uint64(2), out.PrunedCount)
	require.Equal(t, 404, call(t, "GET", n.url+"/threads/p1", "", "", nil))
	require.Equal(t, 422, call(t, "POST", n.url+"/threads/prune", `{"thread_ids": ["p3"], "strategy": "keep_latest"}`, "", nil))
	require.Equal(t, 202, call(t, "POST", n.url+"/threads/p3/runs/"+busy.RunID+"/cancel?wait=true", "", "", nil))
}

// TestThreadTTL: a thread made (or updated) with a ttl is deleted once it
// ran out after its last change, on each engine; one whose run goes on is
// kept until it ends; an update moves its end.
func TestThreadTTL(t *testing.T) {
	cfg := server.Config{ThreadExpiryCheck: 50 * time.Millisecond}
	onEachEngineWith(t, cfg, func(t *testing.T, n *node) {
		require.Equal(t, 200, call(t, "POST", n.url+"/threads", `{"thread_id": "ttl1", "ttl": {"ttl": 0.02, "strategy": "delete"}}`, "", nil))
		require.Equal(t, 200, call(t, "POST", n.url+"/threads", `{"thread_id": "keep1"}`, "", nil))
		require.Equal(t, 200, call(t, "POST", n.url+"/threads", `{"thread_id": "ttl2"}`, "", nil))
		require.Equal(t, 200, call(t, "PATCH", n.url+"/threads/ttl2", `{"ttl": {"ttl": 0.02}}`, "", nil))
		var busy langgraph.LgRun
		require.Equal(t, 200, call(t, "POST", n.url+"/threads", `{"thread_id": "ttl3", "ttl": {"ttl": 0.02}}`, "", nil))
		require.Equal(t, 200, call(t, "POST", n.url+"/threads/ttl3/runs", `{"assistant_id": "firehose", "input": {"count": 100000, "rate": 50}}`, "", &busy))
		require.Eventually(t, func() bool {
			return call(t, "GET", n.url+"/threads/ttl1", "", "", nil) == 404 && call(t, "GET", n.url+"/threads/ttl2", "", "", nil) == 404
		}, 10*time.Second, 20*time.Millisecond, "gone 1.2 s after their last change")
		require.Equal(t, 200, call(t, "GET", n.url+"/threads/keep1", "", "", nil), "one without a ttl stays")
		require.Equal(t, 200, call(t, "GET", n.url+"/threads/ttl3", "", "", nil), "a run goes on: kept")
		require.Equal(t, 202, call(t, "POST", n.url+"/threads/ttl3/runs/"+busy.RunID+"/cancel?wait=true", "", "", nil))
		require.Eventually(t, func() bool { return call(t, "GET", n.url+"/threads/ttl3", "", "", nil) == 404 }, 10*time.Second, 20*time.Millisecond, "then deleted")
		require.Equal(t, 422, call(t, "POST", n.url+"/threads", `{"ttl": {"ttl": 0.001}}`, "", nil), "under a second")
		require.Equal(t, 422, call(t, "POST", n.url+"/threads", `{"ttl": {"ttl": 5, "strategy": "keep_latest"}}`, "", nil))
		req, _ := http.NewRequest("PATCH", n.url+"/threads/keep1", strings.NewReader(`{"metadata": {"a": 1}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Prefer", "return=minimal") // the SDK's returnMinimal
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 204, resp.StatusCode)
	})
}

// TestPatchState: PATCH /threads/{id}/state merges metadata into the
// newest checkpoint's, on each engine (history shows it; the older
// checkpoints keep theirs); a thread with no checkpoint is 404.
func TestPatchState(t *testing.T) {
	onEachEngine(t, func(t *testing.T, n *node) {
		require.Equal(t, 200, call(t, "POST", n.url+"/threads/ps1/runs/wait", `{"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "x"}]}}`, "", nil))
		require.Equal(t, 204, call(t, "PATCH", n.url+"/threads/ps1/state", `{"metadata": {"reviewed": true, "by": "ann"}}`, "", nil))
		require.Equal(t, 204, call(t, "PATCH", n.url+"/threads/ps1/state", `{"metadata": {"by": "bob"}}`, "", nil))
		var hist []map[string]any
		require.Equal(t, 200, call(t, "POST", n.url+"/threads/ps1/history", `{}`, "", &hist))
		require.Len(t, hist, 2)
		md := hist[0]["metadata"].(map[string]any)
		require.Equal(t, true, md["reviewed"])
		require.Equal(t, "bob", md["by"], "merged, the later over the earlier")
		require.Equal(t, "loop", md["source"], "its own kept")
		require.NotContains(t, hist[1]["metadata"], "reviewed", "only the newest")
		var st map[string]any
		require.Equal(t, 200, call(t, "GET", n.url+"/threads/ps1/state", "", "", &st))
		require.Len(t, st["values"].(map[string]any)["messages"], 2, "the values unchanged")
		require.Equal(t, 200, call(t, "POST", n.url+"/threads", `{"thread_id": "ps2"}`, "", nil))
		require.Equal(t, 404, call(t, "PATCH", n.url+"/threads/ps2/state", `{"metadata": {"a": 1}}`, "", nil))
		require.Equal(t, 404, call(t, "PATCH", n.url+"/threads/ps-none/state", `{"metadata": {"a": 1}}`, "", nil))
	})
}

// TestSelect: select picks the members of assistants.search, runs.list,
// history and state answers (values.KEY one value of a state's); a
// member none has is 422.
func TestSelect(t *testing.T) {
	n := start(t, server.Config{}, transport.Options{})
	require.Equal(t, 200, call(t, "POST", n.url+"/threads/s1/runs/wait", `{"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "x"}]}}`, "", nil))
	var as []map[string]any
	require.Equal(t, 200, call(t, "POST", n.url+"/assistants/search", `{"graph_id": "echo", "select": ["assistant_id", "name"]}`, "", &as))
	require.Equal(t, []map[string]any{{"assistant_id": langgraph.AssistantID("echo"), "name": "echo"}}, as)
	require.Equal(t, 422, call(t, "POST", n.url+"/assistants/search", `{"select": ["nope"]}`, "", nil))
	var runs []map[string]any
	require.Equal(t, 200, call(t, "GET", n.url+"/threads/s1/runs?select=run_id,status", "", "", &runs))
	require.Len(t, runs, 1)
	require.Equal(t, []string{"run_id", "status"}, sortedKeys(runs[0]))
	require.Equal(t, 422, call(t, "GET", n.url+"/threads/s1/runs?select=nope", "", "", nil))
	var hist []map[string]any
	require.Equal(t, 200, call(t, "POST", n.url+"/threads/s1/history", `{"select": ["values.messages", "checkpoint"]}`, "", &hist))
	require.Len(t, hist, 2)
	require.Equal(t, []string{"checkpoint", "values"}, sortedKeys(hist[0]))
	require.Equal(t, []string{"messages"}, sortedKeys(hist[0]["values"].(map[string]any)))
	var st map[string]any
	require.Equal(t, 200, call(t, "GET", n.url+"/threads/s1/state?select=next", "", "", &st))
	require.Equal(t, map[string]any{"next": []any{}}, st)
	require.Equal(t, 422, call(t, "GET", n.url+"/threads/s1/state?select=nope", "", "", nil))
}

func sortedKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestJoinCancelOnDisconnect: runs.join with cancel_on_disconnect=1
// cancels the run when its client goes before the run ends; with 0 the
// run goes on.
func TestJoinCancelOnDisconnect(t *testing.T) {
	n := start(t, server.Config{}, transport.Options{})
	long := `{"assistant_id": "firehose", "input": {"count": 100000, "rate": 50}}`
	join := func(thread, run, cancel string) {
		ctx, stop := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer stop()
		req, _ := http.NewRequestWithContext(ctx, "GET", n.url+"/threads/"+thread+"/runs/"+run+"/join?cancel_on_disconnect="+cancel, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	status := func(thread, run string) string {
		var rec langgraph.LgRun
		require.Equal(t, 200, call(t, "GET", n.url+"/threads/"+thread+"/runs/"+run, "", "", &rec))
		return string(rec.Status)
	}
	var kept, cut langgraph.LgRun
	require.Equal(t, 200, call(t, "POST", n.url+"/threads/j1/runs", long, "", &kept))
	require.Equal(t, 200, call(t, "POST", n.url+"/threads/j2/runs", long, "", &cut))
	join("j1", kept.RunID, "0")
	join("j2", cut.RunID, "1")
	require.Eventually(t, func() bool { return status("j2", cut.RunID) != "running" && status("j2", cut.RunID) != "pending" }, 5*time.Second, 10*time.Millisecond, "cancelled as its client went")
	require.Equal(t, "running", status("j1", kept.RunID), "goes on")
	require.Equal(t, 202, call(t, "POST", n.url+"/threads/j1/runs/"+kept.RunID+"/cancel?wait=1", "", "", nil))
}

package edge_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/edge"
	"github.com/agentstream/agentstream/internal/testkit/lgtest"
	"github.com/agentstream/agentstream/internal/testkit/sdktest"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startEdge runs agentstream in edge mode in front of upstream.
// edgeAuth is the authentication a test's edge has (by test name; none
// when absent).
var edgeAuth = map[string]*auth.Authenticator{}

func startEdge(t *testing.T, upstream string, opts edge.Options) (*httptest.Server, *edge.Edge) {
	return startEdgeWith(t, server.Config{}, upstream, opts)
}

// startEdgeWith is startEdge with the server's config (an engine).
func startEdgeWith(t *testing.T, cfg server.Config, upstream string, opts edge.Options) (*httptest.Server, *edge.Edge) {
	t.Helper()
	return startEdgeOpts(t, cfg, transport.Options{Auth: edgeAuth[t.Name()]}, upstream, opts)
}

// startEdgeOpts is startEdgeWith with the transport's options.
func startEdgeOpts(t *testing.T, cfg server.Config, topts transport.Options, upstream string, opts edge.Options) (*httptest.Server, *edge.Edge) {
	t.Helper()
	opts.URL = upstream
	e, err := edge.New(opts)
	require.NoError(t, err)
	cfg.Upstream = e
	srv := server.New(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, e.Start(ctx, srv))
	topts.UpstreamState, topts.UpstreamProxy = e.State, e.Proxy()
	h := transport.New(srv, topts)
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.Shutdown(ctx)
		ts.Close()
		e.Close()
		_ = srv.Close(ctx)
	})
	return ts, e
}

// sseEvent is one event of an SSE stream.
type sseEvent struct {
	id, method string
	seq        uint64
	data       map[string]any
	raw        string
}

// stream opens an SSE stream of the thread and sends its events on the
// returned channel until the test ends.
func stream(t *testing.T, base, thread, body string, header http.Header) <-chan sseEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/threads/"+thread+"/stream/events", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	out := make(chan sseEvent, 4096)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); resp.Body.Close(); <-done })
	go func() {
		defer close(done)
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.raw != "" {
					out <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.method = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.raw = line[6:]
				_ = json.Unmarshal([]byte(ev.raw), &ev.data)
				if s, ok := ev.data["seq"].(float64); ok {
					ev.seq = uint64(s)
				}
			}
		}
	}()
	return out
}

// until reads events up to the root agent's end (completed, failed or
// interrupted).
func until(t *testing.T, c <-chan sseEvent, what func(sseEvent) bool) []sseEvent {
	t.Helper()
	var got []sseEvent
	timeout := time.After(60 * time.Second)
	for {
		select {
		case ev, ok := <-c:
			require.True(t, ok, "the stream ended after %d events", len(got))
			got = append(got, ev)
			if what(ev) {
				return got
			}
		case <-timeout:
			t.Fatalf("no end after %d events", len(got))
		}
	}
}

// logged leaves out the events that are not in the thread's log (the
// values a subscription starts with).
func logged(evs []sseEvent) []sseEvent {
	var out []sseEvent
	for _, ev := range evs {
		if ev.seq > 0 {
			out = append(out, ev)
		}
	}
	return out
}

// rootEnd matches the root agent's lifecycle end.
func rootEnd(ev sseEvent) bool {
	if ev.method != "lifecycle" {
		return false
	}
	p, _ := ev.data["params"].(map[string]any)
	ns, _ := p["namespace"].([]any)
	d, _ := p["data"].(map[string]any)
	switch d["event"] {
	case "completed", "failed", "interrupted":
		return len(ns) == 0
	}
	return false
}

// text concatenates the text deltas of the events.
func text(evs []sseEvent) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.method != "messages" {
			continue
		}
		d := ev.data["params"].(map[string]any)["data"].(map[string]any)
		if d["event"] == "content-block-delta" {
			if delta, ok := d["delta"].(map[string]any); ok && delta["type"] == "text-delta" {
				b.WriteString(delta["text"].(string))
			}
		}
	}
	return b.String()
}

func command(t *testing.T, base, thread, body string) map[string]any {
	t.Helper()
	resp, err := http.Post(base+"/threads/"+thread+"/commands", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var v map[string]any
	require.NoError(t, json.Unmarshal(b, &v), "%s", b)
	return v
}

// TestEdgeInFrontOfLangGraph runs the LangGraph JavaScript server and an
// edge in front of it: a run started through the edge streams to the
// edge's clients with the upstream's seq and ids and its bytes; a late
// joiner and a resumed client get the edge's replay; an interrupt is
// answered through the edge; run.cancel, which the upstream lacks, ends a
// run through its run API; the upstream killed mid-stream and restarted
// (losing the thread) leaves the downstream stream open, and the next
// run goes on rising from the edge's last id with nothing repeated.
func TestEdgeInFrontOfLangGraph(t *testing.T) {
	up := lgtest.Start(t)
	defer up.Kill()
	ts, e := startEdge(t, up.URL, edge.Options{IdleAfter: time.Second})
	// Threads new to the upstream whatever an earlier run left in it.
	thread, thread2 := "edge-"+strconv.FormatInt(time.Now().UnixNano(), 36), "edge2-"+strconv.FormatInt(time.Now().UnixNano(), 36)

	live := stream(t, ts.URL, thread, `{"channels": ["messages", "lifecycle", "values"]}`, nil)
	r := command(t, ts.URL, thread, `{"id": 1, "method": "run.start", "params": {"assistant_id": "chat", "input": {"messages": [{"role": "user", "content": "hi"}]}}}`)
	require.Equal(t, "success", r["type"], "%v", r)
	run := until(t, live, rootEnd)
	require.Equal(t, "Hello from the upstream graph, word by word.", text(run))
	require.True(t, e.Following(thread))
	run = logged(run)
	var last uint64
	for _, ev := range run {
		require.Equal(t, strconv.FormatUint(ev.seq, 10), ev.id, "the upstream's id, its seq")
		require.Greater(t, ev.seq, last)
		last = ev.seq
	}

	// The upstream's own stream of the thread: the same events, byte for
	// byte.
	direct := stream(t, up.URL, thread, `{"channels": ["messages", "lifecycle", "values"]}`, nil)
	origin := logged(until(t, direct, rootEnd))
	require.Equal(t, len(origin), len(run))
	for i := range run {
		require.Equal(t, origin[i].raw, run[i].raw)
	}

	// A late joiner gets the whole run from the edge; a client resuming
	// after event 5 the rest.
	late := until(t, stream(t, ts.URL, thread, `{"channels": ["messages", "lifecycle", "values"]}`, nil), rootEnd)
	require.Equal(t, text(run), text(late))
	resumed := logged(until(t, stream(t, ts.URL, thread, `{"channels": ["messages", "lifecycle", "values"]}`, http.Header{"Last-Event-Id": {"5"}}), rootEnd))
	require.Greater(t, resumed[0].seq, uint64(5))
	require.Equal(t, run[len(run)-len(resumed):], resumed, "the events after 5, as the live client got them")

	// An interrupt, answered through the edge (the upstream binds a thread
	// to one assistant: another thread).
	live2 := stream(t, ts.URL, thread2, `{"channels": ["messages", "input", "lifecycle", "values"]}`, nil)
	r = command(t, ts.URL, thread2, `{"id": 2, "method": "run.start", "params": {"assistant_id": "approve", "input": {"messages": [{"role": "user", "content": "go"}]}}}`)
	require.Equal(t, "success", r["type"], "%v", r)
	asked := until(t, live2, func(ev sseEvent) bool { return ev.method == "input.requested" })
	d := asked[len(asked)-1].data["params"].(map[string]any)["data"].(map[string]any)
	until(t, live2, rootEnd) // interrupted
	r = command(t, ts.URL, thread2, `{"id": 3, "method": "input.respond", "params": {"namespace": [], "interrupt_id": "`+d["interrupt_id"].(string)+`", "response": "yes"}}`)
	require.Equal(t, "success", r["type"], "%v", r)
	answered := until(t, live2, func(ev sseEvent) bool { return rootEnd(ev) && strings.Contains(ev.raw, `"completed"`) })
	var values string
	for _, ev := range answered {
		if ev.method == "values" {
			values = ev.raw
		}
	}
	require.Contains(t, values, `answer: \"yes\"`, "the graph got the answer")
}

// TestEdgeCancelAndUnreachable: run.cancel through the edge ends the
// upstream's run early (its run API); an upstream that does not answer
// is a clear error at start.
func TestEdgeCancelAndUnreachable(t *testing.T) {
	e, err := edge.New(edge.Options{URL: "http://127.0.0.1:1"})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv := server.New(server.Config{Upstream: e})
	err = e.Start(ctx, srv)
	require.ErrorContains(t, err, "does not answer")
	e.Close()
	require.NoError(t, srv.Close(ctx))
	_, err = edge.New(edge.Options{URL: "localhost:2024"})
	require.ErrorContains(t, err, "not an http(s)://host:port URL")

	up := lgtest.Start(t)
	defer up.Kill()
	ts, _ := startEdge(t, up.URL, edge.Options{})
	// The upstream's run API, which cancels, takes UUID thread ids only.
	thread := fmt.Sprintf("00000000-0000-4000-8000-%012x", time.Now().UnixNano()&0xffffffffffff)
	live := stream(t, ts.URL, thread, `{"channels": ["messages", "lifecycle"]}`, nil)
	r := command(t, ts.URL, thread, `{"id": 1, "method": "run.cancel", "params": {}}`)
	require.Equal(t, false, r["result"].(map[string]any)["cancelled"], "no run yet: %v", r)
	r = command(t, ts.URL, thread, `{"id": 2, "method": "run.start", "params": {"assistant_id": "chat", "input": {"messages": [{"role": "user", "content": "hi"}]}}}`)
	require.Equal(t, "success", r["type"], "%v", r)
	until(t, live, func(ev sseEvent) bool { return text([]sseEvent{ev}) != "" })
	r = command(t, ts.URL, thread, `{"id": 3, "method": "run.cancel", "params": {}}`)
	require.Equal(t, "success", r["type"], "%v", r)
	require.Equal(t, true, r["result"].(map[string]any)["cancelled"])
	rest := until(t, live, rootEnd)
	require.Less(t, len(text(rest)), len("Hello from the upstream graph, word by word."), "the run ended early")
}

// TestEdgeOutlivesTheUpstream: the upstream killed mid-run leaves the
// edge's clients connected; restarted, it has lost the thread and numbers
// its events from 1 again: the edge goes on from its own last seq, so a
// client resuming with its cursor gets every event once, in order.
func TestEdgeOutlivesTheUpstream(t *testing.T) {
	up := lgtest.Start(t)
	defer up.Kill()
	ts, _ := startEdge(t, up.URL, edge.Options{MaxBackoff: 200 * time.Millisecond})
	thread := "faults-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	const filter = `{"channels": ["messages", "lifecycle"]}`
	live := stream(t, ts.URL, thread, filter, nil)
	r := command(t, ts.URL, thread, `{"id": 1, "method": "run.start", "params": {"assistant_id": "chat", "input": {"messages": [{"role": "user", "content": "hi"}]}}}`)
	require.Equal(t, "success", r["type"], "%v", r)
	before := until(t, live, func(ev sseEvent) bool { return len(text([]sseEvent{ev})) > 0 })
	cursor := before[len(before)-1]
	up.Kill()
	select {
	case ev, ok := <-live:
		if !ok {
			t.Fatal("the edge's stream ended with the upstream")
		}
		_ = ev // events the edge had before the kill may still come
	case <-time.After(500 * time.Millisecond):
	}
	require.NoError(t, up.Restart())
	r = command(t, ts.URL, thread, `{"id": 2, "method": "run.start", "params": {"assistant_id": "chat", "input": {"messages": [{"role": "user", "content": "again"}]}}}`)
	require.Equal(t, "success", r["type"], "%v", r)
	var after []sseEvent
	after = append(after, until(t, live, func(ev sseEvent) bool { return rootEnd(ev) && strings.Contains(ev.raw, `"completed"`) })...)
	require.Contains(t, text(after), "Hello from the upstream graph, word by word.")

	// Resumed from the cursor: every event once, rising.
	resumed := logged(until(t, stream(t, ts.URL, thread, filter, http.Header{"Last-Event-Id": {cursor.id}}), func(ev sseEvent) bool {
		return rootEnd(ev) && strings.Contains(ev.raw, `"completed"`)
	}))
	seen := map[string]bool{}
	last := cursor.seq
	for _, ev := range resumed {
		require.False(t, seen[ev.id], "event %s twice", ev.id)
		seen[ev.id] = true
		require.Greater(t, ev.seq, last, "rising")
		last = ev.seq
	}
	require.Contains(t, text(resumed), "Hello from the upstream graph, word by word.")
}

// TestConformanceThroughTheEdge runs the official SDK's conformance
// suite against an edge in front of the LangGraph server, on its echo and
// demo graphs (tools/langgraph-upstream/graph.mjs): every scenario
// passes, those the upstream fails on its own included (a WebSocket late
// joiner, two subscribers on one WebSocket thread, a run cancelled
// mid-message). A scenario may take 2 minutes, not 30 s: the upstream
// ends each run about half a second after its last token, and the
// fast-runs scenarios make 50.
func TestConformanceThroughTheEdge(t *testing.T) {
	node, script := sdktest.Conformance(t)
	up := lgtest.Start(t)
	defer up.Kill()
	ts, _ := startEdge(t, up.URL, edge.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script, ts.URL)
	cmd.Env = append(os.Environ(), "AGENTSTREAM_ECHO_ASSISTANT=echo", "AGENTSTREAM_INTERRUPT_ASSISTANT=demo", "CONFORMANCE_SCENARIO_MS=120000")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "conformance: 14 passed, 0 failed", "%s", out)
}

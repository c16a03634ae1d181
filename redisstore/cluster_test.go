package redisstore_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentstream/agentstream/assistants"
	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/internal/testkit/redistest"
	"github.com/agentstream/agentstream/internal/testkit/sdktest"
	"github.com/agentstream/agentstream/internal/testkit/ssetest"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/redisstore"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/coder/websocket"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// clusterNode is one `serve --redis` node: a server on its own engine
// (its own connection, as a process has), and its HTTP face on a loopback
// port.
type clusterNode struct {
	srv *server.Server
	eng *redisstore.Engine
	h   *transport.Handler
	ts  *httptest.Server
}

func startClusterNode(t *testing.T, url string) *clusterNode {
	t.Helper()
	return startClusterNodeWith(t, redisstore.Options{URL: url, TTL: time.Hour, Cluster: redisstore.ClusterOptions{LeaseTTL: time.Second}})
}

// startClusterNodeWith is startClusterNode with the engine's options.
func startClusterNodeWith(t *testing.T, opts redisstore.Options) *clusterNode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	eng, err := redisstore.New(ctx, opts)
	require.NoError(t, err)
	n := &clusterNode{eng: eng, srv: server.New(server.Config{Engine: eng})}
	assistants.Register(n.srv)
	n.h = transport.New(n.srv, transport.Options{})
	n.ts = httptest.NewServer(n.h)
	t.Cleanup(n.stop)
	return n
}

func (n *clusterNode) stop() {
	if n.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = n.h.Shutdown(ctx)
	n.ts.Close()
	_ = n.srv.Close(ctx) // and its engine
	n.srv = nil
}

type sseEvent struct {
	id, method string
	seq        uint64
}

// sseRead reads a stream's events (with ids) until the root agent ends or
// stop says so.
func sseRead(t *testing.T, r *bufio.Reader, stop func(sseEvent) bool) []sseEvent {
	t.Helper()
	var out []sseEvent
	err := ssetest.Scan(r, func(f ssetest.Frame) bool {
		cur := sseEvent{id: f.ID, method: f.Event, seq: seqOf(t, f.Data)}
		if cur.id != "" {
			out = append(out, cur)
		}
		return !stop(cur) && !rootDone(f.Event, f.Data)
	})
	require.NoError(t, err, "after %d events", len(out))
	return out
}

// seqOf is the seq member of an event's JSON (0 for none).
func seqOf(t *testing.T, data string) uint64 {
	t.Helper()
	var m struct{ Seq uint64 }
	require.NoError(t, json.Unmarshal([]byte(data), &m))
	return m.Seq
}

func rootDone(method, data string) bool {
	return method == "lifecycle" && strings.Contains(data, `"namespace":[]`) && (strings.Contains(data, `"event":"completed"`) || strings.Contains(data, `"event":"failed"`))
}

func openSSE(t *testing.T, ctx context.Context, base, thread, lastEventID string) *bufio.Reader {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/threads/"+thread+"/stream", nil)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	t.Cleanup(func() { resp.Body.Close() })
	return bufio.NewReader(resp.Body)
}

func inOrderOnce(t *testing.T, evs []sseEvent) {
	t.Helper()
	for i := 1; i < len(evs); i++ {
		require.Equal(t, evs[i-1].seq+1, evs[i].seq, "every event once, in order: %v then %v", evs[i-1], evs[i])
	}
}

// TestThreeNodes: a run on node A is streamed to an SSE client on node B
// and a WebSocket client on node C, every event once and in order; a late
// joiner on C replays the finished run from Redis after A has stopped; a
// client of B that drops reconnects to C with its cursor and loses
// nothing, repeats nothing.
func TestThreeNodes(t *testing.T) {
	threeNodes(t, redistest.Start(t).URL())
}

// threeNodes: clients on B (SSE) and C (WebSocket) get every event of a
// run on A, in order, once; a late joiner and a client resuming on
// another node get the same.
func threeNodes(t *testing.T, url string) {
	a, b, c := startClusterNode(t, url), startClusterNode(t, url), startClusterNode(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Clients on B (SSE) and C (WebSocket) first, then the run on A.
	onB := openSSE(t, ctx, b.ts.URL, "x", "")
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(c.ts.URL, "http")+"/threads/x/stream", nil)
	require.NoError(t, err)
	defer ws.CloseNow()
	require.NoError(t, ws.Write(ctx, websocket.MessageText, []byte(`{"id": 1, "method": "subscription.subscribe", "params": {"channels": ["messages", "lifecycle", "custom", "values", "updates", "checkpoints", "tasks", "tools", "input"]}}`)))
	_, resp, err := ws.Read(ctx)
	require.NoError(t, err)
	require.Contains(t, string(resp), `"type":"success"`)
	// Subscriptions to the thread's channel take effect asynchronously.
	redistest.WaitSubscribersAt(t, url, redistest.LiveChannel("x"), 2)

	r, err := http.Post(a.ts.URL+"/threads/x/commands", "application/json", strings.NewReader(`{"id": 1, "method": "run.start", "params": {"assistant_id": "firehose", "input": {"count": 300, "rate": 3000}}}`))
	require.NoError(t, err)
	r.Body.Close()
	require.Equal(t, 200, r.StatusCode)

	gotB := sseRead(t, onB, func(sseEvent) bool { return false })
	inOrderOnce(t, gotB)
	require.Equal(t, uint64(1), gotB[0].seq)
	last := gotB[len(gotB)-1].seq
	require.GreaterOrEqual(t, last, uint64(302), "300 custom events and the lifecycle around them")

	var gotC []uint64
	for {
		_, msg, err := ws.Read(ctx)
		require.NoError(t, err)
		var m struct {
			Type   string
			Method string
			Seq    uint64
		}
		require.NoError(t, json.Unmarshal(msg, &m))
		if m.Type == "event" && m.Seq > 0 {
			gotC = append(gotC, m.Seq)
		}
		if rootDone(m.Method, string(msg)) {
			break
		}
	}
	require.Len(t, gotC, len(gotB))
	for i := range gotC {
		require.Equal(t, uint64(i+1), gotC[i])
	}

	// A stops; a late joiner on C replays the finished run.
	a.stop()
	late := sseRead(t, openSSE(t, ctx, c.ts.URL, "x", ""), func(sseEvent) bool { return false })
	require.Equal(t, gotB, late)

	// A client of B read up to the middle, dropped, and resumes on C.
	mid := gotB[len(gotB)/2]
	rest := sseRead(t, openSSE(t, ctx, c.ts.URL, "x", mid.id), func(sseEvent) bool { return false })
	require.Equal(t, gotB[len(gotB)/2+1:], rest)
}

// TestConformanceAcrossTwoNodes runs the official SDK's conformance suite
// (tools/node/conformance.mjs) through a router that sends the SDK's HTTP
// commands to node A and everything else (its streams, WebSockets, state
// reads) to node B: runs execute on A, and B streams them from Redis.
func TestConformanceAcrossTwoNodes(t *testing.T) {
	nodeBin, script := sdktest.Conformance(t)
	rs := redistest.Start(t)
	a, b := startClusterNode(t, rs.URL()), startClusterNode(t, rs.URL())
	toA, _ := url.Parse(a.ts.URL)
	toB, _ := url.Parse(b.ts.URL)
	pa, pb := httputil.NewSingleHostReverseProxy(toA), httputil.NewSingleHostReverseProxy(toB)
	var commandsOnA atomic.Int64
	router := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/commands") {
			commandsOnA.Add(1)
			pa.ServeHTTP(w, r)
			return
		}
		pb.ServeHTTP(w, r)
	}))
	defer router.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, nodeBin, script, router.URL).CombinedOutput()
	t.Log("\n" + string(out))
	require.NoError(t, err, "conformance failed")
	require.Contains(t, string(out), "14 passed, 0 failed")
	require.Positive(t, commandsOnA.Load(), "the SDK's HTTP commands went to A")
}

// command posts a command to a node and returns the status and the body.
func command(t *testing.T, n *clusterNode, thread, body string) (int, map[string]any) {
	t.Helper()
	r, err := http.Post(n.ts.URL+"/threads/"+thread+"/commands", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer r.Body.Close()
	var m map[string]any
	require.NoError(t, json.NewDecoder(r.Body).Decode(&m))
	return r.StatusCode, m
}

// TestRunsFollowTheirLease: a thread's run runs on the node that took its
// lease; commands for it that arrive at other nodes reach it there
// (multitask_strategy, input.respond, run.cancel), and once the run is
// over the lease goes and another node can run the thread.
func TestRunsFollowTheirLease(t *testing.T) {
	runsFollowTheirLease(t, redistest.Start(t).URL())
}

func runsFollowTheirLease(t *testing.T, url string) {
	a, b, c := startClusterNode(t, url), startClusterNode(t, url), startClusterNode(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	onC := openSSE(t, ctx, c.ts.URL, "d", "")
	redistest.WaitSubscribersAt(t, url, redistest.LiveChannel("d"), 1) // C's subscription to the thread took effect

	status, _ := command(t, a, "d", `{"id": 1, "method": "run.start", "params": {"assistant_id": "demo", "input": {"messages": [{"role": "user", "content": "hi"}]}}}`)
	require.Equal(t, 200, status)
	holder, err := a.cluster().Holder("d")
	require.NoError(t, err)
	require.Equal(t, a.cluster().Node(), holder)

	// The interrupt's id, as C's client sees it.
	var interruptID string
	sseReadRaw(t, onC, func(method, data string) bool {
		if method != "input.requested" {
			return false
		}
		var m struct {
			Params struct {
				Data struct {
					InterruptID string `json:"interrupt_id"`
				}
			}
		}
		require.NoError(t, json.Unmarshal([]byte(data), &m))
		interruptID = m.Params.Data.InterruptID
		return true
	})
	require.NotEmpty(t, interruptID)
	// C's state read shows A's run waiting for that answer.
	r, err := http.Get(c.ts.URL + "/threads/d/state")
	require.NoError(t, err)
	stateBody, _ := io.ReadAll(r.Body)
	r.Body.Close()
	require.Contains(t, string(stateBody), `"next":["agent"]`)
	require.Contains(t, string(stateBody), `"id":"`+interruptID+`"`)

	// The answer, sent to B, reaches the run on A.
	status, body := command(t, b, "d", fmt.Sprintf(`{"id": 3, "method": "input.respond", "params": {"namespace": [], "interrupt_id": %q, "response": {"approved": true}}}`, interruptID))
	require.Equal(t, 200, status, body)
	sseReadRaw(t, onC, rootDone)

	// The run is over: the lease goes, and B can run the thread.
	require.Eventually(t, func() bool { h, _ := a.cluster().Holder("d"); return h == "" }, 10*time.Second, 50*time.Millisecond)
	status, body = command(t, b, "d", `{"id": 4, "method": "run.start", "params": {"assistant_id": "firehose", "input": {"count": 1000, "rate": 20}}}`)
	require.Equal(t, 200, status, body)
	holder, _ = b.cluster().Holder("d")
	require.Equal(t, b.cluster().Node(), holder)
	// multitask_strategy reject, sent to C, is decided by B.
	status, body = command(t, c, "d", `{"id": 2, "method": "run.start", "params": {"assistant_id": "echo", "input": {}, "multitask_strategy": "reject"}}`)
	require.Equal(t, 400, status, body)
	require.Contains(t, body["message"], "active run")
	// Cancelled from C, on B.
	status, body = command(t, c, "d", `{"id": 5, "method": "run.cancel", "params": {}}`)
	require.Equal(t, 200, status, body)
	require.Equal(t, true, body["result"].(map[string]any)["cancelled"])
	sseReadRaw(t, onC, func(method, data string) bool {
		return rootDone(method, data) && strings.Contains(data, `"cancelled":true`)
	})
	// Both runs' events, from A and from B, are one stream: a late
	// joiner on C replays them in order, each once.
	var seqs []uint64
	ends := 0
	sseReadRaw(t, openSSE(t, ctx, c.ts.URL, "d", ""), func(method, data string) bool {
		var m struct{ Seq uint64 }
		require.NoError(t, json.Unmarshal([]byte(data), &m))
		if m.Seq > 0 {
			seqs = append(seqs, m.Seq)
		}
		if rootDone(method, data) {
			ends++
		}
		return ends == 2
	})
	for i := range seqs {
		require.Equal(t, uint64(i+1), seqs[i])
	}
}

// sseReadRaw reads frames until stop says so.
func sseReadRaw(t *testing.T, r *bufio.Reader, stop func(method, data string) bool) {
	t.Helper()
	require.NoError(t, ssetest.Scan(r, func(f ssetest.Frame) bool { return !stop(f.Event, f.Data) }))
}

// TestLostLeaseStopsTheRun: a node whose thread's lease another node now
// holds stops its run there and writes nothing more to the stream.
func TestLostLeaseStopsTheRun(t *testing.T) {
	rs := redistest.Start(t)
	a := startClusterNode(t, rs.URL())
	status, body := command(t, a, "fenced", `{"id": 1, "method": "run.start", "params": {"assistant_id": "firehose", "input": {"count": 100000, "rate": 200}}}`)
	require.Equal(t, 200, status, body)
	require.Eventually(t, func() bool { return a.srv.LastSeq("fenced") > 10 }, 5*time.Second, 10*time.Millisecond)
	// Another node takes the lease (as after a partition longer than a
	// lease's life).
	require.NoError(t, rawRedis(rs.Addr, "SET", "agentstream:{fenced}:lease", "another-node"))
	require.Eventually(t, func() bool {
		st, _, _ := a.srv.State(context.Background(), "fenced")
		return st.Status == "idle"
	}, 5*time.Second, 20*time.Millisecond, "the run stops")
	stopped := a.srv.LastSeq("fenced")
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, stopped, a.srv.LastSeq("fenced"), "nothing more is published")
	holder, err := a.cluster().Holder("fenced")
	require.NoError(t, err)
	require.Equal(t, "another-node", holder)
}

// rawRedis sends one command over a plain connection.
func rawRedis(addr string, args ...string) error {
	_, err := rawRedisLine(addr, args...)
	return err
}

// rawRedisLine sends one command over a plain connection and returns the
// first line of the reply.
func rawRedisLine(addr string, args ...string) (string, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSpace(line)
	if strings.HasPrefix(line, "-") {
		return "", fmt.Errorf("redis: %s", line)
	}
	return line, nil
}

// cluster is the node's run sharing.
func (n *clusterNode) cluster() *redisstore.Cluster {
	return n.eng.Stores().Cluster.(*redisstore.Cluster)
}

// TestLeaseWithoutTTLExpires: a lease key with no expiry (another
// deployment's, a manual SET) is treated as taken now: its thread takes
// runs again one lease time later, as the refusal says, instead of never.
func TestLeaseWithoutTTLExpires(t *testing.T) {
	rs := redistest.Start(t)
	a := startClusterNode(t, rs.URL())
	require.NoError(t, rawRedis(rs.Addr, "SET", "agentstream:{wedged}:lease", "gone-node"))
	start := `{"id": 1, "method": "run.start", "params": {"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "hi"}]}}}`
	status, body := command(t, a, "wedged", start)
	require.Equal(t, http.StatusServiceUnavailable, status, body)
	require.Contains(t, body["message"], "expires within 1s")
	require.Eventually(t, func() bool {
		status, _ := command(t, a, "wedged", start)
		return status == http.StatusOK
	}, 5*time.Second, 100*time.Millisecond, "the lease expired one lease time after it was first seen")
}

// TestStateOnANodeThatHasNotSeenTheThread: GET /threads/{id}/state and
// state.get read Redis on any node, for a thread with events and no values
// too; an unknown thread is 404 no_such_thread (status and code agree).
func TestStateOnANodeThatHasNotSeenTheThread(t *testing.T) {
	rs := redistest.Start(t)
	a, b := startClusterNode(t, rs.URL()), startClusterNode(t, rs.URL())
	status, body := command(t, a, "seen", `{"id": 1, "method": "run.start", "params": {"assistant_id": "firehose", "input": {"count": 5}}}`)
	require.Equal(t, http.StatusOK, status, body)
	require.Eventually(t, func() bool {
		r, err := http.Get(b.ts.URL + "/threads/seen/state")
		require.NoError(t, err)
		r.Body.Close()
		return r.StatusCode == http.StatusOK
	}, 5*time.Second, 20*time.Millisecond, "b serves the state of a thread only a ran")
	status, body = command(t, b, "seen", `{"id": 2, "method": "state.get", "params": {"namespace": []}}`)
	require.Equal(t, http.StatusOK, status, body)

	r, err := http.Get(b.ts.URL + "/threads/never/state")
	require.NoError(t, err)
	defer r.Body.Close()
	require.Equal(t, http.StatusNotFound, r.StatusCode)
	var e struct{ Error string }
	require.NoError(t, json.NewDecoder(r.Body).Decode(&e))
	require.Equal(t, "no_such_thread", e.Error)
}

// stallDuringRun starts a 300-event firehose run of thread on node a,
// stalls Redis (SIGSTOP) for stall once a client on node b has read 20
// events, and returns what that client read up to the run's end.
func stallDuringRun(t *testing.T, ctx context.Context, rs *redistest.Server, a, b *clusterNode, thread string, stall time.Duration) []sseEvent {
	t.Helper()
	r := openSSE(t, ctx, b.ts.URL, thread, "")
	rs.WaitSubscribers(t, redistest.LiveChannel(thread), 1) // B's subscription to the thread took effect
	status, body := command(t, a, thread, `{"id": 1, "method": "run.start", "params": {"assistant_id": "firehose", "input": {"count": 300, "rate": 100}}}`)
	require.Equal(t, 200, status, body)
	got := sseRead(t, r, func(e sseEvent) bool { return e.seq >= 20 })
	rs.Pause()
	time.Sleep(stall)
	rs.Resume()
	return append(got, sseRead(t, r, func(sseEvent) bool { return false })...)
}

// TestRunOutlivesAnOutageLongerThanItsLease: Redis stalls (SIGSTOP) for
// more than twice the run lease; the run on node A goes on once it is back
// (A takes its lease again before any node reaps it), and a client on node
// B gets every event once, in order, and the run's completion, never a
// "node lost" failure.
func TestRunOutlivesAnOutageLongerThanItsLease(t *testing.T) {
	rs := redistest.Start(t)
	a := startClusterNode(t, rs.URL())
	b := startClusterNode(t, rs.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := stallDuringRun(t, ctx, rs, a, b, "stall", 2500*time.Millisecond) // the lease (1s) expires in Redis meanwhile
	inOrderOnce(t, got)
	require.Equal(t, uint64(1), got[0].seq)
	st, _, err := b.srv.State(ctx, "stall")
	require.NoError(t, err)
	require.Equal(t, "idle", st.Status)
	tree := agentTree(t, b, "stall")
	require.Contains(t, tree, `"status":"completed"`, "the run completed: %s", tree)
	require.NotContains(t, tree, "node lost")
}

// TestOutageLongerThanTheQueueWaitEndsTheRunOnce: Redis stalls for longer
// than node A's --redis-queue-wait; the run's publisher waits that long,
// is refused, and the run ends failed. A client on node B gets every event
// once, in order, and the run's end once, after Redis is back.
func TestOutageLongerThanTheQueueWaitEndsTheRunOnce(t *testing.T) {
	rs := redistest.Start(t)
	a := startClusterNodeWith(t, redisstore.Options{URL: rs.URL(), TTL: time.Hour, Cluster: redisstore.ClusterOptions{LeaseTTL: 5 * time.Second},
		Log: redisstore.LogOptions{QueueWait: 500 * time.Millisecond}})
	b := startClusterNode(t, rs.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := stallDuringRun(t, ctx, rs, a, b, "long", 2500*time.Millisecond) // a batch unanswered for 1 s, then 0.5 s of waiting
	inOrderOnce(t, got)
	require.Equal(t, uint64(1), got[0].seq)
	ends := 0
	for _, e := range got {
		if e.method == "lifecycle" && e.seq > 2 { // after started and running
			ends++
		}
	}
	require.Equal(t, 1, ends, "the run ends once: %v", got[len(got)-3:])
	require.Less(t, len(got), 300, "the run stopped during the outage")
	tree := agentTree(t, b, "long")
	require.Contains(t, tree, `"status":"failed"`, "the run failed: %s", tree)
	require.Greater(t, a.eng.Stores().Log.(*redisstore.Log).Stats().Dropped, uint64(0), "the refused publish is counted")
}

// sseRecord reads an SSE stream until the root run ends (or stop),
// recording each event's data under its id, in order.
func sseRecord(t *testing.T, r *bufio.Reader, runEnds int) (ids []string, data map[string]string) {
	t.Helper()
	data = map[string]string{}
	require.NoError(t, ssetest.Scan(r, func(f ssetest.Frame) bool {
		if f.ID != "" {
			ids = append(ids, f.ID)
			data[f.ID] = f.Data
		}
		if rootDone(f.Event, f.Data) {
			runEnds--
		}
		return runEnds > 0
	}))
	return ids, data
}

// TestRedisRestoredFromAnOlderCopyNeverReusesAnID: Redis restarts from a
// snapshot older than what clients saw (as from an append-only file that
// missed its last second, or a replica promoted behind its master), and
// the node that wrote the thread is gone. The node that takes the thread
// over goes on in a new epoch: no id a client saw names another event,
// and a cursor from before gets the reset notice.
func TestRedisRestoredFromAnOlderCopyNeverReusesAnID(t *testing.T) {
	rs := redistest.Start(t)
	a, b := startClusterNode(t, rs.URL()), startClusterNode(t, rs.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seen := openSSE(t, ctx, a.ts.URL, "older", "")
	onB := openSSE(t, ctx, b.ts.URL, "older", "") // a reader node throughout
	rs.WaitSubscribers(t, redistest.LiveChannel("older"), 2)
	run := func(n *clusterNode, text string) {
		status, body := command(t, n, "older", `{"id": 1, "method": "run.start", "params": {"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "`+text+`"}]}}}`)
		require.Equal(t, 200, status, body)
	}
	run(a, "first run")
	ids1, _ := sseRecord(t, seen, 1)
	require.NoError(t, rawRedis(rs.Addr, "SAVE")) // the snapshot holds the first run only
	run(a, "second run")
	ids2, saw := sseRecord(t, seen, 1)
	require.NotEmpty(t, ids2)
	a.stop()
	rs.Restart() // from the snapshot: the second run is gone
	c := startClusterNode(t, rs.URL())
	// The snapshot may hold A's lease: it expires within its TTL.
	require.Eventually(t, func() bool {
		status, _ := command(t, c, "older", `{"id": 1, "method": "run.start", "params": {"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "third run"}]}}}`)
		return status == 200
	}, 5*time.Second, 50*time.Millisecond)
	all, got := sseRecord(t, openSSE(t, ctx, c.ts.URL, "older", ""), 2)
	for _, id := range all {
		if d, ok := saw[id]; ok {
			require.Equal(t, d, got[id], "id %s names two events", id)
		}
	}
	require.Contains(t, all, ids1[len(ids1)-1], "the first run is kept under its ids")
	require.Equal(t, uint64(1), c.srv.Metrics().EpochBumps)
	// A client that saw the second run resumes with its last id: it is told
	// that its stream is gone, and gets this one from its start.
	rest := openSSE(t, ctx, c.ts.URL, "older", ids2[len(ids2)-1])
	var first string
	sseReadRaw(t, rest, func(method, data string) bool { first = method + " " + data; return true })
	require.Contains(t, first, "events.missed")
	require.Contains(t, first, `"reset":true`)
	// B's client saw the second run live from A; when the stream goes on
	// below it in the new epoch, B tells it (reset) and gives it the
	// stream again, third run included.
	_, _ = sseRecord(t, onB, 2)
	var notice string
	sseReadRaw(t, onB, func(method, data string) bool { notice = method + " " + data; return method == "events.missed" })
	require.Contains(t, notice, `"reset":true`)
	_, onBData := sseRecord(t, onB, 2)
	third := false
	for _, d := range onBData {
		third = third || strings.Contains(d, "third run")
	}
	require.True(t, third, "B's client gets the third run")
}

// TestRunOutlivesAFiveSecondOutage: Redis stalls for 5 s, long enough for
// node B to call Redis lost and end its streams (unavailable); the run on
// node A waits and goes on once Redis is back, and B's client, resuming
// with its last id whenever its stream ends, gets every event once, in
// order, and the run's completion.
func TestRunOutlivesAFiveSecondOutage(t *testing.T) {
	rs := redistest.Start(t)
	a, b := startClusterNode(t, rs.URL()), startClusterNode(t, rs.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	var got []sseEvent
	stalled := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		ssetest.Follow(ctx, func(int) (context.Context, context.CancelFunc, string) {
			rctx, rcancel := context.WithCancel(ctx)
			return rctx, rcancel, b.ts.URL + "/threads/five/stream"
		}, func(_ int, f ssetest.Frame) bool {
			if f.ID != "" {
				var m struct{ Seq uint64 }
				_ = json.Unmarshal([]byte(f.Data), &m) // not require: this is not the test's goroutine
				got = append(got, sseEvent{id: f.ID, method: f.Event, seq: m.Seq})
				if m.Seq == 20 {
					close(stalled)
				}
			}
			return !rootDone(f.Event, f.Data)
		})
	}()
	rs.WaitSubscribers(t, redistest.LiveChannel("five"), 1) // B's subscription to the thread took effect
	status, body := command(t, a, "five", `{"id": 1, "method": "run.start", "params": {"assistant_id": "firehose", "input": {"count": 300, "rate": 100}}}`)
	require.Equal(t, 200, status, body)
	select {
	case <-stalled:
	case <-ctx.Done():
		t.Fatal("no events before the outage")
	}
	rs.Pause()
	time.Sleep(5 * time.Second)
	rs.Resume()
	<-done
	inOrderOnce(t, got)
	require.Equal(t, uint64(1), got[0].seq)
	require.Contains(t, agentTree(t, b, "five"), `"status":"completed"`)
	require.Equal(t, 300, func() int {
		n := 0
		for _, e := range got {
			if e.method == "custom" {
				n++
			}
		}
		return n
	}(), "every event of the run")
}

// agentTree is agent.getTree's answer on node n.
func agentTree(t *testing.T, n *clusterNode, thread string) string {
	t.Helper()
	status, body := command(t, n, thread, `{"id": 99, "method": "agent.getTree", "params": {}}`)
	require.Equal(t, 200, status, body)
	b, err := json.Marshal(body)
	require.NoError(t, err)
	return string(b)
}

// TestLostOwnerIsNotReclaimed: the owner record of a thread with history
// disappears (its key expired, or Redis lost it); the next principal to
// come does not become its owner: it is refused, on the node that knew the
// thread and on one that did not, while an admin may still use it.
func TestLostOwnerIsNotReclaimed(t *testing.T) {
	rs := redistest.Start(t)
	a := startClusterNode(t, rs.URL())
	b := startClusterNode(t, rs.URL())
	alice, bob, admin := &auth.Principal{Subject: "alice"}, &auth.Principal{Subject: "bob"}, &auth.Principal{Subject: "root", Admin: true}
	require.NoError(t, a.srv.Authorize(alice, "owned", true))
	status, body := command(t, a, "owned", `{"id": 1, "method": "run.start", "params": {"assistant_id": "firehose", "input": {"count": 3}}}`)
	require.Equal(t, 200, status, body)
	require.Eventually(t, func() bool { return a.srv.LastSeq("owned") >= 5 }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, a.srv.Authorize(bob, "other", true), "bob owns threads of his own")
	require.ErrorIs(t, a.srv.Authorize(bob, "owned", true), server.ErrPermissionDenied)
	require.NoError(t, rawRedis(rs.Addr, "DEL", "agentstream:{owned}:state"))
	for _, n := range []*clusterNode{a, b} {
		require.ErrorIs(t, n.srv.Authorize(bob, "owned", true), server.ErrPermissionDenied, "the thread is not handed to the next caller")
		require.NoError(t, n.srv.Authorize(admin, "owned", true))
	}
	owner, err := b.srv.Owner(context.Background(), "owned")
	require.NoError(t, err)
	require.Empty(t, owner, "nobody claimed it")
}

// TestWebSocketReconnectOnAnotherNode: a WebSocket client of node A reads
// part of a run, drops, and sends subscription.reconnect to node B with
// its subscription id: B restores it (its filter kept in Redis), and the
// client gets the rest of the run, every event once, in order.
func TestWebSocketReconnectOnAnotherNode(t *testing.T) {
	rs := redistest.Start(t)
	a := startClusterNode(t, rs.URL())
	b := startClusterNode(t, rs.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dial := func(n *clusterNode) *websocket.Conn {
		ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(n.ts.URL, "http")+"/threads/re/stream", nil)
		require.NoError(t, err)
		return ws
	}
	type msg struct {
		Type, Method string
		ID           uint64
		Seq          uint64
		EventID      string `json:"event_id"`
		Result       struct {
			SubscriptionID string `json:"subscription_id"`
			Restored       bool
		}
	}
	read := func(ws *websocket.Conn) (msg, string) {
		_, b, err := ws.Read(ctx)
		require.NoError(t, err)
		var m msg
		require.NoError(t, json.Unmarshal(b, &m))
		return m, string(b)
	}
	wa := dial(a)
	require.NoError(t, wa.Write(ctx, websocket.MessageText, []byte(`{"id": 1, "method": "subscription.subscribe", "params": {"channels": ["lifecycle", "custom"]}}`)))
	var subID string
	for subID == "" {
		if m, _ := read(wa); m.Type == "success" && m.ID == 1 {
			subID = m.Result.SubscriptionID
		}
	}
	status, body := command(t, a, "re", `{"id": 1, "method": "run.start", "params": {"assistant_id": "firehose", "input": {"count": 200, "rate": 400}}}`)
	require.Equal(t, 200, status, body)
	var seqs []uint64
	var lastID string
	for len(seqs) < 50 {
		if m, _ := read(wa); m.Type == "event" && m.Seq > 0 {
			seqs, lastID = append(seqs, m.Seq), m.EventID
		}
	}
	wa.Close(websocket.StatusGoingAway, "dropped")
	require.Eventually(t, func() bool {
		line, err := rawRedisLine(rs.Addr, "EXISTS", "agentstream:{re}:sub:"+subID)
		return err == nil && line == ":1"
	}, 5*time.Second, 10*time.Millisecond, "A sees the drop and keeps the subscription in Redis")

	wb := dial(b)
	require.NoError(t, wb.Write(ctx, websocket.MessageText, []byte(`{"id": 2, "method": "subscription.reconnect", "params": {"run_id": "r", "last_event_id": "`+lastID+`", "subscriptions": ["`+subID+`"]}}`)))
	restored := false
	for {
		m, raw := read(wb)
		if m.Type == "success" && m.ID == 2 {
			restored = m.Result.Restored
			require.True(t, restored, "B restores A's subscription: %s", raw)
			continue
		}
		require.NotEqual(t, "error", m.Type, raw)
		if m.Type == "event" && m.Seq > 0 {
			seqs = append(seqs, m.Seq)
		}
		if rootDone(m.Method, raw) {
			break
		}
	}
	for i, s := range seqs {
		require.Equal(t, uint64(i+1), s, "every event once, in order, across the two nodes")
	}
	require.GreaterOrEqual(t, len(seqs), 202)
	wb.Close(websocket.StatusNormalClosure, "")
}

// TestProducerRetriesOnAnotherNode: a producer's batch taken by one node
// (the ack waited for Redis), sent again to another node after the first
// stopped, is answered as a duplicate with the first answer's seqs and
// ids and appends nothing; two principals using one producer name are
// two producers; a batch cut short (the node died between its events) is
// completed by the retry on the other node.
func TestProducerRetriesOnAnotherNode(t *testing.T) {
	rs := redistest.Start(t)
	a, b := startClusterNode(t, rs.URL()), startClusterNode(t, rs.URL())
	ctx := context.Background()
	batch := func(principal string, seq uint64, n int) server.ProducerBatch {
		name := "tick"
		out := server.ProducerBatch{Principal: principal, Producer: "p", Seq: seq}
		for i := 0; i < n; i++ {
			out.Events = append(out.Events, protocol.ProducerEvent{Event: &protocol.ServerEventCustom{Params: protocol.EventCustomParams{
				Namespace: protocol.Namespace{}, Data: protocol.CustomData{Name: &name, Payload: i}}}})
		}
		return out
	}
	first, err := a.srv.Publish(ctx, "pr", batch("alice", 1, 3))
	require.NoError(t, err)
	require.Len(t, first.Seqs, 3)
	// The ack came once Redis held the batch.
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{rs.Addr}, DisableCache: true})
	require.NoError(t, err)
	defer c.Close()
	n, err := c.Do(ctx, c.B().Xlen().Key("agentstream:{pr}:events").Build()).AsInt64()
	require.NoError(t, err)
	require.Equal(t, int64(3), n)
	a.stop()

	again, err := b.srv.Publish(ctx, "pr", batch("alice", 1, 3))
	require.NoError(t, err)
	require.True(t, again.Duplicate, "recognised on the other node")
	require.Equal(t, first.Seqs, again.Seqs)
	require.Equal(t, first.EventIDs, again.EventIDs)
	bob, err := b.srv.Publish(ctx, "pr", batch("bob", 1, 2))
	require.NoError(t, err)
	require.False(t, bob.Duplicate, "another principal's producer")
	require.Equal(t, []uint64{4, 5}, bob.Seqs)

	// A batch cut short: its first two events and the producer's record of
	// them are in Redis as a node that died after them left them.
	mark := func(seq uint64, index int) string {
		return fmt.Sprintf("%d %d %d %d %s %d", 2, 3, seq-uint64(index), index+1, strings.SplitN(bob.EventIDs[0], "-", 2)[0], time.Now().UnixMilli())
	}
	for i, seq := range []uint64{6, 7} {
		ev := fmt.Sprintf(`{"type":"event","event_id":"%s-%d","seq":%d,"method":"custom","params":{"namespace":[],"timestamp":1,"data":{"name":"tick","payload":%d}}}`, strings.SplitN(bob.EventIDs[0], "-", 2)[0], seq, seq, i)
		require.NoError(t, c.Do(ctx, c.B().Xadd().Key("agentstream:{pr}:events").Id(fmt.Sprint(seq, "-0")).FieldValue().FieldValue("e", ev).Build()).Error())
		require.NoError(t, c.Do(ctx, c.B().Hset().Key("agentstream:{pr}:producers").FieldValue().FieldValue(server.ProducerKey("alice", "p"), mark(seq, i)).Build()).Error())
	}
	b.stop()
	b = startClusterNode(t, rs.URL())
	done, err := b.srv.Publish(ctx, "pr", batch("alice", 2, 3))
	require.NoError(t, err)
	require.False(t, done.Duplicate)
	require.Equal(t, []uint64{6, 7, 8}, done.Seqs, "the two kept, the third appended")
	n, err = c.Do(ctx, c.B().Xlen().Key("agentstream:{pr}:events").Build()).AsInt64()
	require.NoError(t, err)
	require.Equal(t, int64(8), n)
}

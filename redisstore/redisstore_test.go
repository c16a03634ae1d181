package redisstore_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentstream/agentstream/assistants"
	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/internal/testkit/redistest"
	"github.com/agentstream/agentstream/internal/testkit/servetest"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/redisstore"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/threads"
	"github.com/fxamacker/cbor/v2"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// rueidis waits out its reconnect backoff (under a second) on a goroutine
// of its own that a closed client does not stop, and a cluster client
// closes the connections to nodes that left the cluster's map 5 s after it
// read the map (a replica seen before it joined): both end by themselves.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"))
}

func open(t testing.TB, url string) *redisstore.Engine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, err := redisstore.Open(ctx, url, time.Hour)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// node is one server on the Redis engine's log and state, with the way
// into it an engine has (host).
type node struct {
	srv  *server.Server
	log  *redisstore.Log
	host server.EngineHost
}

// hostEngine is an engine of given stores that keeps the host it is
// started with, for tests that act as an engine would.
type hostEngine struct {
	stores server.EngineStores
	host   server.EngineHost
}

func (h *hostEngine) Stores() server.EngineStores        { return h.stores }
func (h *hostEngine) Start(host server.EngineHost) error { h.host = host; return nil }
func (h *hostEngine) Close() error                       { return nil }

func startNode(t testing.TB, e *redisstore.Engine, opts redisstore.LogOptions) *node {
	t.Helper()
	return startNodeWith(t, e.Log(opts), e.State())
}

// startNodeWith is startNode with a log and a state store of the caller's.
func startNodeWith(t testing.TB, l *redisstore.Log, st server.StateStore) *node {
	t.Helper()
	stores := l.Stores()
	stores.State = st
	switch st := st.(type) {
	case *redisstore.State:
		stores.Catalog, stores.Deleter, stores.Runs, stores.Items = st, st, st, st
	case *server.MemoryState:
		m := server.MemoryStores(nil, st)
		stores.Catalog, stores.Index, stores.Runs, stores.Items = m.Catalog, m.Index, m.Runs, m.Items
	}
	he := &hostEngine{stores: stores}
	srv := server.New(server.Config{Engine: he})
	assistants.Register(srv)
	n := &node{srv: srv, log: l, host: he.host}
	t.Cleanup(n.stop)
	return n
}

func (n *node) stop() {
	if n.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = n.srv.Close(ctx)
	n.log.Close()
	n.srv = nil
}

func rootEnded(e *server.Event) bool {
	l, ok := e.Payload.(*protocol.ServerEventLifecycle)
	return ok && len(e.Namespace) == 0 && (l.Params.Data.Event == protocol.AgentStatusCompleted || l.Params.Data.Event == protocol.AgentStatusFailed)
}

// runToEnd starts a run and returns every event of the thread's stream
// up to the run's end.
func runToEnd(t testing.TB, srv *server.Server, thread, assistant string, input any) []*server.Event {
	t.Helper()
	sub, _, err := srv.Subscribe(thread, channels.All, &server.Cursor{Seq: srv.LastSeq(thread)})
	require.NoError(t, err)
	defer sub.Close()
	cmd := &protocol.ClientCommand{Value: &protocol.ClientCommandRunStart{ID: 1, Params: protocol.RunStartParams{AssistantID: assistant, Input: input}}}
	_, err = srv.Do(context.Background(), thread, cmd)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*server.Event
	for {
		e, err := sub.Next(ctx)
		require.NoError(t, err)
		if e.Seq > 0 {
			out = append(out, e)
		}
		if rootEnded(e) {
			return out
		}
	}
}

// readAll subscribes with cursor and reads what the replay holds.
func readAll(t *testing.T, srv *server.Server, thread string, cursor *server.Cursor) (notices, events []*server.Event) {
	t.Helper()
	sub, _, err := srv.Subscribe(thread, channels.All, cursor)
	require.NoError(t, err)
	defer sub.Close()
	for {
		e, ok, err := sub.TryNext()
		require.NoError(t, err)
		if !ok {
			return
		}
		if e.Seq == 0 {
			notices = append(notices, e)
		} else {
			events = append(events, e)
		}
	}
}

func echoInput(text string) map[string]any {
	return map[string]any{"messages": []any{map[string]any{"role": "user", "content": text}}}
}

// TestRestartKeepsThreads: a server on the Redis engine stops; a new one
// on the same Redis serves the thread's state and replays its events
// byte for byte, a cursor from before the restart resumes without a
// reset, and the next run continues the sequence in the same epoch.
func TestRestartKeepsThreads(t *testing.T) {
	rs := redistest.Start(t)
	e := open(t, rs.URL())
	a := startNode(t, e, redisstore.LogOptions{})
	first := runToEnd(t, a.srv, "t", "echo", echoInput("before the restart"))
	require.NotEmpty(t, first)
	require.Equal(t, "", servetest.Owner(t, a.srv, "t"), "no owner without auth")
	a.stop()

	b := startNode(t, e, redisstore.LogOptions{})
	st, ok, _ := b.srv.State(context.Background(), "t")
	require.True(t, ok)
	require.Len(t, st.Values["messages"], 2)
	notices, replayed := readAll(t, b.srv, "t", &server.Cursor{})
	require.Empty(t, notices[1:], "only the values snapshot: nothing missed")
	require.Len(t, replayed, len(first))
	for i := range first {
		require.Equal(t, first[i].EventID(), replayed[i].EventID())
		require.JSONEq(t, string(first[i].JSON()), string(replayed[i].JSON()))
		require.Equal(t, first[i].Channel, replayed[i].Channel)
		typed, err := replayed[i].WithPayload()
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("%T", first[i].Payload), fmt.Sprintf("%T", typed.Payload), "the typed payload decodes again")
		cb, err := replayed[i].CBOR()
		require.NoError(t, err)
		want, err := first[i].CBOR()
		require.NoError(t, err)
		var gotV, wantV any
		require.NoError(t, cbor.Unmarshal(cb, &gotV))
		require.NoError(t, cbor.Unmarshal(want, &wantV))
		require.Equal(t, wantV, gotV, "the CBOR form says the same (maps in any order)")
	}
	mid := first[len(first)/2]
	cursor, err := server.ParseCursor(mid.EventID())
	require.NoError(t, err)
	notices, after := readAll(t, b.srv, "t", &cursor)
	for _, n := range notices {
		require.NotEqual(t, "events.missed", n.Method, "a cursor from before the restart is still good")
	}
	require.Equal(t, first[len(first)/2+1].EventID(), after[0].EventID())

	second := runToEnd(t, b.srv, "t", "echo", echoInput("after"))
	require.Equal(t, first[len(first)-1].Seq+1, second[0].Seq, "seq continues")
	require.Equal(t, first[0].Epoch(), second[0].Epoch(), "same epoch")
}

// TestLogReadsRedisBeyondMemory: what memory no longer holds (released, or
// beyond the memory budget) is replayed from the stream; the stream is
// trimmed to about the per-thread cap, and a cursor older than it gets the
// missed-events notice.
func TestLogReadsRedisBeyondMemory(t *testing.T) {
	rs := redistest.Start(t)
	e := open(t, rs.URL())
	a := startNode(t, e, redisstore.LogOptions{MaxEvents: 300})
	evs := runToEnd(t, a.srv, "f", "firehose", map[string]any{"count": 1000.0})
	last := evs[len(evs)-1].Seq
	require.Eventually(t, func() bool { return a.log.Stats().Pending == 0 }, 5*time.Second, 10*time.Millisecond)
	require.Zero(t, a.log.Stats().Dropped)
	require.Less(t, a.log.Stats().Batches, a.log.Stats().Written, "pipelined: fewer round trips than events")

	a.log.Release(context.Background(), "f") // memory lets the thread go
	require.Zero(t, a.log.Len(context.Background(), "f"))
	oldest, err := a.log.Oldest(context.Background(), "f")
	require.NoError(t, err)
	require.Greater(t, oldest, uint64(1), "trimmed")
	require.LessOrEqual(t, last-oldest+1, uint64(400), "to about 300")
	notices, events := readAll(t, a.srv, "f", &server.Cursor{Seq: 1})
	require.Equal(t, "events.missed", notices[0].Method)
	require.Equal(t, oldest, events[0].Seq)
	require.Equal(t, last, events[len(events)-1].Seq)
	for i := 1; i < len(events); i++ {
		require.Equal(t, events[i-1].Seq+1, events[i].Seq, "in order, no gap")
	}
}

func TestState(t *testing.T) {
	rs := redistest.Start(t)
	e := open(t, rs.URL())
	ctx := context.Background()
	st := e.State()
	st.MaxCheckpoints = 3
	_, ok, err := st.Values(ctx, "s")
	require.NoError(t, err)
	require.False(t, ok)
	exists, err := st.Exists(ctx, "s")
	require.NoError(t, err)
	require.False(t, exists)
	require.NoError(t, st.SetValues(ctx, "s", map[string]any{"n": 1.0, "list": []any{"a"}}))
	v, ok, err := st.Values(ctx, "s")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, map[string]any{"n": 1.0, "list": []any{"a"}}, v)
	exists, _ = st.Exists(ctx, "s")
	require.True(t, exists)
	for i := 1; i <= 5; i++ {
		require.NoError(t, st.AddCheckpoint(ctx, "s", server.CheckpointRecord{ID: fmt.Sprint("c", i), Step: int64(i), Time: time.Unix(int64(i), 0).UTC(), Values: map[string]any{"i": float64(i)}}))
	}
	cps, err := st.Checkpoints(ctx, "s")
	require.NoError(t, err)
	require.Len(t, cps, 3)
	require.Equal(t, []string{"c5", "c4", "c3"}, []string{cps[0].ID, cps[1].ID, cps[2].ID})
	cp, ok, err := st.Checkpoint(ctx, "s", "c4")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, map[string]any{"i": 4.0}, cp.Values)
	_, ok, _ = st.Checkpoint(ctx, "s", "c1")
	require.False(t, ok, "dropped by the cap")

	_, ok, err = st.Owner(ctx, "s")
	require.NoError(t, err)
	require.False(t, ok)
	o, err := st.ClaimOwner(ctx, "s", "alice")
	require.NoError(t, err)
	require.Equal(t, "alice", o)
	o, _ = st.ClaimOwner(ctx, "s", "bob")
	require.Equal(t, "alice", o, "the first claim holds")
	o, _, _ = st.Owner(ctx, "s")
	require.Equal(t, "alice", o)
	require.NoError(t, e.Forget(ctx, "s"))
	exists, _ = st.Exists(ctx, "s")
	require.False(t, exists)
}

// A Redis that cannot be reached is an error for every StateStore call,
// which reaches the caller: a command fails with unavailable.
func TestStateErrorsReachTheCaller(t *testing.T) {
	rs := redistest.Start(t)
	e := open(t, rs.URL())
	st := e.State()
	st.Timeout = 200 * time.Millisecond
	n := startNodeWith(t, e.Log(redisstore.LogOptions{}), st)
	ctx := context.Background()
	rs.Stop()
	_, _, err := st.Values(ctx, "s")
	require.ErrorIs(t, err, redisstore.ErrUnavailable)
	require.ErrorIs(t, st.SetValues(ctx, "s", map[string]any{}), redisstore.ErrUnavailable)
	_, err = st.ClaimOwner(ctx, "s", "alice")
	require.ErrorIs(t, err, redisstore.ErrUnavailable)
	_, err = n.srv.Do(ctx, "s", &protocol.ClientCommand{Value: &protocol.ClientCommandStateGet{ID: 7}})
	require.Equal(t, protocol.ErrorCodeUnavailable, protocol.CodeOf(err), "%v", err)
	var e7 *protocol.ErrorResponse
	require.ErrorAs(t, err, &e7)
	require.Equal(t, protocol.JsUint(7), *e7.ID)
	_, _, err = n.srv.State(ctx, "s")
	require.ErrorIs(t, err, server.ErrUnavailable)
}

func TestOpenFailsWithoutRedis(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = redisstore.Open(ctx, "redis://"+addr+"/0", 0)
	require.Error(t, err)
	_, err = redisstore.Open(ctx, "http://"+addr, 0)
	require.ErrorContains(t, err, "scheme")
}

// TestCommandsPerEvent: a run of a thread's events in a batch costs Redis
// one command (a script that adds and publishes each), and the keys' TTL
// once a minute per thread: a fast run's events gathered in batches of
// hundreds cost far less than a command each.
func TestCommandsPerEvent(t *testing.T) {
	rs := redistest.Start(t)
	e := open(t, rs.URL())
	a := startNode(t, e, redisstore.LogOptions{Publish: true})
	srv, l := a.srv, a.log
	const threads, each = 10, 1000
	for i := 0; i < threads; i++ {
		runToEnd(t, srv, fmt.Sprint("c", i), "firehose", map[string]any{"count": float64(each)})
	}
	require.Eventually(t, func() bool { return l.Stats().Pending == 0 }, 5*time.Second, 10*time.Millisecond)
	st := l.Stats()
	require.Equal(t, uint64(threads*(each+3)), st.Written, "every event: the firehose's and 3 lifecycle each")
	perEvent := float64(st.Commands) / float64(st.Written)
	t.Logf("%d events, %d commands (%.3f per event), %d round trips (%.1f events each)", st.Written, st.Commands, perEvent, st.Batches, float64(st.Written)/float64(st.Batches))
	// A run's events gathered in a batch are written, and published, by
	// one command: far fewer than one per event.
	require.LessOrEqual(t, perEvent, 0.5)
}

// TestScriptLoadedAgainAfterFlush: the events are written by a script
// sent by its SHA; a Redis that no longer holds it (restarted, or its
// scripts flushed) refuses that, and the writer sends the script itself,
// so every event is still stored, once and in order.
func TestScriptLoadedAgainAfterFlush(t *testing.T) {
	rs := redistest.Start(t)
	e := open(t, rs.URL())
	a := startNode(t, e, redisstore.LogOptions{Publish: true})
	runToEnd(t, a.srv, "before", "firehose", map[string]any{"count": float64(50)})
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{rs.Addr}, DisableCache: true})
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()
	require.NoError(t, c.Do(ctx, c.B().ScriptFlush().Build()).Error())
	retries := a.log.Stats().Retries
	runToEnd(t, a.srv, "after", "firehose", map[string]any{"count": float64(50)})
	require.Eventually(t, func() bool { return a.log.Stats().Pending == 0 }, 5*time.Second, 10*time.Millisecond)
	require.Greater(t, a.log.Stats().Retries, retries, "the first batch after the flush was refused (NOSCRIPT) and sent again")
	require.Zero(t, a.log.Stats().Dropped)
	require.Zero(t, a.log.Stats().Refused)
	for _, th := range []string{"before", "after"} {
		entries, err := c.Do(ctx, c.B().Xrange().Key("agentstream:{"+th+"}:events").Start("-").End("+").Build()).AsXRange()
		require.NoError(t, err)
		require.Len(t, entries, 53, "thread %s: the firehose's 50 events and 3 lifecycle", th)
		for j, en := range entries {
			require.Equal(t, fmt.Sprintf("%d-0", j+1), en.ID, "thread %s in order, no gap", th)
		}
	}
}

// TestLogHoldsEventsThroughRedisLoss: events published while Redis is
// gone reach no client, this node's included, until Redis holds them; the
// writer sends them again until it does, and then every subscriber gets
// every event once, in order, and the stream holds them all.
func TestLogHoldsEventsThroughRedisLoss(t *testing.T) {
	rs := redistest.Start(t)
	e := open(t, rs.URL())
	var errs atomic.Int64
	// QueueWait outlasts the outage: once the writer finds Redis gone,
	// publishers wait for it (the run's second lifecycle event may be one,
	// when the first batch failed before it was queued).
	l := e.Log(redisstore.LogOptions{Publish: true, WriteTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, QueueWait: time.Minute, OnError: func(error) { errs.Add(1) }})
	// The state in memory: a StateStore on the lost Redis would refuse the
	// run (TestStateErrorsReachTheCaller), and this is about the log.
	srv := startNodeWith(t, l, server.NewMemoryState()).srv
	sub, _, err := srv.Subscribe("lost", channels.All, nil)
	require.NoError(t, err)
	defer sub.Close()
	rs.Stop()
	started := make(chan error, 1)
	go func() {
		_, err := srv.Do(context.Background(), "lost", &protocol.ClientCommand{Value: &protocol.ClientCommandRunStart{ID: 1,
			Params: protocol.RunStartParams{AssistantID: "firehose", Input: map[string]any{"count": 50.0}}}})
		started <- err
	}()
	require.Eventually(t, func() bool { return errs.Load() > 0 && l.Stats().Retries > 0 }, 10*time.Second, 20*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	e0, err := sub.Next(ctx)
	cancel()
	if err == nil {
		require.Zero(t, e0.Seq, "an event reached a subscriber before Redis held it: %s", e0.JSON())
	}
	require.Positive(t, l.Stats().Pending)
	rs.Restart()
	select {
	case err := <-started:
		require.NoError(t, err, "run.start, published while Redis was gone")
	case <-time.After(20 * time.Second):
		t.Fatal("run.start did not return once Redis was back")
	}
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var seqs []uint64
	for len(seqs) < 53 {
		ev, err := sub.Next(ctx)
		require.NoError(t, err, "after %d events", len(seqs))
		if ev.Seq > 0 {
			seqs = append(seqs, ev.Seq)
		}
	}
	for i, s := range seqs {
		require.Equal(t, uint64(i+1), s, "every event once, in order")
	}
	var stored []uint64
	require.NoError(t, l.Stored(context.Background(), "lost", 0, func(ev *server.Event) bool { stored = append(stored, ev.Seq); return true }))
	require.Equal(t, seqs, stored, "the stream holds every event delivered")
	require.Zero(t, l.Stats().Dropped)
}

// TestFullWriteQueueWaits: while Redis takes no writes (CLIENT PAUSE), a
// full write queue makes publishers wait for room instead of dropping
// events; once Redis takes writes again, every event is in the stream.
func TestFullWriteQueueWaits(t *testing.T) {
	rs := redistest.Start(t)
	e := open(t, rs.URL())
	n := startNode(t, e, redisstore.LogOptions{WriteQueue: 4, WriteTimeout: 10 * time.Second})
	require.NoError(t, rawRedis(rs.Addr, "CLIENT", "PAUSE", "400", "WRITE"))
	evs := runToEnd(t, n.srv, "waits", "firehose", map[string]any{"count": 40.0})
	require.Eventually(t, func() bool { return n.log.Stats().Pending == 0 }, 10*time.Second, 10*time.Millisecond)
	st := n.log.Stats()
	require.Zero(t, st.Dropped)
	require.Positive(t, st.Waits, "the queue filled while Redis was paused")
	requireStoredInOrder(t, n.log, "waits", len(evs))
}

// requireStoredInOrder checks that thread's stream holds events 1 to n,
// in order.
func requireStoredInOrder(t *testing.T, l *redisstore.Log, thread string, n int) {
	t.Helper()
	var stored []uint64
	require.NoError(t, l.Stored(context.Background(), thread, 0, func(e *server.Event) bool { stored = append(stored, e.Seq); return true }))
	require.Len(t, stored, n)
	for i, s := range stored {
		require.Equal(t, uint64(i+1), s)
	}
}

// TestWriteQueueBoundedByBytes: the write queue's bytes bound makes
// publishers wait as its count bound does: with room for a thousand events
// but for about four of them in bytes, a paused Redis makes the run wait,
// the queue never holds much more than its bytes, and every event reaches
// the stream in order once Redis takes writes again.
func TestWriteQueueBoundedByBytes(t *testing.T) {
	rs := redistest.Start(t)
	e := open(t, rs.URL())
	const maxBytes = 1200 // a firehose event of 100 bytes is about 250 bytes of JSON
	n := startNode(t, e, redisstore.LogOptions{Writers: 1, WriteQueue: 1000, WriteQueueBytes: maxBytes, WriteTimeout: 10 * time.Second})
	require.NoError(t, rawRedis(rs.Addr, "CLIENT", "PAUSE", "500", "WRITE"))
	var most atomic.Int64
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				if b := n.log.Stats().PendingBytes; b > most.Load() {
					most.Store(b)
				}
			}
		}
	}()
	evs := runToEnd(t, n.srv, "bytes", "firehose", map[string]any{"count": 40.0, "size": 100.0})
	require.Eventually(t, func() bool { return n.log.Stats().Pending == 0 }, 10*time.Second, 10*time.Millisecond)
	close(stop)
	<-watched
	st := n.log.Stats()
	require.Zero(t, st.Dropped)
	require.Positive(t, st.Waits, "the bytes bound filled while Redis was paused")
	require.Positive(t, most.Load())
	require.Less(t, most.Load(), int64(maxBytes+1024), "no more than the bound and one event")
	requireStoredInOrder(t, n.log, "bytes", len(evs))
}

// TestRunEndIsNeverDroppedForAFullQueue: when waiting for room times out,
// events are dropped from Redis (and counted), but the run's end still
// reaches the stream, so that no other node takes the run for lost.
func TestRunEndIsNeverDroppedForAFullQueue(t *testing.T) {
	rs := redistest.Start(t)
	e := open(t, rs.URL())
	n := startNode(t, e, redisstore.LogOptions{WriteQueue: 2, QueueWait: 20 * time.Millisecond})
	require.NoError(t, rawRedis(rs.Addr, "CLIENT", "PAUSE", "600", "WRITE"))
	evs := runToEnd(t, n.srv, "ends", "firehose", map[string]any{"count": 20.0})
	require.Eventually(t, func() bool { return n.log.Stats().Pending == 0 }, 10*time.Second, 10*time.Millisecond)
	require.Positive(t, n.log.Stats().Dropped)
	// Redis carries out what was sent to it once the pause is over.
	var last *server.Event
	require.Eventually(t, func() bool {
		last = nil
		require.NoError(t, n.log.Stored(context.Background(), "ends", 0, func(e *server.Event) bool { last = e; return true }))
		return last != nil && last.Seq == evs[len(evs)-1].Seq
	}, 10*time.Second, 50*time.Millisecond, "the stream ends with the run's end")
	require.True(t, rootEnded(last))
}

// TestReplayStopsAtWhatTheNodeIngested: a node's replay must not reach
// past the events it has ingested: those that another node wrote to the
// stream meanwhile arrive live, and a session that got them in its replay
// as well received them twice (seen across two nodes as a duplicated
// stretch of events).
func TestReplayStopsAtWhatTheNodeIngested(t *testing.T) {
	rs := redistest.Start(t)
	e := open(t, rs.URL())
	a := startNode(t, e, redisstore.LogOptions{})
	b := startNode(t, e, redisstore.LogOptions{}) // no Live: it ingests only when told to catch up
	first := runToEnd(t, a.srv, "seam", "echo", echoInput("one"))
	require.Eventually(t, func() bool { return a.log.Flushed("seam") }, 5*time.Second, 10*time.Millisecond)

	ss := b.srv.NewSession("seam")
	defer ss.Close()
	_, n, err := ss.Subscribe(channels.Filter{Channels: []string{channels.Lifecycle}, Depth: channels.Unlimited}, nil)
	require.NoError(t, err)
	require.Positive(t, n)
	head := b.srv.LastSeq("seam")
	require.Equal(t, first[len(first)-1].Seq, head)

	second := runToEnd(t, a.srv, "seam", "echo", echoInput("two"))
	require.Eventually(t, func() bool { return a.log.Flushed("seam") }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, head, b.srv.LastSeq("seam"), "b has not ingested the second run")

	// A second subscription of the same session, to everything: its
	// replay ends at b's head; the catch-up brings the second run once.
	_, _, err = ss.Subscribe(channels.All, nil)
	require.NoError(t, err)
	require.NoError(t, b.host.CatchUp("seam"))
	seen := map[uint64]int{}
	for {
		ev, ok, err := ss.TryNext()
		require.NoError(t, err)
		if !ok {
			break
		}
		if ev.Seq > 0 {
			seen[ev.Seq]++
		}
	}
	for _, ev := range second {
		require.Equal(t, 1, seen[ev.Seq], "event %d once", ev.Seq)
	}
	for seq, n := range seen {
		require.Equal(t, 1, n, "event %d once", seq)
	}
}

// TestStreamTrimmedByBytes: a thread's stream is trimmed by bytes as well
// as by count, to between 15/16 of the byte cap and the cap, exactly (no
// whole stream node of large events left over); a cursor from before it
// gets the missed-events notice (a reader from the start too), and what
// is kept replays in order.
func TestStreamTrimmedByBytes(t *testing.T) {
	rs := redistest.Start(t)
	e := open(t, rs.URL())
	const maxBytes = 40_000
	a := startNode(t, e, redisstore.LogOptions{MaxBytes: maxBytes})
	evs := runToEnd(t, a.srv, "big", "firehose", map[string]any{"count": 300.0, "size": 1000.0})
	require.Eventually(t, func() bool { return a.log.Stats().Pending == 0 }, 5*time.Second, 10*time.Millisecond)

	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{rs.Addr}, DisableCache: true})
	require.NoError(t, err)
	defer c.Close()
	entries, err := c.Do(context.Background(), c.B().Xrange().Key("agentstream:{big}:events").Start("-").End("+").Build()).AsXRange()
	require.NoError(t, err)
	kept := 0
	for _, en := range entries {
		kept += len(en.FieldValues["e"])
	}
	last := evs[len(evs)-1]
	require.LessOrEqual(t, kept, maxBytes, "%d events kept", len(entries))
	require.GreaterOrEqual(t, kept, maxBytes*15/16-len(last.JSON()), "%d events kept", len(entries))
	require.Less(t, len(entries), 60, "trimmed by bytes long before the count cap")

	a.log.Release(context.Background(), "big")
	notices, events := readAll(t, a.srv, "big", &server.Cursor{Seq: 1})
	require.Equal(t, "events.missed", notices[0].Method)
	require.Len(t, events, len(entries))
	require.Equal(t, last.Seq, events[len(events)-1].Seq)
	for i := 1; i < len(events); i++ {
		require.Equal(t, events[i-1].Seq+1, events[i].Seq, "in order, no gap")
	}
	// A reader from the start (no cursor) is told too, first.
	notices, events = readAll(t, a.srv, "big", nil)
	require.NotEmpty(t, notices)
	require.Equal(t, "events.missed", notices[0].Method)
	missed := notices[0].Payload.(*protocol.ServerEventEventsMissed).Params.Data
	require.Equal(t, uint64(0), missed.Since)
	require.Equal(t, events[0].Seq, missed.FirstAvailableSeq)
	require.Equal(t, events[0].Seq-1, missed.Missed)
}

// TestWritersKeepEachThreadsOrder: with several writers, and a write queue
// so small that publishers wait, every thread's stream holds all its
// events in order.
func TestWritersKeepEachThreadsOrder(t *testing.T) {
	rs := redistest.Start(t)
	e := open(t, rs.URL())
	a := startNode(t, e, redisstore.LogOptions{Writers: 4, WriteQueue: 8})
	const threads, count = 24, 60
	var wg sync.WaitGroup
	for i := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runToEnd(t, a.srv, fmt.Sprint("w", i), "firehose", map[string]any{"count": float64(count)})
		}()
	}
	wg.Wait()
	require.Eventually(t, func() bool { return a.log.Stats().Pending == 0 }, 10*time.Second, 10*time.Millisecond)
	require.Zero(t, a.log.Stats().Dropped)

	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{rs.Addr}, DisableCache: true})
	require.NoError(t, err)
	defer c.Close()
	for i := range threads {
		entries, err := c.Do(context.Background(), c.B().Xrange().Key(fmt.Sprintf("agentstream:{w%d}:events", i)).Start("-").End("+").Build()).AsXRange()
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(entries), count, "thread w%d", i)
		for j, en := range entries {
			require.Equal(t, fmt.Sprintf("%d-0", j+1), en.ID, "thread w%d in order, no gap", i)
		}
	}
}

// A replay that must read the stream while Redis is gone fails the
// subscription with unavailable: before, the stream's part was skipped
// and the client saw a gap with no notice.
func TestReplayThatCannotBeReadFailsTheSubscription(t *testing.T) {
	rs := redistest.Start(t)
	e := open(t, rs.URL())
	l := e.Log(redisstore.LogOptions{ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	n := startNodeWith(t, l, server.NewMemoryState())
	evs := runToEnd(t, n.srv, "gap", "firehose", map[string]any{"count": 20.0})
	require.Eventually(t, func() bool { return l.Flushed("gap") }, 5*time.Second, 10*time.Millisecond)
	l.Release(context.Background(), "gap") // memory forgets the thread's events; the stream keeps them

	got := 0
	ss, replayed, err := n.srv.Subscribe("gap", channels.All, nil)
	require.NoError(t, err, "with Redis there, the replay reads the stream")
	got = replayed
	ss.Close()
	require.Equal(t, len(evs), got)

	rs.Stop()
	_, _, err = n.srv.Subscribe("gap", channels.All, nil)
	require.ErrorIs(t, err, server.ErrUnavailable)
}

// TestTrimKeepsAnotherWritersHistory: trimming removes only events beyond
// the count and byte windows, whichever process writes. Two runs written
// by one process, then one by another (a new node, or the same after a
// restart): the stream keeps all three, and a cursor from the first run
// replays exactly what follows it. Before, the second writer's first XADD
// carried MINID = its own first seq (its byte window knew nothing older)
// and deleted the first process's events.
func TestTrimKeepsAnotherWritersHistory(t *testing.T) {
	rs := redistest.Start(t)
	e := open(t, rs.URL())
	a := startNode(t, e, redisstore.LogOptions{})
	first := runToEnd(t, a.srv, "h", "firehose", map[string]any{"count": 100.0})
	second := runToEnd(t, a.srv, "h", "firehose", map[string]any{"count": 100.0})
	require.Eventually(t, func() bool { return a.log.Flushed("h") }, 5*time.Second, 10*time.Millisecond)
	a.stop()

	b := startNode(t, e, redisstore.LogOptions{})
	held, _, err := b.srv.Subscribe("h", channels.All, nil) // b takes the thread up where the stream stands
	require.NoError(t, err)
	held.Close()
	require.Equal(t, second[len(second)-1].Seq, b.srv.LastSeq("h"))
	third := runToEnd(t, b.srv, "h", "firehose", map[string]any{"count": 100.0})
	require.Equal(t, second[len(second)-1].Seq+1, third[0].Seq)
	require.Eventually(t, func() bool { return b.log.Flushed("h") }, 5*time.Second, 10*time.Millisecond)

	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{rs.Addr}, DisableCache: true})
	require.NoError(t, err)
	defer c.Close()
	n, err := c.Do(context.Background(), c.B().Xlen().Key("agentstream:{h}:events").Build()).AsInt64()
	require.NoError(t, err)
	require.Equal(t, int64(len(first)+len(second)+len(third)), n, "every event of the three runs is kept")

	b.log.Release(context.Background(), "h") // replay from the stream, not from b's memory
	cursor := first[49]
	notices, events := readAll(t, b.srv, "h", &server.Cursor{Epoch: cursor.Epoch(), Seq: cursor.Seq})
	for _, n := range notices {
		require.NotEqual(t, "events.missed", n.Method, "nothing was missed: %s", n.JSON())
	}
	require.Len(t, events, len(first)-50+len(second)+len(third))
	require.Equal(t, cursor.Seq+1, events[0].Seq)
	require.Equal(t, third[len(third)-1].Seq, events[len(events)-1].Seq)
}

// TestShortTTLNeverExpiresALiveStream: with a thread TTL of a second, a run
// publishing for three seconds keeps its stream, all its events in it,
// with a TTL at the end (before, the TTL was renewed once a minute: the key
// expired mid-run and the one recreated had none).
func TestShortTTLNeverExpiresALiveStream(t *testing.T) {
	rs := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, err := redisstore.Open(ctx, rs.URL(), time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	a := startNode(t, e, redisstore.LogOptions{})
	evs := runToEnd(t, a.srv, "short", "firehose", map[string]any{"count": 60.0, "rate": 20.0})
	require.Eventually(t, func() bool { return a.log.Flushed("short") }, 5*time.Second, 10*time.Millisecond)

	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{rs.Addr}, DisableCache: true})
	require.NoError(t, err)
	defer c.Close()
	n, err := c.Do(context.Background(), c.B().Xlen().Key("agentstream:{short}:events").Build()).AsInt64()
	require.NoError(t, err)
	require.Equal(t, int64(len(evs)), n, "no event lost to an expiry mid-run")
	ttl, err := c.Do(context.Background(), c.B().Pttl().Key("agentstream:{short}:events").Build()).AsInt64()
	require.NoError(t, err)
	require.Positive(t, ttl, "the stream has a TTL")
}

// TestHoleInTheStreamIsAnnounced: events missing inside a stream (a Redis
// restored from its append-only file without its last writes, while the
// writer went on) are announced to a replay with events.missed, never
// passed off as continuity.
func TestHoleInTheStreamIsAnnounced(t *testing.T) {
	rs := redistest.Start(t)
	e := open(t, rs.URL())
	a := startNode(t, e, redisstore.LogOptions{})
	runToEnd(t, a.srv, "holed", "firehose", map[string]any{"count": 10.0})
	require.Eventually(t, func() bool { return a.log.Stats().Pending == 0 }, 5*time.Second, 10*time.Millisecond)
	for _, id := range []string{"6-0", "7-0", "8-0"} {
		require.NoError(t, rawRedis(rs.Addr, "XDEL", "agentstream:{holed}:events", id))
	}
	b := startNode(t, e, redisstore.LogOptions{}) // reads the stream from Redis
	sub, _, err := b.srv.Subscribe("holed", channels.All, &server.Cursor{Seq: 4})
	require.NoError(t, err)
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var got []string
	for len(got) < 5 {
		ev, err := sub.Next(ctx)
		require.NoError(t, err)
		if ev.Seq > 0 {
			got = append(got, fmt.Sprint(ev.Seq))
		} else if m, ok := ev.Payload.(*protocol.ServerEventEventsMissed); ok {
			got = append(got, fmt.Sprintf("missed %d-%d", m.Params.Data.Since, m.Params.Data.FirstAvailableSeq))
		}
	}
	require.Equal(t, []string{"5", "missed 5-9", "9", "10", "11"}, got)
}

// TestIngestAnnouncesWhatTheStreamLost: a node that receives another
// node's event after a hole it cannot fill from the stream (a Redis
// restarted without those events) tells its live subscribers with
// events.missed before delivering it.
func TestIngestAnnouncesWhatTheStreamLost(t *testing.T) {
	rs := redistest.Start(t)
	e := open(t, rs.URL())
	a := startNode(t, e, redisstore.LogOptions{})
	runToEnd(t, a.srv, "source", "firehose", map[string]any{"count": 10.0})
	require.Eventually(t, func() bool { return a.log.Stats().Pending == 0 }, 5*time.Second, 10*time.Millisecond)
	var evs []*server.Event
	require.NoError(t, a.log.Stored(context.Background(), "source", 0, func(ev *server.Event) bool { evs = append(evs, ev); return true }))
	require.Len(t, evs, 13)

	b := startNode(t, e, redisstore.LogOptions{})
	sub, _, err := b.srv.Subscribe("copy", channels.All, nil) // a stream Redis has nothing of
	require.NoError(t, err)
	defer sub.Close()
	b.host.Ingest("copy", evs[0])
	b.host.Ingest("copy", evs[4]) // 2 to 4 are nowhere
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var got []string
	for len(got) < 3 {
		ev, err := sub.Next(ctx)
		require.NoError(t, err)
		if ev.Seq > 0 {
			got = append(got, fmt.Sprint(ev.Seq))
		} else if m, ok := ev.Payload.(*protocol.ServerEventEventsMissed); ok {
			got = append(got, fmt.Sprintf("missed %d: %d-%d", m.Params.Data.Missed, m.Params.Data.Since, m.Params.Data.FirstAvailableSeq))
		}
	}
	require.Equal(t, []string{"1", "missed 3: 1-5", "5"}, got)
	require.Equal(t, uint64(1), b.srv.Metrics().StreamGaps)
}

// TestQuietRemoteRunsAreTheOnesToCatchUp: a node lists the threads whose
// run on another node is open; asked for the quiet ones (those to read
// the stream of, lest a run's last events lost in a pub/sub outage never
// arrive), it leaves out a run whose events arrived within that time: its
// next event fills any gap, and reading every followed stream every
// second would cost Redis a round trip per thread.
func TestQuietRemoteRunsAreTheOnesToCatchUp(t *testing.T) {
	rs := redistest.Start(t)
	e := open(t, rs.URL())
	b := startNode(t, e, redisstore.LogOptions{})
	sub, _, err := b.srv.Subscribe("followed", channels.All, nil) // b holds the thread
	require.NoError(t, err)
	defer sub.Close()

	a := startNode(t, e, redisstore.LogOptions{})
	evs := runToEnd(t, a.srv, "source", "firehose", map[string]any{"count": 10.0})
	require.True(t, rootEnded(evs[len(evs)-1]))
	for _, ev := range evs[:len(evs)-1] { // all but the run's end: its run is open
		b.host.Ingest("followed", ev)
	}
	require.Equal(t, []string{"followed"}, b.host.RemoteRuns(0))
	require.Empty(t, b.host.RemoteRuns(time.Hour), "events arrived within the hour")
	require.Eventually(t, func() bool {
		return slices.Equal(b.host.RemoteRuns(20*time.Millisecond), []string{"followed"})
	}, 5*time.Second, 10*time.Millisecond, "quiet for 20 ms")

	b.host.Ingest("followed", evs[len(evs)-1])
	require.Empty(t, b.host.RemoteRuns(0), "the run ended")
}

// TestCatchUpOfManyThreads: a node catching up on many threads at once
// (after it subscribed to them, or in its sweep) reads their heads in
// pipelined round trips, and brings each to its own stream's head: a
// thread with more events, one with fewer, one Redis holds nothing of,
// and, among them, one the node does not hold (left out, the others'
// heads still matched to their threads).
func TestCatchUpOfManyThreads(t *testing.T) {
	rs := redistest.Start(t)
	e := open(t, rs.URL())
	b := startNode(t, e, redisstore.LogOptions{})
	for _, th := range []string{"few", "many", "empty"} {
		sub, _, err := b.srv.Subscribe(th, channels.All, nil) // b holds them
		require.NoError(t, err)
		defer sub.Close()
	}
	a := startNode(t, e, redisstore.LogOptions{})
	few := runToEnd(t, a.srv, "few", "firehose", map[string]any{"count": 2.0})
	many := runToEnd(t, a.srv, "many", "firehose", map[string]any{"count": 9.0})
	runToEnd(t, a.srv, "elsewhere", "firehose", map[string]any{"count": 1.0})
	require.Eventually(t, func() bool { return a.log.Stats().Pending == 0 }, 5*time.Second, 10*time.Millisecond)
	require.Zero(t, b.srv.LastSeq("few"), "b has not ingested a's events")

	heads := b.log.Heads(context.Background(), []string{"many", "empty", "few"})
	require.Equal(t, []uint64{many[len(many)-1].Seq, 0, few[len(few)-1].Seq}, []uint64{heads[0].Seq, heads[1].Seq, heads[2].Seq})
	for _, h := range heads {
		require.NoError(t, h.Err)
	}

	require.NoError(t, b.host.CatchUp("elsewhere", "many", "empty", "few"))
	require.Equal(t, many[len(many)-1].Seq, b.srv.LastSeq("many"))
	require.Equal(t, few[len(few)-1].Seq, b.srv.LastSeq("few"))
	require.Zero(t, b.srv.LastSeq("empty"))
}

// TestDeletedThreadStaysDeleted: a thread deleted while some of its
// events still wait to be written to Redis (delivered first, gathered
// into a later batch) is deleted once they are written, not before: a
// batch written after the deletion would make its stream again, and the
// thread would come back.
func TestDeletedThreadStaysDeleted(t *testing.T) {
	rs := redistest.Start(t)
	e := open(t, rs.URL())
	l := e.Log(redisstore.LogOptions{DeliverFirst: true, WriteGather: 100 * time.Millisecond})
	st := e.State()
	st.Flushed = l.Flushed
	a := startNodeWith(t, l, st)
	runToEnd(t, a.srv, "gone", "firehose", map[string]any{"count": float64(300)})
	require.Positive(t, l.Stats().Pending, "the run's last events still wait for their batch")
	_, err := threads.Of(a.srv).Delete(context.Background(), "gone")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return l.Stats().Pending == 0 }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(150 * time.Millisecond) // a batch that was still to come would be written by now
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{rs.Addr}, DisableCache: true})
	require.NoError(t, err)
	defer c.Close()
	n, err := c.Do(context.Background(), c.B().Exists().Key("agentstream:{gone}:events", "agentstream:{gone}:writer").Build()).AsInt64()
	require.NoError(t, err)
	require.Zero(t, n, "nothing of the thread is left in Redis")
}

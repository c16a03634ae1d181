package diskstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentstream/agentstream/assistants"
	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/diskstore"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T, dir string) *server.Server {
	t.Helper()
	eng, err := diskstore.Open(diskstore.Options{Dir: dir})
	require.NoError(t, err)
	srv := server.New(server.Config{Engine: eng})
	assistants.Register(srv)
	return srv
}

// readAll reads a session's events until n came (notices aside).
func readAll(t *testing.T, ss *server.Session, n int) []*server.Event {
	t.Helper()
	var out []*server.Event
	for len(out) < n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		e, err := ss.Next(ctx)
		cancel()
		require.NoError(t, err, "after %d of %d", len(out), n)
		if e.Seq > 0 {
			out = append(out, e)
		}
	}
	return out
}

// runEcho runs echo on thread to its end and returns the run's events.
func runEcho(t *testing.T, srv *server.Server, thread, text string) []*server.Event {
	t.Helper()
	ss := srv.NewSession(thread)
	defer ss.Close()
	_, _, err := ss.Subscribe(channels.All, server.SeqCursor(srv.LastSeq(thread)))
	require.NoError(t, err)
	_, err = ss.Do(context.Background(), &protocol.ClientCommand{Value: &protocol.ClientCommandRunStart{ID: 1,
		Params: protocol.RunStartParams{AssistantID: "echo", Input: map[string]any{"messages": []any{map[string]any{"role": "user", "content": text}}}}}})
	require.NoError(t, err)
	var out []*server.Event
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		e, err := ss.Next(ctx)
		cancel()
		require.NoError(t, err)
		if e.Seq == 0 {
			continue
		}
		out = append(out, e)
		if e.EndsRun() {
			return out
		}
	}
}

// TestThreadsOutliveARestart: after a restart on the same directory a
// thread's events replay from a cursor with the same ids and bytes, its
// values and owner are there, and the next run continues the stream in
// the same epoch.
func TestThreadsOutliveARestart(t *testing.T) {
	dir := t.TempDir()
	srv := open(t, dir)
	alice := &auth.Principal{Subject: "alice"}
	require.NoError(t, srv.Authorize(alice, "t1", true))
	first := runEcho(t, srv, "t1", "kept on disk")
	require.NoError(t, srv.Close(context.Background()))

	srv = open(t, dir)
	defer srv.Close(context.Background())
	cut := first[2]
	c, err := server.ParseCursor(cut.EventID())
	require.NoError(t, err)
	ss := srv.NewSession("t1")
	defer ss.Close()
	_, _, err = ss.Subscribe(channels.All, &c)
	require.NoError(t, err)
	again := readAll(t, ss, len(first)-3)
	for i, e := range again {
		require.Equal(t, first[i+3].EventID(), e.EventID(), "the same id")
		require.Equal(t, string(first[i+3].JSON()), string(e.JSON()), "the same event")
	}
	st, ok, err := srv.State(context.Background(), "t1")
	require.NoError(t, err)
	require.True(t, ok)
	require.NotEmpty(t, st.Values["messages"], "the values")
	err = srv.Authorize(&auth.Principal{Subject: "bob"}, "t1", false)
	require.True(t, errors.Is(err, server.ErrPermissionDenied), "alice still owns it: %v", err)

	next := runEcho(t, srv, "t1", "and goes on")
	last := first[len(first)-1]
	require.Equal(t, last.Seq+1, next[0].Seq, "the stream continues")
	require.Equal(t, last.Epoch(), next[0].Epoch(), "in the same epoch")
}

// TestALongThreadReplaysInFull: 100,000 events, more than the buffer
// holds, replay in full and in order after a restart.
func TestALongThreadReplaysInFull(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 events")
	}
	dir := t.TempDir()
	srv := open(t, dir)
	name := "tick"
	for b := 0; b < 100; b++ {
		batch := server.ProducerBatch{}
		for i := 0; i < 1000; i++ {
			batch.Events = append(batch.Events, protocol.ProducerEvent{Event: &protocol.ServerEventCustom{Params: protocol.EventCustomParams{
				Namespace: protocol.Namespace{}, Data: protocol.CustomData{Name: &name, Payload: map[string]any{"n": b*1000 + i}}}}})
		}
		_, err := srv.Publish(context.Background(), "long", batch)
		require.NoError(t, err)
	}
	require.NoError(t, srv.Close(context.Background()))

	srv = open(t, dir)
	defer srv.Close(context.Background())
	// Read as a client does: a replay larger than a connection's queue
	// is cut, and the client resumes after the last event it got.
	var got []*server.Event
	for len(got) < 100000 {
		ss := srv.NewSession("long")
		_, _, err := ss.Subscribe(channels.All, server.SeqCursor(uint64(len(got))))
		require.NoError(t, err)
		for len(got) < 100000 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			e, err := ss.Next(ctx)
			cancel()
			var slow *server.SlowConsumerError
			if errors.As(err, &slow) {
				break
			}
			require.NoError(t, err)
			if e.Seq > 0 {
				got = append(got, e)
			}
		}
		ss.Close()
	}
	for i, e := range got {
		require.Equal(t, uint64(i+1), e.Seq)
		if i%9999 == 0 {
			require.Contains(t, string(e.JSON()), fmt.Sprintf(`"n":%d`, i))
		}
	}
}

// TestANearlyFullDiskRefusesThenResumes: with less free space than
// MinFree the store takes no events (a clear error, Ready says why) and
// keeps what it had; once space returns it takes them again.
func TestANearlyFullDiskRefusesThenResumes(t *testing.T) {
	var free atomic.Uint64
	free.Store(1 << 40)
	eng, err := diskstore.Open(diskstore.Options{Dir: t.TempDir(), MinFree: 1 << 30, FreeSpace: func() (uint64, error) { return free.Load(), nil }})
	require.NoError(t, err)
	srv := server.New(server.Config{Engine: eng})
	defer srv.Close(context.Background())
	name := "tick"
	one := server.ProducerBatch{Events: []protocol.ProducerEvent{{Event: &protocol.ServerEventCustom{Params: protocol.EventCustomParams{
		Namespace: protocol.Namespace{}, Data: protocol.CustomData{Name: &name, Payload: 1}}}}}}
	_, err = srv.Publish(context.Background(), "full", one)
	require.NoError(t, err)
	require.NoError(t, eng.Ready(context.Background()))

	free.Store(1 << 20)
	require.Eventually(t, func() bool { return eng.Ready(context.Background()) != nil }, 5*time.Second, 20*time.Millisecond)
	require.ErrorIs(t, eng.Ready(context.Background()), diskstore.ErrDiskFull)
	_, err = srv.Publish(context.Background(), "full", one)
	require.ErrorContains(t, err, "nearly full")

	free.Store(1 << 40)
	require.Eventually(t, func() bool { return eng.Ready(context.Background()) == nil }, 5*time.Second, 20*time.Millisecond)
	_, err = srv.Publish(context.Background(), "full", one)
	require.NoError(t, err)
	ss := srv.NewSession("full")
	defer ss.Close()
	_, _, err = ss.Subscribe(channels.All, server.SeqCursor(0))
	require.NoError(t, err)
	got := readAll(t, ss, 2)
	require.Equal(t, []uint64{1, 2}, []uint64{got[0].Seq, got[1].Seq}, "what it had is intact, the refused event took no seq")
}

// TestRetention: a thread keeps its last MaxEvents events and none older
// than MaxAge; a replay from before what is kept gets the missed-events
// notice, then what is kept.
func TestRetention(t *testing.T) {
	now := time.Now()
	eng, err := diskstore.Open(diskstore.Options{Dir: t.TempDir(), MaxEvents: 100, MaxAge: time.Hour, BufferEvents: 16, Now: func() time.Time { return now }})
	require.NoError(t, err)
	srv := server.New(server.Config{Engine: eng})
	defer srv.Close(context.Background())
	name := "tick"
	publish := func(thread string, n int, ts time.Time) {
		b := server.ProducerBatch{}
		for i := 0; i < n; i++ {
			b.Events = append(b.Events, protocol.ProducerEvent{Timestamp: uint64(ts.UnixMilli()), Event: &protocol.ServerEventCustom{Params: protocol.EventCustomParams{
				Namespace: protocol.Namespace{}, Data: protocol.CustomData{Name: &name, Payload: i}}}})
		}
		_, err := srv.Publish(context.Background(), thread, b)
		require.NoError(t, err)
	}
	publish("many", 300, now)
	publish("aged", 10, now.Add(-2*time.Hour))
	publish("aged", 5, now)
	oldest := func(thread string) uint64 {
		ss := srv.NewSession(thread)
		defer ss.Close()
		_, _, err := ss.Subscribe(channels.All, server.SeqCursor(0))
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for {
			e, err := ss.Next(ctx)
			require.NoError(t, err)
			if e.Seq > 0 {
				return e.Seq
			}
		}
	}
	require.Eventually(t, func() bool { return oldest("many") == 201 }, 10*time.Second, 50*time.Millisecond, "the last 100 kept")
	require.Eventually(t, func() bool { return oldest("aged") == 11 }, 10*time.Second, 50*time.Millisecond, "the old ones dropped")

	ss := srv.NewSession("many")
	defer ss.Close()
	_, _, err = ss.Subscribe(channels.All, server.SeqCursor(50))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	first, err := ss.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, "events.missed", first.Method, "a cursor from before what is kept")
	for {
		next, err := ss.Next(ctx)
		require.NoError(t, err)
		if next.Seq > 0 {
			require.Equal(t, uint64(201), next.Seq, "then what is kept")
			break
		}
	}
}

// TestTheTreeKeepsRoomForItself: whatever MinFree says (1 byte here, as
// --data-min-free 1 asks), a write to the tree (values, checkpoints,
// records) is refused once its disk has less than MinTreeFree free,
// before Pebble's own write would fail and stop the process; writes go
// on once space returns; and a store is not opened with less.
func TestTheTreeKeepsRoomForItself(t *testing.T) {
	var free atomic.Uint64
	free.Store(1 << 40)
	space := func() (uint64, error) { return free.Load(), nil }
	dir := t.TempDir()
	eng, err := diskstore.Open(diskstore.Options{Dir: dir, MinFree: 1, FreeSpace: space})
	require.NoError(t, err)
	st := eng.Stores()
	ctx := context.Background()
	require.NoError(t, st.State.SetValues(ctx, "a", map[string]any{"n": 1}))
	free.Store(diskstore.MinTreeFree - 1)
	require.Eventually(t, func() bool { return st.State.SetValues(ctx, "a", map[string]any{"n": 2}) != nil }, 5*time.Second, time.Millisecond)
	err = st.State.SetValues(ctx, "a", map[string]any{"n": 2})
	require.ErrorIs(t, err, diskstore.ErrNotWritable)
	require.ErrorIs(t, err, diskstore.ErrDiskFull)
	require.ErrorIs(t, st.State.AddCheckpoint(ctx, "a", server.CheckpointRecord{ID: "c1"}), diskstore.ErrDiskFull)
	require.ErrorIs(t, st.Catalog.SetRecord(ctx, server.ThreadRecord{ID: "a"}), diskstore.ErrDiskFull)
	free.Store(1 << 40)
	require.Eventually(t, func() bool { return st.State.SetValues(ctx, "a", map[string]any{"n": 3}) == nil }, 5*time.Second, time.Millisecond)
	v, _, err := st.State.Values(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, float64(3), v["n"])
	require.NoError(t, eng.Close())

	free.Store(diskstore.MinTreeFree - 1)
	_, err = diskstore.Open(diskstore.Options{Dir: dir, MinFree: 1, FreeSpace: space})
	require.ErrorIs(t, err, diskstore.ErrDiskFull)
	require.ErrorContains(t, err, "to start")
}

package server_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/internal/testkit/servetest"
	"github.com/agentstream/agentstream/internal/testkit/stalltest"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/stretchr/testify/require"
)

// stalling is an engine whose writes stall on demand, as a paused store's
// do: while its log is stalled, a publisher's wait for room in the log
// (RoomWaiter) blocks until it is released; while its state is, every
// write of values or checkpoints does. Its reads go on.
type stalling struct {
	log, state gate
}

// gate blocks its callers between stall and release.
type gate struct {
	mu      sync.Mutex
	ch      chan struct{} // nil when not stalled; closed on release
	blocked atomic.Int64  // calls blocked now
}

func (g *gate) stall() {
	g.mu.Lock()
	g.ch = make(chan struct{})
	g.mu.Unlock()
}

func (g *gate) release() {
	g.mu.Lock()
	if g.ch != nil {
		close(g.ch)
		g.ch = nil
	}
	g.mu.Unlock()
}

func (g *gate) wait(ctx context.Context) error {
	g.mu.Lock()
	ch := g.ch
	g.mu.Unlock()
	if ch == nil {
		return nil
	}
	g.blocked.Add(1)
	defer g.blocked.Add(-1)
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *stalling) WaitRoom(ctx context.Context, _ string) error { return s.log.wait(ctx) }

func (s *stalling) release() {
	s.log.release()
	s.state.release()
}

// stallingState is a MemoryState whose writes wait for a stalling engine.
type stallingState struct {
	*server.MemoryState
	s *stalling
}

func (st stallingState) SetValues(ctx context.Context, thread string, v map[string]any) error {
	if err := st.s.state.wait(ctx); err != nil {
		return err
	}
	return st.MemoryState.SetValues(ctx, thread, v)
}

func (st stallingState) AddCheckpoint(ctx context.Context, thread string, cp server.CheckpointRecord) error {
	if err := st.s.state.wait(ctx); err != nil {
		return err
	}
	return st.MemoryState.AddCheckpoint(ctx, thread, cp)
}

// TestAStalledEngineHoldsUpOnlyItsWriters: with the engine's state writes
// stalled while a run writes its values, checkpoints and events, and then
// its log's room, that thread's run waits, and nothing else does: a new subscription to it
// (and to another thread), its last seq, its state, a command, the
// sweeper all answer. Once the engine returns, the run goes on, and every
// subscriber has every event once, in order, and the stored values are
// those the stream announced last.
func TestAStalledEngineHoldsUpOnlyItsWriters(t *testing.T) {
	eng := &stalling{}
	mem := server.NewMemoryState()
	stores := server.MemoryStores(server.NewMemoryLog(server.DefaultBufferEvents, server.DefaultBufferBytes), mem)
	stores.State, stores.Room = stallingState{mem, eng}, eng
	s := newServer(t, server.Config{Stores: stores})
	s.Register("steps", server.AssistantFunc(stalltest.Steps))

	other, _, err := s.Subscribe("other", channels.All, nil)
	require.NoError(t, err)
	defer other.Close()
	start(t, s, "other", "steps", map[string]any{"n": 3.0})
	collect(t, other, rootEnded)

	sub, _, err := s.Subscribe("busy", channels.All, nil)
	require.NoError(t, err)
	defer sub.Close()
	runID := start(t, s, "busy", "steps", nil)
	got := collect(t, sub, func(e *server.Event) bool { return stalltest.Tick(t, e) == 5 })

	var ticks []*server.Session
	defer func() {
		for _, ss := range ticks {
			ss.Close()
		}
	}()
	defer eng.release() // first, should the test fail stalled: the closes above wait for it
	for _, g := range []struct {
		what string
		gate *gate
	}{{"state", &eng.state}, {"log", &eng.log}} {
		g.gate.stall()
		require.Eventually(t, func() bool { return g.gate.blocked.Load() > 0 }, 5*time.Second, time.Millisecond, "the run waits for the engine's %s", g.what)
		var stalled uint64
		stalltest.Within(t, "LastSeq", func() { stalled = s.LastSeq("busy") })
		stalltest.Within(t, "a subscription to the stalled run's thread", func() {
			ss, _, err := s.Subscribe("busy", channels.Filter{Channels: []string{channels.Custom}}, nil)
			require.NoError(t, err)
			ticks = append(ticks, ss)
		})
		stalltest.Within(t, "a subscription to another thread", func() {
			again, n, err := s.Subscribe("other", channels.All, nil)
			require.NoError(t, err)
			require.Positive(t, n)
			again.Close()
		})
		stalltest.Within(t, "the thread's state", func() {
			st, ok, err := s.State(context.Background(), "busy")
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, "running", st.Status)
		})
		stalltest.Within(t, "state.get", func() { do(t, s, "busy", &protocol.ClientCommandStateGet{}) })
		stalltest.Within(t, "input.inject", func() {
			do(t, s, "busy", &protocol.ClientCommandInputInject{Params: protocol.InputInjectParams{Namespace: protocol.Namespace{}, Message: protocol.InputMessage{Role: "user", Content: "later"}}})
		})
		stalltest.Within(t, "the sweeper", func() { servetest.Sweep(s) })
		require.Positive(t, g.gate.blocked.Load(), "the engine's %s stayed stalled throughout", g.what)
		require.Equal(t, stalled, s.LastSeq("busy"), "nothing was published while it was")
		g.gate.release()
		got = append(got, collect(t, sub, func(e *server.Event) bool { return stalltest.Tick(t, e) == stalltest.Tick(t, got[len(got)-1])+5 })...)
	}

	got = append(got, collect(t, sub, func(e *server.Event) bool { return stalltest.Tick(t, e) == 20 })...)
	do(t, s, "busy", &protocol.ClientCommandRunCancel{Params: protocol.RunCancelParams{RunID: &runID}})
	got = append(got, collect(t, sub, rootEnded)...)
	tickSeqs, lastValues := stalltest.CheckRun(t, got, 1)
	values, _, err := mem.Values(context.Background(), "busy")
	require.NoError(t, err)
	require.Equal(t, lastValues, any(values), "the store holds the values the stream announced last")

	// The subscriptions made while the engine was stalled have every tick.
	for _, ss := range ticks {
		var seen []uint64
		for _, e := range collect(t, ss, func(e *server.Event) bool { return e.Seq == tickSeqs[len(tickSeqs)-1] }) {
			if stalltest.IsTick(e) {
				seen = append(seen, e.Seq)
			}
		}
		require.Equal(t, tickSeqs, seen)
	}
}

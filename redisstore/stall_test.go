package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/internal/testkit/redistest"
	"github.com/agentstream/agentstream/internal/testkit/servetest"
	"github.com/agentstream/agentstream/internal/testkit/stalltest"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/redisstore"
	"github.com/agentstream/agentstream/server"
	"github.com/stretchr/testify/require"
)

// TestAPausedRedisHoldsUpOnlyItsWriters: a real redis-server paused
// (SIGSTOP) while a run writes its values, checkpoints and events holds up
// that run, and nothing else: a new subscription to its thread and to
// another, its last seq, a command and the sweeper answer while Redis
// sleeps. Once Redis wakes, the run goes on, and the subscribers and the
// stream in Redis have every event once, in order, with the values the
// stream announced last in Redis.
func TestAPausedRedisHoldsUpOnlyItsWriters(t *testing.T) {
	rs := redistest.Start(t)
	e := open(t, rs.URL())
	st := e.State()
	st.Timeout = time.Minute // the pause outlasts no timeout: the writes wait for Redis
	l := e.Log(redisstore.LogOptions{WriteQueue: 8, QueueWait: time.Minute, WriteTimeout: time.Minute})
	n := startNodeWith(t, l, st)
	n.srv.Register("steps", server.AssistantFunc(stalltest.Steps))
	ctx := context.Background()
	run := func(thread string, input any) string {
		resp, err := n.srv.Do(ctx, thread, &protocol.ClientCommand{Value: &protocol.ClientCommandRunStart{ID: 1, Params: protocol.RunStartParams{AssistantID: "steps", Input: input}}})
		require.NoError(t, err)
		return *resp.Result.(protocol.RunResult).RunID
	}
	read := func(sub *server.Session, stop func(*server.Event) bool) []*server.Event {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		var out []*server.Event
		for {
			e, err := sub.Next(ctx)
			require.NoError(t, err, "after %d events", len(out))
			out = append(out, e)
			if stop(e) {
				return out
			}
		}
	}
	ticksAndEnds := channels.Filter{Channels: []string{channels.Custom, channels.Lifecycle}}

	other, _, err := n.srv.Subscribe("other", ticksAndEnds, nil)
	require.NoError(t, err)
	defer other.Close()
	run("other", map[string]any{"n": 3.0})
	read(other, rootEnded)

	sub, _, err := n.srv.Subscribe("busy", channels.All, nil)
	require.NoError(t, err)
	defer sub.Close()
	runID := run("busy", nil)
	got := read(sub, func(e *server.Event) bool { return stalltest.Tick(t, e) == 5 })

	// The run stops where Redis left it: its events wait for room in the
	// write queue, or its checkpoint for Redis to answer.
	rs.Pause()
	defer rs.Resume() // first, should the test fail with Redis asleep: the closes above wait for it
	var stalled, later uint64
	for deadline := time.Now().Add(10 * time.Second); ; {
		stalltest.Within(t, "LastSeq", func() { stalled = n.srv.LastSeq("busy") })
		time.Sleep(200 * time.Millisecond) // what the run still publishes meanwhile
		stalltest.Within(t, "LastSeq", func() { later = n.srv.LastSeq("busy") })
		if later == stalled {
			break
		}
		require.True(t, time.Now().Before(deadline), "the run waits for Redis")
	}
	var ticks *server.Session
	stalltest.Within(t, "a subscription to the stalled run's thread", func() {
		ticks, _, err = n.srv.Subscribe("busy", ticksAndEnds, nil)
		require.NoError(t, err)
	})
	defer ticks.Close()
	stalltest.Within(t, "a subscription to another thread", func() {
		again, replayed, err := n.srv.Subscribe("other", ticksAndEnds, nil)
		require.NoError(t, err)
		require.Positive(t, replayed)
		again.Close()
	})
	stalltest.Within(t, "LastSeq", func() { require.Equal(t, stalled, n.srv.LastSeq("busy")) })
	stalltest.Within(t, "input.inject", func() {
		_, err := n.srv.Do(ctx, "busy", &protocol.ClientCommand{Value: &protocol.ClientCommandInputInject{ID: 2, Params: protocol.InputInjectParams{Namespace: protocol.Namespace{}, Message: protocol.InputMessage{Role: "user", Content: "later"}}}})
		require.NoError(t, err)
	})
	stalltest.Within(t, "the sweeper", func() { servetest.Sweep(n.srv) })
	require.Equal(t, stalled, n.srv.LastSeq("busy"), "Redis slept throughout")
	rs.Resume()

	got = append(got, read(sub, func(e *server.Event) bool { return stalltest.Tick(t, e) == 20 })...)
	_, err = n.srv.Do(ctx, "busy", &protocol.ClientCommand{Value: &protocol.ClientCommandRunCancel{ID: 3, Params: protocol.RunCancelParams{RunID: &runID}}})
	require.NoError(t, err)
	got = append(got, read(sub, rootEnded)...)
	tickSeqs, lastValues := stalltest.CheckRun(t, got, 1)
	requireStoredInOrder(t, l, "busy", int(got[len(got)-1].Seq))
	values, _, err := st.Values(ctx, "busy")
	require.NoError(t, err)
	require.Equal(t, lastValues, any(values), "Redis holds the values the stream announced last")

	var seen []uint64
	for _, e := range read(ticks, func(e *server.Event) bool { return e.Seq == tickSeqs[len(tickSeqs)-1] }) {
		if stalltest.IsTick(e) {
			seen = append(seen, e.Seq)
		}
	}
	require.Equal(t, tickSeqs, seen, "the subscription made while Redis slept has every tick")
}

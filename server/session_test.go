package server_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/stretchr/testify/require"
)

// drain reads everything a session has queued.
func drain(ss *server.Session) (out []*server.Event, err error) {
	for {
		e, ok, err := ss.TryNext()
		if !ok {
			return out, err
		}
		out = append(out, e)
	}
}

// runDone starts an echo run on thread and waits until it has ended.
func runDone(t *testing.T, s *server.Server, thread, text string) {
	t.Helper()
	w, _, err := s.Subscribe(thread, channels.Filter{Channels: []string{channels.Lifecycle}, Depth: 0}, server.SeqCursor(0))
	require.NoError(t, err)
	defer w.Close()
	start(t, s, thread, "echo", userInput(text))
	collect(t, w, rootEnded)
}

// requireInOrderOnce fails unless the events' sequence numbers strictly
// increase (notices, seq 0, aside).
func requireInOrderOnce(t *testing.T, es []*server.Event) {
	t.Helper()
	var last uint64
	for _, e := range es {
		if e.Seq == 0 {
			continue
		}
		require.Greater(t, e.Seq, last, "in order, each once: %v", describeAll(es))
		last = e.Seq
	}
}

// matching lists the seqs of events in es that f selects.
func matching(es []*server.Event, fs ...channels.Filter) []uint64 {
	var out []uint64
	for _, e := range es {
		for _, f := range fs {
			if e.Seq > 0 && f.Matches(e.Channel, e.Name, e.Namespace) {
				out = append(out, e.Seq)
				break
			}
		}
	}
	return out
}

func TestSessionDeliversOverlappingSubscriptionsOnceInOrder(t *testing.T) {
	s := newServer(t, server.Config{})
	ss := s.NewSession("t")
	defer ss.Close()
	msgs := channels.Filter{Channels: []string{channels.Messages, channels.Lifecycle}, Depth: channels.Unlimited}
	life := channels.Filter{Channels: []string{channels.Lifecycle}, Depth: channels.Unlimited}
	everything := channels.All
	for _, f := range []channels.Filter{msgs, life, everything, life} {
		_, _, err := ss.Subscribe(f, nil)
		require.NoError(t, err)
	}
	start(t, s, "t", "echo", userInput("one two three"))
	got := collect(t, ss, rootEnded)
	requireInOrderOnce(t, got)
	require.Equal(t, protocol.ServerEventValuesMethodValue, got[0].Method, "the (empty) state first")
	require.Equal(t, uint64(1), seqs(got)[0])
	require.Len(t, seqs(got), int(got[len(got)-1].Seq), "every event of the run, with none skipped")
}

// The WebSocket case of issue 10: three subscribes sent back to back after
// a run finished get one replay, the union of their filters, in seq order
// with no event repeated.
func TestSubscribesTogetherGetOneMergedReplay(t *testing.T) {
	s := newServer(t, server.Config{})
	runDone(t, s, "t", "hello there")
	filters := []channels.Filter{
		{Channels: []string{channels.Messages, channels.Lifecycle, channels.Input}, Depth: channels.Unlimited},
		{Channels: []string{channels.Lifecycle, channels.Input}, Depth: channels.Unlimited},
		{Channels: []string{channels.Values, channels.Lifecycle, channels.Input}, Depth: channels.Unlimited},
	}
	ss := s.NewSession("t")
	defer ss.Close()
	total := 0
	for _, f := range filters {
		_, n, err := ss.Subscribe(f, nil)
		require.NoError(t, err)
		total += n
	}
	got, err := drain(ss)
	require.NoError(t, err)
	requireInOrderOnce(t, got)
	// The values snapshot (a notice, seq 0) comes before the replay.
	require.Equal(t, uint64(0), got[0].Seq)
	require.Equal(t, protocol.ServerEventValuesMethodValue, got[0].Method)
	all, _, err := s.Subscribe("t", channels.All, nil)
	require.NoError(t, err)
	defer all.Close()
	everything, err := drain(all)
	require.NoError(t, err)
	require.Equal(t, matching(everything, filters...), seqs(got), "the union of the filters, each event once")
	require.Greater(t, total, len(seqs(got)), "each subscription counts its own replay")
}

func TestReplayMergesWithUnreadLiveEvents(t *testing.T) {
	s := newServer(t, server.Config{})
	ss := s.NewSession("t")
	defer ss.Close()
	custom := channels.Filter{Channels: []string{channels.Custom}, Depth: channels.Unlimited}
	_, _, err := ss.Subscribe(custom, nil)
	require.NoError(t, err)
	start(t, s, "t", "firehose", map[string]any{"count": float64(20), "size": float64(10)})
	w, _, _ := s.Subscribe("t", channels.Filter{Channels: []string{channels.Lifecycle}, Depth: 0}, nil)
	defer w.Close()
	collect(t, w, rootEnded)
	// Nothing has been read: the custom events are queued. A lifecycle
	// subscription now replays the run's lifecycle events, which came before,
	// between and after them.
	life := channels.Filter{Channels: []string{channels.Lifecycle}, Depth: channels.Unlimited}
	_, n, err := ss.Subscribe(life, nil)
	require.NoError(t, err)
	got, err := drain(ss)
	require.NoError(t, err)
	requireInOrderOnce(t, got)
	require.Len(t, got, 20+n)
	require.GreaterOrEqual(t, n, 2)
	require.Equal(t, protocol.ServerEventLifecycleMethodValue, got[0].Method, "the run's start, replayed before the queued events")
	require.Equal(t, protocol.ServerEventLifecycleMethodValue, got[len(got)-1].Method, "its end, after them")
}

func TestReplayOfEventsAlreadyReadIsSentAgain(t *testing.T) {
	// A new subscription gets its replay even where the connection has read
	// some of it through another subscription: the client routes events to
	// subscriptions by filter, and the new one has seen nothing.
	s := newServer(t, server.Config{})
	ss := s.NewSession("t")
	defer ss.Close()
	life := channels.Filter{Channels: []string{channels.Lifecycle}, Depth: channels.Unlimited}
	_, _, err := ss.Subscribe(life, nil)
	require.NoError(t, err)
	runDone(t, s, "t", "hi")
	first, err := drain(ss)
	require.NoError(t, err)
	require.NotEmpty(t, first)
	_, _, err = ss.Subscribe(channels.Filter{Channels: []string{channels.Lifecycle, channels.Messages}, Depth: channels.Unlimited}, nil)
	require.NoError(t, err)
	again, err := drain(ss)
	require.NoError(t, err)
	requireInOrderOnce(t, again)
	require.Equal(t, seqs(first), matching(again, life))
}

func TestUnsubscribeStopsItsEventsOnly(t *testing.T) {
	s := newServer(t, server.Config{})
	ss := s.NewSession("t")
	defer ss.Close()
	customID, _, err := ss.Subscribe(channels.Filter{Channels: []string{channels.Custom}, Depth: channels.Unlimited}, nil)
	require.NoError(t, err)
	_, _, err = ss.Subscribe(channels.Filter{Channels: []string{channels.Lifecycle}, Depth: 0}, nil)
	require.NoError(t, err)
	require.Equal(t, 2, s.Subscriptions())
	require.True(t, ss.Unsubscribe(customID))
	require.False(t, ss.Unsubscribe(customID), "once")
	require.Equal(t, 1, s.Subscriptions())
	start(t, s, "t", "firehose", map[string]any{"count": float64(5), "size": float64(10)})
	got := collect(t, ss, rootEnded)
	for _, e := range got {
		require.Equal(t, channels.Lifecycle, e.Channel)
	}
}

func TestClosedSessionAcceptsNoSubscription(t *testing.T) {
	s := newServer(t, server.Config{})
	ss := s.NewSession("t")
	ss.Close()
	_, _, err := ss.Subscribe(channels.All, nil)
	require.ErrorIs(t, err, server.ErrClosed)
	require.Equal(t, 0, s.Subscriptions())
	_, e := typed(ss.Do(context.Background(), &protocol.ClientCommand{Value: &protocol.ClientCommandSubscriptionSubscribe{ID: 1}}))
	require.NotNil(t, e)
}

func TestSessionNotifyHooks(t *testing.T) {
	s := newServer(t, server.Config{})
	runDone(t, s, "t", "hi")
	ss := s.NewSession("t")
	defer ss.Close()
	var ready, replayed atomic.Int32
	ss.SetNotify(server.SessionNotify{Ready: func() { ready.Add(1) }, Subscribed: func(bool) { replayed.Add(1) }})
	require.Equal(t, int32(0), ready.Load(), "nothing waits yet")
	_, _, err := ss.Subscribe(channels.All, nil)
	require.NoError(t, err)
	require.Equal(t, int32(1), replayed.Load(), "a replay calls Subscribed, not Ready")
	require.Equal(t, int32(0), ready.Load())
	last := s.LastSeq("t")
	start(t, s, "t", "echo", userInput("again"))
	require.Eventually(t, func() bool {
		for {
			e, ok, _ := ss.TryNext()
			if !ok {
				return false
			}
			if rootEnded(e) && e.Seq > last {
				return true
			}
		}
	}, 10*time.Second, time.Millisecond)
	require.Greater(t, ready.Load(), int32(1), "live events call Ready")
}

// TestSessionNotifyRunEnded: with RunEnded set, a live event that ends a
// run calls it instead of Ready; the run's other events call Ready.
func TestSessionNotifyRunEnded(t *testing.T) {
	s := newServer(t, server.Config{})
	ss := s.NewSession("t")
	defer ss.Close()
	_, _, err := ss.Subscribe(channels.All, nil)
	require.NoError(t, err)
	var ready, ended atomic.Int32
	ss.SetNotify(server.SessionNotify{Ready: func() { ready.Add(1) }, RunEnded: func() { ended.Add(1) }})
	start(t, s, "t", "echo", userInput("hi"))
	var ends int32
	require.Eventually(t, func() bool {
		for {
			e, ok, _ := ss.TryNext()
			if !ok {
				return false
			}
			if rootEnded(e) {
				ends++
				return true
			}
		}
	}, 10*time.Second, time.Millisecond)
	require.Equal(t, int32(1), ends)
	// The session calls it once it has queued the event, which TryNext may
	// have read first.
	require.Eventually(t, func() bool { return ended.Load() == 1 }, 5*time.Second, time.Millisecond, "the run's end called RunEnded")
	require.Greater(t, ready.Load(), int32(0), "its other events called Ready")
}

// The protocol: "the first replayed values event is the current full
// state". A values subscription made mid-run, before anything set the
// state, gets an empty state as its baseline, then the run's values.
func TestValuesSubscribeBeforeAnyStateGetsAnEmptyBaseline(t *testing.T) {
	s := newServer(t, server.Config{})
	proceed := make(chan struct{})
	s.Register("slow", server.AssistantFunc(func(ctx context.Context, rc *server.RunContext) error {
		if err := rc.Custom("step", 1); err != nil {
			return err
		}
		select {
		case <-proceed:
		case <-ctx.Done():
			return ctx.Err()
		}
		return rc.Values(map[string]any{"answer": 42.0})
	}))
	w, _, err := s.Subscribe("t", channels.Filter{Channels: []string{channels.Custom}, Depth: channels.Unlimited}, nil)
	require.NoError(t, err)
	defer w.Close()
	start(t, s, "t", "slow", nil)
	collect(t, w, func(e *server.Event) bool { return e.Channel == channels.Custom })
	ss, _, err := s.Subscribe("t", channels.Filter{Channels: []string{channels.Values}, Depth: channels.Unlimited}, nil)
	require.NoError(t, err)
	defer ss.Close()
	first, ok, _ := ss.TryNext()
	require.True(t, ok, "the baseline is there at once")
	require.Equal(t, protocol.ServerEventValuesMethodValue, first.Method)
	require.Equal(t, uint64(0), first.Seq, "a snapshot, not an event of the stream")
	require.Equal(t, map[string]any{}, first.Payload.(*protocol.ServerEventValues).Params.Data)
	close(proceed)
	got := collect(t, ss, func(e *server.Event) bool { return e.Seq > 0 })
	require.Equal(t, map[string]any{"answer": 42.0}, got[len(got)-1].Payload.(*protocol.ServerEventValues).Params.Data)
	// A later subscriber's baseline is the state that run set.
	late, _, err := s.Subscribe("t", channels.Filter{Channels: []string{channels.Values}, Depth: channels.Unlimited}, server.SeqCursor(0))
	require.NoError(t, err)
	defer late.Close()
	snap, _, _ := late.TryNext()
	require.Equal(t, map[string]any{"answer": 42.0}, snap.Payload.(*protocol.ServerEventValues).Params.Data)
}

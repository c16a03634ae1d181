package server_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/internal/testkit/servetest"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/stretchr/testify/require"
)

func TestThreadIDsAreChecked(t *testing.T) {
	s := newServer(t, server.Config{})
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"t1", true},
		{"3f2b8c1e-9d4a-4c5e-8f1a-2b3c4d5e6f70", true}, // what the SDK makes
		{"user:42.session_7-a", true},
		{strings.Repeat("a", server.MaxThreadIDLength), true},
		{strings.Repeat("a", server.MaxThreadIDLength+1), false},
		{"", false},
		{"a/b", false},
		{"a b", false},
		{"é", false},
		{"a\x00", false},
	} {
		err := server.ValidThreadID(tc.id)
		require.Equal(t, tc.ok, err == nil, "%q: %v", tc.id, err)
		_, e := tryDo(s, tc.id, &protocol.ClientCommandRunStart{Params: protocol.RunStartParams{AssistantID: "echo", Input: userInput("x")}})
		if tc.ok {
			require.Nil(t, e, "%q", tc.id)
		} else {
			require.Equal(t, protocol.ErrorCodeInvalidArgument, e.Code, "%q", tc.id)
			require.Contains(t, e.Message, "bad thread id")
			_, _, err := s.Subscribe(tc.id, channels.All, nil)
			require.ErrorIs(t, err, server.ErrThreadID)
		}
	}
	require.Equal(t, uint64(6*2), s.Metrics().Refused[server.LimitThreadID])
}

func TestMaxThreads(t *testing.T) {
	s := newServer(t, server.Config{MaxThreads: 3})
	for i := range 3 {
		ss, _, err := s.Subscribe(fmt.Sprint("t", i), channels.All, nil)
		require.NoError(t, err)
		defer ss.Close()
	}
	_, e := tryDo(s, "t3", &protocol.ClientCommandRunStart{Params: protocol.RunStartParams{AssistantID: "echo", Input: userInput("x")}})
	require.Equal(t, protocol.ErrorCodeResourceExhausted, e.Code)
	_, _, err := s.Subscribe("t4", channels.All, nil)
	require.ErrorIs(t, err, server.ErrTooManyThreads)
	ss := s.NewSession("t5")
	_, e = typed(ss.Do(context.Background(), &protocol.ClientCommand{Value: &protocol.ClientCommandSubscriptionSubscribe{ID: 1}}))
	require.Equal(t, protocol.ErrorCodeResourceExhausted, e.Code)
	require.Equal(t, uint64(3), s.Metrics().Refused[server.LimitThreads])
	// An existing thread is still served.
	start(t, s, "t0", "echo", userInput("still here"))
	require.Equal(t, 3, s.Threads())
}

func TestMaxQueuedRuns(t *testing.T) {
	s := newServer(t, server.Config{MaxQueuedRuns: 2})
	release := make(chan struct{})
	s.Register("block", server.AssistantFunc(func(ctx context.Context, rc *server.RunContext) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}))
	defer close(release)
	start(t, s, "t", "block", nil)
	enqueue := protocol.MultitaskStrategyEnqueue
	cmd := func() protocol.ClientCommandVariant {
		return &protocol.ClientCommandRunStart{Params: protocol.RunStartParams{AssistantID: "block", MultitaskStrategy: &enqueue}}
	}
	do(t, s, "t", cmd())
	do(t, s, "t", cmd())
	_, e := tryDo(s, "t", cmd())
	require.Equal(t, protocol.ErrorCodeResourceExhausted, e.Code)
	require.Contains(t, e.Message, "2 runs queued")
	require.Equal(t, uint64(1), s.Metrics().Refused[server.LimitQueuedRuns])
}

func TestMaxSessionSubscriptions(t *testing.T) {
	s := newServer(t, server.Config{MaxSessionSubscriptions: 3})
	ss := s.NewSession("t")
	defer ss.Close()
	var ids []string
	for range 3 {
		id, _, err := ss.Subscribe(channels.All, nil)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	_, _, err := ss.Subscribe(channels.All, nil)
	require.ErrorIs(t, err, server.ErrTooManySubscriptions)
	_, e := typed(ss.Do(context.Background(), &protocol.ClientCommand{Value: &protocol.ClientCommandSubscriptionSubscribe{ID: 1}}))
	require.Equal(t, protocol.ErrorCodeResourceExhausted, e.Code)
	require.True(t, ss.Unsubscribe(ids[0]))
	_, _, err = ss.Subscribe(channels.All, nil)
	require.NoError(t, err, "room again after an unsubscribe")
	require.Equal(t, uint64(2), s.Metrics().Refused[server.LimitSessionSubscriptions])
}

type picky struct{}

func (picky) Run(ctx context.Context, rc *server.RunContext) error { return nil }
func (picky) ValidateInput(input any, config map[string]any) error {
	if input != "ok" {
		return errors.New(`input must be "ok"`)
	}
	return nil
}

func TestInputValidatorRefusesBeforeTheRunStarts(t *testing.T) {
	s := newServer(t, server.Config{})
	s.Register("picky", picky{})
	_, e := tryDo(s, "t", &protocol.ClientCommandRunStart{Params: protocol.RunStartParams{AssistantID: "picky", Input: "no"}})
	require.Equal(t, protocol.ErrorCodeInvalidArgument, e.Code)
	require.Equal(t, `params.input: input must be "ok"`, e.Message)
	require.Equal(t, uint64(0), s.LastSeq("t"), "no run started: nothing published")
	do(t, s, "t", &protocol.ClientCommandRunStart{Params: protocol.RunStartParams{AssistantID: "picky", Input: "ok"}})
	require.Equal(t, uint64(1), s.Metrics().Refused[server.LimitAssistantInput])
}

func TestIdleThreadsAreForgottenAfterTheirTTL(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	s := newServer(t, server.Config{Now: clock, IdleRelease: time.Minute, ThreadTTL: time.Hour})
	w, _, _ := s.Subscribe("t", channels.Filter{Channels: []string{channels.Lifecycle}, Depth: 0}, nil)
	start(t, s, "t", "echo", userInput("remember me"))
	collect(t, w, rootEnded)
	// A session that has no subscription left keeps no thread alive.
	ss := s.NewSession("t")
	id, _, err := ss.Subscribe(channels.All, nil)
	require.NoError(t, err)
	require.True(t, ss.Unsubscribe(id))
	w.Close()
	advance(30 * time.Minute)
	servetest.Sweep(s)
	require.Equal(t, 1, s.Threads(), "idle, but not for an hour")
	_, ok, _ := s.State(context.Background(), "t")
	require.True(t, ok)
	advance(31 * time.Minute)
	servetest.Sweep(s)
	require.Equal(t, 0, s.Threads())
	_, ok, _ = s.State(context.Background(), "t")
	require.False(t, ok, "its state is gone too")
	// The session subscribes again: it gets the thread that replaces the
	// forgotten one, and its events.
	_, _, err = ss.Subscribe(channels.Filter{Channels: []string{channels.Lifecycle}, Depth: 0}, nil)
	require.NoError(t, err)
	start(t, s, "t", "echo", userInput("new life"))
	got := collect(t, ss, rootEnded)
	require.Equal(t, uint64(1), seqs(got)[0], "a new stream")
	ss.Close()
}

func TestCheckpointsPerThreadAreCapped(t *testing.T) {
	s := newServer(t, server.Config{MaxCheckpoints: 3})
	w, _, _ := s.Subscribe("t", channels.Filter{Channels: []string{channels.Lifecycle}, Depth: 0}, nil)
	defer w.Close()
	for i := range 5 {
		start(t, s, "t", "echo", userInput(fmt.Sprint("run ", i)))
		collect(t, w, rootEnded)
	}
	resp := do(t, s, "t", &protocol.ClientCommandStateListCheckpoints{})
	require.Len(t, resp.Result.(protocol.ListCheckpointsResult).Checkpoints, 3)
}

// TestBufferTotalBudget: past --buffer-total-bytes the least recently
// active thread's buffer goes, and a subscriber resuming on it is told.
func TestBufferTotalBudget(t *testing.T) {
	s := newServer(t, server.Config{BufferTotalBytes: 30 * (server.EventOverhead + 300)})
	for _, th := range []string{"a", "b"} {
		w, _, _ := s.Subscribe(th, channels.Filter{Channels: []string{channels.Lifecycle}, Depth: 0}, nil)
		start(t, s, th, "firehose", map[string]any{"count": float64(20)})
		collect(t, w, rootEnded)
		w.Close()
	}
	m := s.Metrics()
	require.Positive(t, m.BufferTrimmed, "a's buffer went")
	require.LessOrEqual(t, m.BufferUsed, int64(30*(server.EventOverhead+300)))
	require.Zero(t, server.BufferedEvents(s, "a"))
	sub, _, err := s.Subscribe("a", channels.Filter{Channels: []string{channels.Custom}, Depth: channels.Unlimited}, server.SeqCursor(5))
	require.NoError(t, err)
	defer sub.Close()
	e, ok, _ := sub.TryNext()
	require.True(t, ok)
	require.Equal(t, protocol.ServerEventEventsMissedMethodValue, e.Method, "the cursor's events are gone, and the subscriber is told")
}

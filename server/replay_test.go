package server_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/stretchr/testify/require"
)

// publishTicks publishes n custom events (payloads from..) to thread, in
// batches of ten.
func publishTicks(t *testing.T, s *server.Server, thread string, from, n int) {
	t.Helper()
	name := "tick"
	for i := 0; i < n; i += 10 {
		b := server.ProducerBatch{}
		for j := i; j < min(n, i+10); j++ {
			b.Events = append(b.Events, protocol.ProducerEvent{Event: &protocol.ServerEventCustom{Params: protocol.EventCustomParams{
				Namespace: protocol.Namespace{}, Data: protocol.CustomData{Name: &name, Payload: from + j}}}})
		}
		_, err := s.Publish(context.Background(), thread, b)
		require.NoError(t, err)
	}
}

// TestALongReplayIsPacedByItsReader: a history many times a session's
// queue, read from the start by a reader that takes its time, while
// events keep coming: every event once, in order, the live ones after the
// history with no gap, and the session never cut off; the queue never
// holds more than its bound.
func TestALongReplayIsPacedByItsReader(t *testing.T) {
	s := newServer(t, server.Config{QueueBytes: 4000})
	publishTicks(t, s, "t", 0, 2000)
	ss, _, err := s.Subscribe("t", channels.Filter{Channels: []string{"custom"}, Depth: channels.Unlimited}, nil)
	require.NoError(t, err)
	defer ss.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // live events while the reader is behind
		defer wg.Done()
		for i := 0; i < 50; i++ {
			publishTicks(t, s, "t", 2000+10*i, 10)
			time.Sleep(time.Millisecond)
		}
	}()
	for next := uint64(1); next <= 2500; next++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		e, err := ss.Next(ctx)
		cancel()
		require.NoError(t, err, "after %d", next-1)
		require.Equal(t, next, e.Seq)
		if next%100 == 0 {
			time.Sleep(time.Millisecond) // a reader slower than the publisher
		}
	}
	wg.Wait()
	require.False(t, ss.Done(), "never cut off")
	require.Zero(t, s.Metrics().SlowConsumers)
	require.Greater(t, s.Metrics().ReplayRefills, uint64(10))
	// Caught up: live events come as they are published.
	publishTicks(t, s, "t", 2500, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, err := ss.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(2501), e.Seq)
}

// TestAReplayBehindATrimmedBufferIsToldWhatItMissed: the buffer lets go
// of events while a reader is still replaying an older part of it: the
// reader gets an events.missed notice for them, then the rest, in order.
func TestAReplayBehindATrimmedBufferIsToldWhatItMissed(t *testing.T) {
	s := newServer(t, server.Config{QueueBytes: 4000, BufferEvents: 300})
	publishTicks(t, s, "t", 0, 300)
	ss, _, err := s.Subscribe("t", channels.Filter{Channels: []string{"custom"}, Depth: channels.Unlimited}, nil)
	require.NoError(t, err)
	defer ss.Close()
	next := func() *server.Event {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e, err := ss.Next(ctx)
		require.NoError(t, err)
		return e
	}
	e := next()
	require.Equal(t, uint64(1), e.Seq)
	publishTicks(t, s, "t", 300, 600) // the buffer now holds 601..900
	var got []uint64
	var missed *protocol.EventsMissedData
	for len(got) == 0 || got[len(got)-1] < 900 {
		e := next()
		if e.Method == protocol.ServerEventEventsMissedMethodValue {
			d := e.Payload.(*protocol.ServerEventEventsMissed).Params.Data
			missed = &d
			continue
		}
		got = append(got, e.Seq)
	}
	require.NotNil(t, missed, "the reader is told")
	first := missed.FirstAvailableSeq
	require.Equal(t, first-1-missed.Since, missed.Missed)
	for i, seq := range got {
		if seq >= first {
			require.Equal(t, got[i:], seqRange(seq, 900), "from the first available on, all of them")
			require.Equal(t, seqRange(2, got[i-1]), got[:i], "before the gap, in order")
			require.Equal(t, got[i-1], missed.Since)
			break
		}
	}
}

func seqRange(from, to uint64) []uint64 {
	var out []uint64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

package server_test

import (
	"context"
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
	require.NoError(t, tryPublishTicks(s, thread, from, n))
}

func tryPublishTicks(s *server.Server, thread string, from, n int) error {
	name := "tick"
	for i := 0; i < n; i += 10 {
		b := server.ProducerBatch{}
		for j := i; j < min(n, i+10); j++ {
			b.Events = append(b.Events, protocol.ProducerEvent{Event: &protocol.ServerEventCustom{Params: protocol.EventCustomParams{
				Namespace: protocol.Namespace{}, Data: protocol.CustomData{Name: &name, Payload: from + j}}}})
		}
		if _, err := s.Publish(context.Background(), thread, b); err != nil {
			return err
		}
	}
	return nil
}

// TestALongReplayIsPacedByItsReader: a history many times a session's
// queue, read from the start by a reader that takes its time, while
// events keep coming (a burst as it subscribes, then a trickle): every
// event once, in order, the live ones after the history with no gap, and
// the session never cut off.
func TestALongReplayIsPacedByItsReader(t *testing.T) {
	s := newServer(t, server.Config{QueueBytes: 16 << 10})
	publishTicks(t, s, "t", 0, 5000)
	ss, _, err := s.Subscribe("t", channels.Filter{Channels: []string{"custom"}, Depth: channels.Unlimited}, nil)
	require.NoError(t, err)
	defer ss.Close()
	publishTicks(t, s, "t", 5000, 500) // while the reader is behind: read from the log
	published := make(chan error, 1)
	go func() { // and while it reads
		for i := 0; i < 100; i++ {
			if err := tryPublishTicks(s, "t", 5500+i, 1); err != nil {
				published <- err
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
		published <- nil
	}()
	for next := uint64(1); next <= 5600; next++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		e, err := ss.Next(ctx)
		cancel()
		require.NoError(t, err, "after %d", next-1)
		require.Equal(t, next, e.Seq)
		if next%500 == 0 {
			time.Sleep(time.Millisecond) // a reader slower than the publisher
		}
	}
	require.NoError(t, <-published)
	require.False(t, ss.Done(), "never cut off")
	require.Zero(t, s.Metrics().SlowConsumers)
	require.Greater(t, s.Metrics().ReplayRefills, uint64(10))
	// Caught up: live events come as they are published.
	publishTicks(t, s, "t", 5600, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, err := ss.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(5601), e.Seq)
}

// TestAReplayBehindATrimmedBufferIsToldWhatItMissed: the buffer lets go
// of events while a reader is still replaying an older part of it: the
// reader gets an events.missed notice for each stretch it lost, naming it
// exactly, and every event after it, in order.
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
	prev, notices := uint64(1), 0
	for prev < 900 {
		e := next()
		if e.Method == protocol.ServerEventEventsMissedMethodValue {
			d := e.Payload.(*protocol.ServerEventEventsMissed).Params.Data
			require.Equal(t, prev, d.Since, "a notice names the last event read")
			require.Equal(t, d.FirstAvailableSeq-1-d.Since, d.Missed)
			prev = d.FirstAvailableSeq - 1
			notices++
			continue
		}
		require.Equal(t, prev+1, e.Seq, "in order, and a gap only after its notice")
		prev = e.Seq
	}
	require.Positive(t, notices, "the reader is told")
	require.False(t, ss.Done())
}

package server_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/server"
	"github.com/stretchr/testify/require"
)

// TestQueueTotalCutsTheSlowestFirst: readers that never read fill the
// server's total queue bound; past it the one holding the most is cut
// (its queue dropped), and readers that keep up are never cut.
func TestQueueTotalCutsTheSlowestFirst(t *testing.T) {
	const total = 40_000
	s := newServer(t, server.Config{QueueBytes: 1 << 20, QueueTotalBytes: total})
	custom := channels.Filter{Channels: []string{"custom", "lifecycle"}, Depth: channels.Unlimited}
	var slow []*server.Session
	for range 3 {
		ss, _, err := s.Subscribe("t", custom, nil)
		require.NoError(t, err)
		defer ss.Close()
		slow = append(slow, ss)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	fastErr := make([]error, 3)
	for i := range 3 {
		fast, _, err := s.Subscribe("t", custom, nil)
		require.NoError(t, err)
		defer fast.Close()
		wg.Go(func() {
			for {
				e, err := fast.Next(ctx)
				if err != nil {
					fastErr[i] = err
					return
				}
				if rootEnded(e) {
					return
				}
			}
		})
	}
	start(t, s, "t", "firehose", map[string]any{"count": float64(400), "size": float64(200), "rate": float64(1000)})
	wg.Wait()
	for i, err := range fastErr {
		require.NoError(t, err, "fast reader %d was cut", i)
	}
	require.LessOrEqual(t, server.QueuedBytes(s), int64(total), "the total stays within its bound")
	cut := 0
	for _, ss := range slow {
		require.Eventually(t, ss.Done, 5*time.Second, 10*time.Millisecond)
		_, ok, err := ss.TryNext()
		var sce *server.SlowConsumerError
		if !ok && errors.As(err, &sce) {
			require.Equal(t, total, sce.QueueSize)
			require.Equal(t, uint64(0), sce.LastSeq, "it read nothing: it resumes from the start")
			cut++
		}
	}
	require.Equal(t, 3, cut, "all three never-reading sessions were cut: 400 events of 200 bytes do not fit 40 KB")
	require.Equal(t, uint64(3), s.Metrics().Refused[server.LimitQueueTotal])
	for _, ss := range slow {
		ss.Close()
	}
	require.Equal(t, int64(0), server.QueuedBytes(s), "nothing is counted for ended sessions")
}

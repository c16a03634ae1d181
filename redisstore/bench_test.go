package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/internal/testkit/redistest"
	"github.com/agentstream/agentstream/redisstore"
	"github.com/stretchr/testify/require"
)

// BenchmarkCatchUp: a node catching up on 1,000 followed threads, as it
// does after subscribing to them again (a reconnect) or in its sweep of
// quiet remote runs, each thread's stream holding a few events the node
// already has. "one by one" reads each head in a round trip of its own,
// "at once" all of them in one pipelined round trip (server.HeadsReader).
//
//	go test ./redisstore -run '^$' -bench CatchUp
func BenchmarkCatchUp(b *testing.B) {
	rs := redistest.Start(b)
	e := open(b, rs.URL())
	writer := startNode(b, e, redisstore.LogOptions{})
	follower := startNode(b, e, redisstore.LogOptions{})
	threads := make([]string, 1000)
	for i := range threads {
		threads[i] = fmt.Sprintf("t%d", i)
		sub, _, err := follower.srv.Subscribe(threads[i], channels.All, nil)
		require.NoError(b, err)
		b.Cleanup(sub.Close)
		runToEnd(b, writer.srv, threads[i], "firehose", map[string]any{"count": 1.0})
	}
	require.Eventually(b, func() bool { return writer.log.Stats().Pending == 0 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(b, follower.host.CatchUp(threads...)) // the follower has them all now

	b.Run("one by one", func(b *testing.B) {
		for b.Loop() {
			for _, th := range threads {
				require.NoError(b, follower.host.CatchUp(th))
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*len(threads)), "µs/thread")
	})
	b.Run("at once", func(b *testing.B) {
		for b.Loop() {
			require.NoError(b, follower.host.CatchUp(threads...))
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*len(threads)), "µs/thread")
	})
}

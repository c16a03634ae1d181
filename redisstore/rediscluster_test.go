package redisstore_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentstream/agentstream/internal/redistest"
	"github.com/agentstream/agentstream/redisstore"
	"github.com/stretchr/testify/require"
)

// The Redis engine on a Redis Cluster (3 masters, started by the test):
// the process tests of one Redis, run against the cluster.

func TestThreeNodesOnACluster(t *testing.T) {
	rc := redistest.StartCluster(t, 3, 0)
	threeNodes(t, rc.URL())
}

// TestThreadsOnEveryShard: runs on node A of threads whose keys fall on
// every master reach their clients on node B, each event once, in order:
// B subscribes on each master to the channels of the threads it holds
// there.
func TestThreadsOnEveryShard(t *testing.T) {
	rc := redistest.StartCluster(t, 3, 0)
	a, b := startClusterNode(t, rc.URL()), startClusterNode(t, rc.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const threads = 12
	shards := map[string]bool{}
	for i := range threads {
		shards[masterOf(t, rc, fmt.Sprintf("agentstream:{t%d}:live", i))] = true
	}
	require.Len(t, shards, 3, "the threads' keys fall on every master")

	var wg sync.WaitGroup
	got := make([][]sseEvent, threads)
	for i := range threads {
		r := openSSE(t, ctx, b.ts.URL, fmt.Sprintf("t%d", i), "")
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = sseRead(t, r, func(sseEvent) bool { return false })
		}()
	}
	time.Sleep(300 * time.Millisecond) // subscriptions take effect asynchronously
	for i := range threads {
		r, err := http.Post(fmt.Sprintf("%s/threads/t%d/commands", a.ts.URL, i), "application/json",
			strings.NewReader(`{"id": 1, "method": "run.start", "params": {"assistant_id": "firehose", "input": {"count": 100, "rate": 1000}}}`))
		require.NoError(t, err)
		r.Body.Close()
		require.Equal(t, 200, r.StatusCode)
	}
	wg.Wait()
	for i := range threads {
		inOrderOnce(t, got[i])
		require.Equal(t, uint64(1), got[i][0].seq, "thread t%d", i)
		require.GreaterOrEqual(t, got[i][len(got[i])-1].seq, uint64(102), "thread t%d: 100 custom events and the lifecycle around them", i)
	}
}

// masterOf is the address of the master that holds key's slot: the one
// that answers a GET of it rather than redirect it (MOVED).
func masterOf(t *testing.T, rc *redistest.Cluster, key string) string {
	t.Helper()
	for _, s := range rc.Masters() {
		if _, err := rawRedisLine(s.Addr, "GET", key); err == nil {
			return s.Addr
		} else if !strings.Contains(err.Error(), "MOVED") {
			require.NoError(t, err)
		}
	}
	t.Fatalf("no master serves %s", key)
	return ""
}

// TestSlotsAsRedisComputesThem: the engine's slot of a key is the one
// Redis Cluster computes (CLUSTER KEYSLOT), hash tags included.
func TestSlotsAsRedisComputesThem(t *testing.T) {
	rc := redistest.StartCluster(t, 3, 0)
	for _, key := range []string{"agentstream:{t1}:live", "agentstream:{thread-42}:events", "{}", "a{}b", "plain", "x{y}z{w}", "{assistant:echo}:workers", "ünïcode:{ü}"} {
		want, err := rawRedisLine(rc.Nodes[0].Addr, "CLUSTER", "KEYSLOT", key)
		require.NoError(t, err)
		require.Equal(t, strings.TrimPrefix(want, ":"), fmt.Sprint(redisstore.SlotOf(key)), key)
	}
}

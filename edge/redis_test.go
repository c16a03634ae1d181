package edge_test

import (
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/edge"
	"github.com/agentstream/agentstream/internal/testkit/lgtest"
	"github.com/agentstream/agentstream/internal/testkit/redistest"
	"github.com/agentstream/agentstream/redisstore"
	"github.com/agentstream/agentstream/server"
	"github.com/stretchr/testify/require"
)

// TestEdgeNodesShareOneUpstreamStream: two edge nodes on one Redis, in
// front of one LangGraph server, with subscribers of one thread on both
// and the run started through the second: the cluster holds one upstream
// stream of the thread, not one per node, and both nodes' subscribers
// get the whole run.
func TestEdgeNodesShareOneUpstreamStream(t *testing.T) {
	rs := redistest.Start(t)
	up := lgtest.Start(t)
	defer up.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	node := func(name string) (*httptest.Server, *edge.Edge) {
		eng, err := redisstore.New(ctx, redisstore.Options{URL: rs.URL(), TTL: time.Hour, Cluster: redisstore.ClusterOptions{Node: name, LeaseTTL: 2 * time.Second}})
		require.NoError(t, err)
		return startEdgeWith(t, server.Config{Engine: eng}, up.URL, edge.Options{ClaimEvery: 100 * time.Millisecond})
	}
	a, ea := node("a")
	b, eb := node("b")
	thread := "cluster-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	const filter = `{"channels": ["messages", "lifecycle"]}`
	onA := stream(t, a.URL, thread, filter, nil)
	onB := stream(t, b.URL, thread, filter, nil)
	words := make([]string, 80)
	for i := range words {
		words[i] = "w" + strconv.Itoa(i)
	}
	text := strings.Join(words, " ")
	r := command(t, b.URL, thread, `{"id": 1, "method": "run.start", "params": {"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "`+text+`"}]}}}`)
	require.Equal(t, "success", r["type"], "%v", r)

	// While the run streams (about 1.2 s), the cluster holds one stream.
	require.Eventually(t, func() bool { return ea.OpenStreams()+eb.OpenStreams() == 1 }, 10*time.Second, 10*time.Millisecond)
	for range 20 {
		require.LessOrEqual(t, ea.OpenStreams()+eb.OpenStreams(), 1, "one upstream stream for the cluster")
		time.Sleep(20 * time.Millisecond)
	}
	done := func(ev sseEvent) bool { return rootEnd(ev) && strings.Contains(ev.raw, `"completed"`) }
	require.Equal(t, text, strings.TrimSpace(textOf(t, until(t, onA, done))))
	require.Equal(t, text, strings.TrimSpace(textOf(t, until(t, onB, done))))
}

// textOf is the events' text, each event seen once.
func textOf(t *testing.T, evs []sseEvent) string {
	t.Helper()
	seen := map[string]bool{}
	for _, ev := range evs {
		if ev.id != "" {
			require.False(t, seen[ev.id], "event %s twice", ev.id)
			seen[ev.id] = true
		}
	}
	return text(evs)
}

package diskstore_test

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/agentstream/agentstream/client"
	"github.com/agentstream/agentstream/diskstore"
	"github.com/agentstream/agentstream/internal/testkit/sdktest"
	"github.com/agentstream/agentstream/internal/testkit/servetest"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/stretchr/testify/require"
)

// onDisk starts a server keeping its threads under dir, a new engine on
// the same store at each (re)start.
func onDisk(t *testing.T, dir string) *servetest.Server {
	t.Helper()
	return servetest.StartEach(t, func() server.Config {
		eng, err := diskstore.Open(diskstore.Options{Dir: dir})
		require.NoError(t, err)
		return server.Config{Engine: eng}
	}, transport.Options{})
}

// TestClientsOutliveARestart: WebSocket and SSE clients (the Go client,
// which reconnects with its cursor) stay subscribed while the server
// restarts on its store; they get both runs' events, each once, in
// order, the second run's continuing the first's sequence.
func TestClientsOutliveARestart(t *testing.T) {
	s := onDisk(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	input := func(text string) map[string]any {
		return map[string]any{"messages": []any{map[string]any{"role": "user", "content": text}}}
	}
	var subs []*client.Subscription
	for _, tr := range []client.Transport{client.WebSocket, client.SSE} {
		c, err := client.Dial(ctx, s.URL(), client.Options{Transport: tr})
		require.NoError(t, err)
		defer c.Close()
		sub, err := c.Thread("r1").Subscribe(ctx, client.Filter{Channels: []string{"messages", "lifecycle"}})
		require.NoError(t, err)
		subs = append(subs, sub)
	}
	starter, err := client.Dial(ctx, s.URL(), client.Options{})
	require.NoError(t, err)
	defer starter.Close()
	_, err = starter.Thread("r1").Run.Start(ctx, protocol.RunStartParams{AssistantID: "echo", Input: input("before the restart")})
	require.NoError(t, err)
	ends := func(sub *client.Subscription, n int) []*client.Event {
		var out []*client.Event
		for runs := 0; runs < n; {
			e, err := sub.Next(ctx)
			require.NoError(t, err)
			out = append(out, e)
			if e.RunEndAfter(0) != "" {
				runs++
			}
		}
		return out
	}
	first := make([][]*client.Event, len(subs))
	for i, sub := range subs {
		first[i] = ends(sub, 1)
	}
	s.Stop()
	s.Start()
	_, err = starter.Thread("r1").Run.Start(ctx, protocol.RunStartParams{AssistantID: "echo", Input: input("after the restart")})
	require.NoError(t, err)
	for i, sub := range subs {
		all := append(first[i], ends(sub, 1)...)
		seen := map[string]bool{}
		var last uint64
		text := ""
		for _, e := range all {
			if e.Seq == 0 {
				continue
			}
			require.False(t, seen[e.ID], "event %s twice", e.ID)
			seen[e.ID] = true
			require.Greater(t, e.Seq, last, "in order")
			last = e.Seq
			text += e.TextDelta()
		}
		require.Equal(t, "before the restartafter the restart", text, "every word of both runs, each once")
	}
}

// TestConformanceOnDisk: the official SDK's conformance suite passes
// against a server keeping its threads on disk.
func TestConformanceOnDisk(t *testing.T) {
	node, script := sdktest.Conformance(t)
	s := onDisk(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, node, script, s.URL()).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "14 passed, 0 failed", "%s", out)
}

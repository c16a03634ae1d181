package diskstore_test

import (
	"context"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentstream/agentstream/client"
	"github.com/agentstream/agentstream/diskstore"
	"github.com/agentstream/agentstream/internal/testkit/sdktest"
	"github.com/agentstream/agentstream/internal/testkit/servetest"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/stretchr/testify/assert"
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

// TestALongHistoryReadsWholeOverEitherTransport: a thread of 100,000
// events, read from its start by a WebSocket and an SSE client at once
// as fast as they can: each gets every event once, in order, with no
// slow-consumer cut, and the live heap grows by less than the
// history (each reader's replay is read from the store a queue at a
// time as it makes room).
func TestALongHistoryReadsWholeOverEitherTransport(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 events")
	}
	const n, queue = 100_000, 1 << 20
	dir := t.TempDir()
	s := servetest.StartEach(t, func() server.Config {
		eng, err := diskstore.Open(diskstore.Options{Dir: dir})
		require.NoError(t, err)
		return server.Config{Engine: eng, QueueBytes: queue}
	}, transport.Options{})
	name := "tick"
	pad := strings.Repeat("x", 150)
	for b := 0; b < n/1000; b++ {
		batch := server.ProducerBatch{}
		for i := 0; i < 1000; i++ {
			batch.Events = append(batch.Events, protocol.ProducerEvent{Event: &protocol.ServerEventCustom{Params: protocol.EventCustomParams{
				Namespace: protocol.Namespace{}, Data: protocol.CustomData{Name: &name, Payload: map[string]any{"n": b*1000 + i, "pad": pad}}}}})
		}
		_, err := s.Core().Publish(context.Background(), "long", batch)
		require.NoError(t, err)
	}
	s.Stop() // the history on disk, nothing of it in memory
	s.Start()

	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				runtime.GC() // what is live, not what the collector has yet to free
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				if m.HeapAlloc > peak.Load() {
					peak.Store(m.HeapAlloc)
				}
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for _, tr := range []client.Transport{client.WebSocket, client.SSE} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := client.Dial(ctx, s.URL(), client.Options{Transport: tr})
			if !assert.NoError(t, err) {
				return
			}
			defer c.Close()
			sub, err := c.Thread("long").Subscribe(ctx, client.Filter{Channels: []string{"custom"}})
			if !assert.NoError(t, err) {
				return
			}
			for next := uint64(1); next <= n; next++ {
				e, err := sub.Next(ctx)
				if !assert.NoError(t, err, "%v: after %d events", tr, next-1) || !assert.Equal(t, next, e.Seq, "%v: in order, each once", tr) {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	require.Zero(t, s.Core().Metrics().SlowConsumers, "no reader was cut off")
	require.Positive(t, s.Core().Metrics().ReplayRefills)
	grew := int64(peak.Load()) - int64(base.HeapAlloc)
	t.Logf("live heap: %d MiB before, at most %+d MiB while two readers replayed a %d MiB history", base.HeapAlloc>>20, grew>>20, n*250>>20)
	// Two readers holding their replays whole would hold the history
	// twice (decoded, more); what grows here is their queues, the
	// clients' buffers and the store's block cache (bounded, shared).
	require.Less(t, grew, int64(n*250), "the live heap grew by less than the history")
}

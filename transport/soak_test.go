package transport_test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentstream/agentstream/assistants"
	"github.com/agentstream/agentstream/internal/testkit/servetest"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// The soak's size: the default suite runs the bounded version (2,000
// threads, a few seconds); the full one is `go test ./transport -run
// TestSoak -soak.threads 10000` (or 200000 for a long one).
var soakThreads = flag.Int("soak.threads", 2000, "threads TestSoak creates and finishes")

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestSoak is the abuse review's soak: threads created and finished in
// numbers, with SSE and WebSocket clients that come and go (some leave
// cleanly, some drop mid-stream), against a server whose idle threads are
// forgotten quickly. Once everything is idle, the live heap is back within
// 10% of where it started and the goroutines are back to their baseline.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("the soak is not short")
	}
	// The server's clock runs with the real one until the test moves it
	// past every idle limit at once: all the soak's threads are alive
	// together, then all forgotten together.
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	srv := server.New(server.Config{Now: now, IdleRelease: 10 * time.Minute, ThreadTTL: time.Hour, ReconnectGrace: time.Minute})
	assistants.Register(srv)
	h := transport.New(srv, transport.Options{})
	ts := httptest.NewServer(h)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = h.Shutdown(ctx)
		ts.Close()
		require.NoError(t, srv.Close(ctx))
	}()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	wsURL := "ws" + strings.TrimPrefix(ts.URL, "http")
	var sseDone, wsDone, runs, dropped atomic.Int64

	// one creates thread i, runs firehose on it and, for some threads,
	// watches it with a client that leaves cleanly or drops mid-stream.
	one := func(round string, i int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		thread := fmt.Sprintf("soak-%s-%d", round, i)
		var watch func() error
		switch i % 10 {
		case 1, 2: // SSE, read to the end or dropped after a few frames
			req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/threads/"+thread+"/stream", strings.NewReader(`{"channels": ["custom", "lifecycle"]}`))
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			watch = func() error {
				defer resp.Body.Close()
				sc := bufio.NewScanner(resp.Body)
				lines := 0
				for sc.Scan() {
					lines++
					if i%10 == 2 && lines == 6 {
						dropped.Add(1)
						return nil
					}
					if strings.Contains(sc.Text(), `"event":"completed"`) {
						sseDone.Add(1)
						return nil
					}
				}
				return fmt.Errorf("SSE %s ended early: %v", thread, sc.Err())
			}
		case 3, 4: // WebSocket, closed cleanly or dropped
			c, _, err := websocket.Dial(ctx, wsURL+"/threads/"+thread+"/stream", nil)
			if err != nil {
				return err
			}
			if err := c.Write(ctx, websocket.MessageText, []byte(`{"id": 1, "method": "subscription.subscribe", "params": {"channels": ["custom", "lifecycle"]}}`)); err != nil {
				return err
			}
			if _, _, err := c.Read(ctx); err != nil { // the subscribe's answer
				return err
			}
			watch = func() error {
				for n := 0; ; n++ {
					_, b, err := c.Read(ctx)
					if err != nil {
						return fmt.Errorf("WebSocket %s: %w", thread, err)
					}
					if i%10 == 4 && n == 3 {
						dropped.Add(1)
						return c.CloseNow() // its subscription waits for a reconnect that never comes
					}
					if strings.Contains(string(b), `"event":"completed"`) {
						wsDone.Add(1)
						return c.Close(websocket.StatusNormalClosure, "")
					}
				}
			}
		}
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/threads/"+thread+"/commands",
			strings.NewReader(`{"id": 1, "method": "run.start", "params": {"assistant_id": "firehose", "input": {"count": 10, "size": 200}}}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("run.start on %s: %s", thread, resp.Status)
		}
		runs.Add(1)
		if watch != nil {
			return watch()
		}
		return nil
	}
	soak := func(round string, n int) {
		work := make(chan int)
		errs := make(chan error, 1)
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for i := range work {
					if err := one(round, i); err != nil {
						select {
						case errs <- err:
						default:
						}
					}
				}
			})
		}
		for i := range n {
			work <- i
		}
		close(work)
		wg.Wait()
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
	}
	// settle waits until every thread is forgotten and every connection
	// has gone.
	settle := func() {
		client.CloseIdleConnections()
		t.Logf("%d threads held", srv.Threads())
		deadline := time.Now().Add(30 * time.Second)
		for srv.Subscriptions() > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		require.Zero(t, srv.Subscriptions(), "every client has gone")
		// A run whose client did not watch it to the end (or dropped) may
		// still be publishing its last events: its thread is active again
		// at the moved clock. Move it past every idle limit until the
		// sweep finds every thread idle. (Sweeping once right after the
		// clients had gone was the soak's rare failure.)
		require.Eventually(t, func() bool {
			skew.Add(int64(2 * time.Hour))
			servetest.Sweep(srv)
			return srv.Threads() == 0
		}, 10*time.Second, 10*time.Millisecond, "every thread is forgotten")
	}

	// A first round loads what is loaded once (schemas, pools, the
	// metrics' label sets), so the baseline is the server at rest.
	soak("warm", 200)
	settle()
	baseGoroutines := runtime.NumGoroutine()
	baseHeap := liveHeap()

	start := time.Now()
	soak("soak", *soakThreads)
	t.Logf("%d threads in %v: %d runs, %d SSE and %d WebSocket clients to the end, %d dropped",
		*soakThreads, time.Since(start).Round(time.Millisecond), runs.Load(), sseDone.Load(), wsDone.Load(), dropped.Load())
	require.Equal(t, int64(*soakThreads+200), runs.Load())
	settle()

	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > baseGoroutines && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > baseGoroutines {
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines: %d, baseline %d:\n%s", n, baseGoroutines, buf[:runtime.Stack(buf, true)])
	}
	heap := liveHeap()
	t.Logf("live heap: %d KiB at rest before, %d KiB after (%+.1f%%)", baseHeap>>10, heap>>10, 100*(float64(heap)/float64(baseHeap)-1))
	require.LessOrEqual(t, heap, baseHeap+baseHeap/10, "the live heap returns to within 10 percent of its start")
}

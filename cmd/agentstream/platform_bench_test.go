package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkPlatformWrites: the Platform API's writes on a --data-dir
// server in this process, from 16 clients at once over loopback (updateState and runs.wait:
// each on a thread of its own): ns/op
// is the server's throughput (a write every ns/op), p50-ms and p99-ms
// the latency one client sees. Each write's 2xx waits for its sync.
//
//	go test -run '^$' -bench BenchmarkPlatformWrites -benchtime 3s ./cmd/agentstream/
func BenchmarkPlatformWrites(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, done := startServe(b, ctx, io.Discard, "--data-dir", b.TempDir(), "--profiles", "langgraph", "--log-level", "error",
		"--http-command-rate", "1000000", "--http-command-burst", "1000000")
	defer func() { cancel(); <-done }()
	base := "http://" + addr
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	call := func(method, path, body string) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			b.Fatalf("%s %s: %d", method, path, resp.StatusCode)
		}
	}
	const clients = 16
	stateThreads := make([]string, clients) // one per client: updateState on one thread is one at a time
	runThreads := make([]string, clients)   // the same for runs
	for i := range stateThreads {
		stateThreads[i], runThreads[i] = newUUID(), newUUID()
		call("POST", "/threads", `{"thread_id": "`+runThreads[i]+`"}`)
		call("POST", "/threads", `{"thread_id": "`+stateThreads[i]+`"}`)
		call("POST", "/threads/"+stateThreads[i]+"/runs/wait", `{"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "setup"}]}}`)
	}
	var n atomic.Int64
	writes := map[string]func(client int){
		"store-put": func(int) {
			call("PUT", "/store/items", fmt.Sprintf(`{"namespace": ["bench"], "key": "k%d", "value": {"n": 1}}`, n.Add(1)))
		},
		"thread-create": func(int) { call("POST", "/threads", `{}`) },
		"runs-wait": func(c int) {
			call("POST", "/threads/"+runThreads[c]+"/runs/wait", `{"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "hi"}]}}`)
		},
		"update-state": func(c int) {
			call("POST", "/threads/"+stateThreads[c]+"/state", fmt.Sprintf(`{"values": {"k": %d}}`, n.Add(1)))
		},
	}
	for _, name := range []string{"store-put", "thread-create", "update-state", "runs-wait"} {
		write := writes[name]
		b.Run(name, func(b *testing.B) {
			var mu sync.Mutex
			var lat []time.Duration
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var mine []time.Duration
					for next.Add(1) <= int64(b.N) {
						t0 := time.Now()
						write(c)
						mine = append(mine, time.Since(t0))
					}
					mu.Lock()
					lat = append(lat, mine...)
					mu.Unlock()
				}()
			}
			wg.Wait()
			b.StopTimer()
			slices.Sort(lat)
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			}
		})
	}
}

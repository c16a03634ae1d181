package loadtest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ManyConfig is the many-conversations workload: Threads threads, each
// watched by SubsPerThread subscribers and fed by one firehose run
// publishing Rate events a second for Duration.
type ManyConfig struct {
	URL           string
	Transport     string // sse or ws
	Threads       int
	SubsPerThread int
	Rate          float64 // events per second per thread
	Duration      time.Duration
	Size          int // payload bytes
	ServerPID     int // for CPU and memory figures (0: not measured)
	// Connect and Start bound the connections being opened and the
	// run.start requests in flight at once (defaults 64 and 32).
	Connect, Start int
	Timeout        time.Duration // the whole measurement (default Duration + 2 min)
	// IdleWait, when set, is how long to wait after the runs, connections
	// closed, before reading the server's RSS and live heap once more (run
	// the server with a shorter --idle-release to see buffers released).
	IdleWait time.Duration
	// SubscribeURLs and OtherPIDs: as Config's.
	SubscribeURLs []string
	OtherPIDs     []int
	// Centrifugo runs the workload against Centrifugo nodes instead
	// (centrifugo.go): URL is the node whose HTTP API publishes,
	// SubscribeURLs the nodes the subscribers connect to.
	Centrifugo bool
}

// ManyResult is what a many-conversations measurement found.
type ManyResult struct {
	Threads     int
	Subscribers int
	Offered     float64 // deliveries per second the runs offer together
	Expected    int64   // deliveries if nothing is lost
	Deliveries  int64
	Missing     int64   // Expected - Deliveries, when the runs have ended
	Seconds     float64 // from the first delivery to the last
	PerSecond   float64
	P50, P99    time.Duration
	// StartSeconds is how long the burst of run.start requests took, and
	// StartLatency the median of their round trips.
	StartSeconds float64
	StartLatency time.Duration
	// Server and client CPU (user+system) from the first run.start to the
	// last delivery, and the server's per delivery.
	ServerCPUSeconds, ClientCPUSeconds float64
	CPUPerDelivery                     time.Duration
	// RSS is the server's resident memory with the subscribers connected
	// before any run, and at the end of the runs; PerThread is their
	// difference over the threads (buffers and state, not connections).
	RSSConnected, RSSEnd int64
	PerThread            int64
	// RSSPeak is the most the server's RSS reached (VmHWM) by the end of
	// the runs; RSSIdle its RSS after IdleWait, the connections closed.
	RSSPeak, RSSIdle int64
	// Heap is the server's live heap (after a collection, read from its
	// /debug/pprof and /metrics; 0 when it does not serve --pprof) with the
	// subscribers connected, at the end of the runs and after IdleWait.
	HeapConnected, HeapEnd, HeapIdle int64
	HeapBase                         int64 // before connecting
	// Stages is the server's own breakdown of the delivery latency over
	// the runs (empty for a server without the histogram).
	Stages Stages
}

func (r ManyResult) String() string {
	heap := ""
	if r.RSSIdle > 0 {
		heap = fmt.Sprintf("; server RSS %d MB after --idle-wait", r.RSSIdle>>20)
	}
	if r.HeapConnected > 0 {
		heap += fmt.Sprintf("; server live heap %d MB connected, %.1f KB per thread after the runs", r.HeapConnected>>20, float64(r.HeapEnd-r.HeapConnected)/1024/float64(r.Threads))
		if r.HeapIdle > 0 {
			heap += fmt.Sprintf(", %.1f KB per thread idle (no connection; the baseline before connecting subtracted)", float64(r.HeapIdle-r.HeapBase)/1024/float64(r.Threads))
		}
	}
	if st := r.Stages.String(); st != "" {
		heap += "; " + st
	}
	return heap2(r, heap)
}

func heap2(r ManyResult, heap string) string {
	return fmt.Sprintf("offered %.0f/s to %d subscribers: delivered %d of %d (missing %d) in %.2fs: %.0f/s, latency p50 %v p99 %v; "+
		"runs started in %.2fs (median run.start %v); server CPU %.2fs (%v per delivery), client CPU %.2fs; "+
		"server RSS %d MB connected, %d MB after the runs (%.1f KB per thread; peak %d MB)",
		r.Offered, r.Subscribers, r.Deliveries, r.Expected, r.Missing, r.Seconds, r.PerSecond, r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond),
		r.StartSeconds, r.StartLatency.Round(time.Microsecond), r.ServerCPUSeconds, r.CPUPerDelivery, r.ClientCPUSeconds,
		r.RSSConnected>>20, r.RSSEnd>>20, float64(r.PerThread)/1024, r.RSSPeak>>20) + heap
}

// liveHeap reads a server's live heap: a collection through its profiler
// (/debug/pprof/heap?gc=1), then go_memstats_heap_alloc_bytes from
// /metrics. ok is false when the server does not serve its profiler.
func liveHeap(url string) (int64, bool) {
	resp, err := http.Get(url + "/debug/pprof/heap?gc=1")
	if err != nil {
		return 0, false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, false
	}
	resp, err = http.Get(url + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "go_memstats_heap_alloc_bytes "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(f), err == nil
		}
	}
	return 0, false
}

// RunMany measures the many-conversations workload: it connects every
// subscriber, starts every run in a burst, and counts what arrives until
// each subscriber has all its thread's events or the timeout passes.
func RunMany(ctx context.Context, cfg ManyConfig) (ManyResult, error) {
	if cfg.Connect <= 0 {
		cfg.Connect = 64
	}
	if cfg.Start <= 0 {
		cfg.Start = 32
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = cfg.Duration + 2*time.Minute
	}
	count := int(cfg.Rate * cfg.Duration.Seconds())
	if cfg.Threads <= 0 || cfg.SubsPerThread <= 0 || count <= 0 {
		return ManyResult{}, fmt.Errorf("need threads, subscribers per thread and rate × duration ≥ 1")
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	n := cfg.Threads * cfg.SubsPerThread
	res := ManyResult{Subscribers: n, Offered: cfg.Rate * float64(n), Expected: int64(n) * int64(count)}
	prefix := fmt.Sprintf("many-%d-", time.Now().UnixNano())
	res.Threads = cfg.Threads
	res.HeapBase, _ = liveHeap(cfg.URL)
	var st stats
	var wg sync.WaitGroup
	errs := make(chan error, n)
	var finished atomic.Int64
	allDone := make(chan struct{})
	sampleEvery := max(1, n*count/200000)
	sub := Config{URL: cfg.URL, Count: count, SubscribeURLs: cfg.SubscribeURLs}

	// Connect, at most cfg.Connect at a time.
	sem := make(chan struct{}, cfg.Connect)
	for i := range n {
		select {
		case sem <- struct{}{}:
		case err := <-errs:
			cancel()
			wg.Wait()
			return res, fmt.Errorf("connecting subscriber %d: %w", i, err)
		case <-ctx.Done():
			wg.Wait()
			return res, ctx.Err()
		}
		thread := prefix + fmt.Sprint(i%cfg.Threads)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var once sync.Once
			ready := func() { once.Do(func() { <-sem }) }
			done := func() {
				if finished.Add(1) == int64(n) {
					close(allDone)
				}
			}
			var err error
			if cfg.Centrifugo {
				err = centrifugoSubscriber(ctx, sub, thread, i, sampleEvery, &st, ready, done)
			} else if cfg.Transport == "ws" {
				err = wsSubscriber(ctx, sub, thread, i, sampleEvery, &st, ready, done)
			} else {
				err = sseSubscriber(ctx, sub, thread, i, sampleEvery, &st, ready, done)
			}
			ready()
			if err != nil && ctx.Err() == nil {
				errs <- err
			}
		}()
	}
	for range cfg.Connect { // the last connections are in
		sem <- struct{}{}
	}
	res.RSSConnected, _ = rssBytes(cfg.ServerPID)
	res.HeapConnected, _ = liveHeap(cfg.URL)

	// Start every run, cfg.Start requests at a time.
	var stages0 stageSnapshot
	haveStages := false
	if !cfg.Centrifugo {
		stages0, haveStages = readStages(cfg.URL)
	}
	cpu0, _ := Config{ServerPID: cfg.ServerPID, OtherPIDs: cfg.OtherPIDs}.serverCPU()
	self0 := SelfCPU()
	begin := time.Now()
	body := fmt.Sprintf(`{"id": 1, "method": "run.start", "params": {"assistant_id": "firehose", "input": {"count": %d, "rate": %g, "size": %d}}}`, count, cfg.Rate, cfg.Size)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Start}}
	defer client.CloseIdleConnections()
	threads := make(chan int)
	latencies := make([]time.Duration, cfg.Threads)
	var startErr atomic.Pointer[error]
	var starters sync.WaitGroup
	for range cfg.Start {
		starters.Go(func() {
			for t := range threads {
				t0 := time.Now()
				req, _ := http.NewRequestWithContext(ctx, "POST", cfg.URL+"/threads/"+prefix+fmt.Sprint(t)+"/commands", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("run.start: %s", resp.Status)
					}
				}
				if err != nil {
					startErr.CompareAndSwap(nil, &err)
				}
				latencies[t] = time.Since(t0)
			}
		})
	}
	published := make(chan error, 1)
	if cfg.Centrifugo {
		// Nothing to start: the events are published from here, while
		// the subscribers read.
		names := make([]string, cfg.Threads)
		for t := range names {
			names[t] = prefix + fmt.Sprint(t)
		}
		go func() { published <- centrifugoPublisher(ctx, cfg.URL, names, count, cfg.Rate, cfg.Size) }()
	} else {
		for t := range cfg.Threads {
			threads <- t
		}
	}
	close(threads)
	starters.Wait()
	res.StartSeconds = time.Since(begin).Seconds()
	slices.Sort(latencies)
	res.StartLatency = latencies[len(latencies)/2]
	if p := startErr.Load(); p != nil {
		cancel()
		wg.Wait()
		return res, *p
	}

	// Wait for every delivery, or the timeout.
	var waitErr error
	for waiting := true; waiting; {
		select {
		case <-allDone:
			waiting = false
		case err := <-errs:
			waitErr, waiting = err, false
		case err := <-published:
			if err != nil {
				waitErr, waiting = err, false
			}
		case <-ctx.Done():
			waiting = false
		}
	}
	cpu1, _ := Config{ServerPID: cfg.ServerPID, OtherPIDs: cfg.OtherPIDs}.serverCPU()
	self1 := SelfCPU()
	if haveStages {
		if stages1, ok := readStages(cfg.URL); ok {
			res.Stages = stages1.since(stages0)
		}
	}
	res.RSSEnd, _ = rssBytes(cfg.ServerPID)
	res.RSSPeak, _ = statusBytes(cfg.ServerPID, "VmHWM:")
	res.HeapEnd, _ = liveHeap(cfg.URL)
	cancel()
	wg.Wait()
	if cfg.IdleWait > 0 {
		time.Sleep(cfg.IdleWait)
		res.RSSIdle, _ = rssBytes(cfg.ServerPID)
		if res.HeapConnected > 0 {
			res.HeapIdle, _ = liveHeap(cfg.URL)
		}
	}

	res.Deliveries, res.Seconds, res.PerSecond, res.P50, res.P99 = st.summary()
	res.Missing = res.Expected - res.Deliveries
	res.ClientCPUSeconds = self1 - self0
	if cfg.ServerPID > 0 && res.Deliveries > 0 {
		res.ServerCPUSeconds = cpu1 - cpu0
		res.CPUPerDelivery = time.Duration(res.ServerCPUSeconds / float64(res.Deliveries) * 1e9)
		res.PerThread = (res.RSSEnd - res.RSSConnected) / int64(cfg.Threads)
	}
	return res, waitErr
}

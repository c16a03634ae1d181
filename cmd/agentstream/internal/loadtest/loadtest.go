// Package loadtest measures a running agentstream server from outside, over
// real loopback connections: deliveries per second to many subscribers of
// one thread, publish-to-receive latency, server CPU per delivery (read
// from /proc for the server's pid) and idle memory per connection.
//
// It drives the built-in firehose assistant, or publishes the same events
// itself as a remote worker or an HTTP producer; every event carries its
// publish time, so latency needs no clock but the machine's.
package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// Config is one measurement.
type Config struct {
	// acks records the HTTP producer's acknowledgements (Run sets it).
	acks *ackLog

	URL       string // the server's base URL, http://host:port
	Transport string // sse or ws; with Wire, sse or wire
	// Wire, when set, measures another wire the server serves (WireJobs,
	// WireInstanceAI) against the protocol's SSE on the same events: the
	// tool publishes them as that wire's producers do (Source must be
	// SourceHTTP), and Transport "wire" reads them through the wire's own
	// stream, "sse" through the protocol's.
	Wire        string
	Subscribers int
	Count       int     // events published
	Rate        float64 // events per second; 0: as fast as the server can
	Size        int     // payload size in bytes
	// Source publishes the events: SourceFirehose (the built-in, by
	// default), SourceWorker or SourceHTTP.
	Source    string
	ServerPID int // for CPU and memory figures (0: not measured)
	Timeout   time.Duration
	// SubscribeURLs, when set, spreads the subscribers over these nodes
	// (subscriber i on SubscribeURLs[i % len]); runs still start at URL.
	SubscribeURLs []string
	// OtherPIDs are more processes whose CPU counts as the server's (the
	// other nodes, redis-server).
	OtherPIDs []int
	// SourceAddrs, when set, are the local addresses subscribers connect
	// from (subscriber i from SourceAddrs[i % len]): loopback addresses
	// 127.0.0.2, 127.0.0.3, ... each give another range of ephemeral
	// ports, for more connections to one server than one address has.
	SourceAddrs []string
}

// clients are the HTTP clients of each source address (Config.client).
var clients sync.Map // string → *http.Client

// client is the HTTP client subscriber i connects with.
func (c Config) client(i int) *http.Client {
	if len(c.SourceAddrs) == 0 {
		return http.DefaultClient
	}
	src := c.SourceAddrs[i%len(c.SourceAddrs)]
	if hc, ok := clients.Load(src); ok {
		return hc.(*http.Client)
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 30 * time.Second}
	hc, _ := clients.LoadOrStore(src, &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 16}})
	return hc.(*http.Client)
}

// subURL is where subscriber i connects.
func (c Config) subURL(i int) string {
	if n := c.nodeOf(i); n >= 0 {
		return c.SubscribeURLs[n]
	}
	return c.URL
}

// nodeOf is the index in SubscribeURLs of subscriber i's node (-1: none).
func (c Config) nodeOf(i int) int {
	if len(c.SubscribeURLs) == 0 {
		return -1
	}
	return i % len(c.SubscribeURLs)
}

// serverCPU is the CPU seconds of the server's processes.
func (c Config) serverCPU() (float64, error) {
	total, err := cpuSeconds(c.ServerPID)
	for _, p := range c.OtherPIDs {
		s, e := cpuSeconds(p)
		total += s
		err = errors.Join(err, e)
	}
	return total, err
}

// Result is what a measurement found.
type Result struct {
	Deliveries       int64
	Seconds          float64 // from the first delivery to the last
	PerSecond        float64
	P50, P99         time.Duration
	CPUPerDelivery   time.Duration // server CPU (user+system) / deliveries; 0 if not measured
	ServerCPUSeconds float64
	// PerNode is the latency on each of several SubscribeURLs: how much the
	// hop from the node running the thread adds.
	PerNode []NodeLatency
	// Acks counts the HTTP producer's acknowledged batches (SourceHTTP),
	// AckP50 and AckP99 the time from sending a batch to its answer.
	Acks           int
	AckP50, AckP99 time.Duration
}

func (r Result) String() string {
	s := fmt.Sprintf("%d deliveries in %.2fs: %.0f/s, latency p50 %v p99 %v, server CPU %.2fs (%v per delivery)",
		r.Deliveries, r.Seconds, r.PerSecond, r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond), r.ServerCPUSeconds, r.CPUPerDelivery)
	for _, n := range r.PerNode {
		s += fmt.Sprintf("; subscribers of %s: p50 %v p99 %v", n.URL, n.P50.Round(time.Microsecond), n.P99.Round(time.Microsecond))
	}
	if r.Acks > 0 {
		s += fmt.Sprintf("; producer: %d batches acknowledged, p50 %v p99 %v", r.Acks, r.AckP50.Round(time.Microsecond), r.AckP99.Round(time.Microsecond))
	}
	return s
}

// stats gathers deliveries from every connection.
type stats struct {
	deliveries atomic.Int64
	first      atomic.Int64 // unix nanos of the first delivery
	last       atomic.Int64
	mu         sync.Mutex
	latencies  []time.Duration
	byNode     map[int][]time.Duration // with several SubscribeURLs: the samples of each
}

// recordAt records a delivery to a subscriber of node (an index into
// SubscribeURLs; -1: not counted per node).
func (s *stats) recordAt(node int, payload []byte, sample bool) {
	now := time.Now().UnixNano()
	s.deliveries.Add(1)
	s.first.CompareAndSwap(0, now)
	s.last.Store(now)
	if !sample {
		return
	}
	i, n := bytes.Index(payload, []byte(`"ts":`)), 5
	if i < 0 {
		i, n = bytes.Index(payload, []byte(`ts=`)), 3 // in an Instance AI status message
	}
	if i < 0 {
		return
	}
	j := i + n
	k := j
	for k < len(payload) && payload[k] >= '0' && payload[k] <= '9' {
		k++
	}
	ts, err := strconv.ParseInt(string(payload[j:k]), 10, 64)
	if err != nil {
		return
	}
	s.mu.Lock()
	s.latencies = append(s.latencies, time.Duration(now-ts))
	if node >= 0 {
		if s.byNode == nil {
			s.byNode = map[int][]time.Duration{}
		}
		s.byNode[node] = append(s.byNode[node], time.Duration(now-ts))
	}
	s.mu.Unlock()
}

// nodeLatencies is the p50 and p99 of each node's subscribers, in
// SubscribeURLs order (nil with fewer than two nodes).
func (s *stats) nodeLatencies(urls []string) []NodeLatency {
	if len(urls) < 2 {
		return nil
	}
	out := make([]NodeLatency, len(urls))
	for i, u := range urls {
		out[i].URL = u
		if l := s.byNode[i]; len(l) > 0 {
			slices.Sort(l)
			out[i].P50, out[i].P99 = l[len(l)/2], l[len(l)*99/100]
		}
	}
	return out
}

// NodeLatency is the latency seen by one node's subscribers.
type NodeLatency struct {
	URL      string
	P50, P99 time.Duration
}

// summary gives the deliveries, the seconds from the first to the last,
// their rate, and the latencies' median and 99th percentile.
func (s *stats) summary() (n int64, seconds, perSecond float64, p50, p99 time.Duration) {
	n = s.deliveries.Load()
	seconds = float64(s.last.Load()-s.first.Load()) / 1e9
	if seconds > 0 {
		perSecond = float64(n) / seconds
	}
	slices.Sort(s.latencies)
	if k := len(s.latencies); k > 0 {
		p50, p99 = s.latencies[k/2], s.latencies[k*99/100]
	}
	return
}

// Run measures deliveries of cfg.Count firehose events to cfg.Subscribers.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	thread := fmt.Sprintf("load-%d", time.Now().UnixNano())
	var st stats
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Subscribers+1) // one per connection, and the source's, at most
	ready := make(chan struct{}, cfg.Subscribers)
	done := make(chan struct{}, cfg.Subscribers)
	sampleEvery := max(1, cfg.Subscribers*cfg.Count/200000) // about 200k latency samples
	for i := 0; i < cfg.Subscribers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var err error
			switch {
			case cfg.Transport == "ws":
				err = wsSubscriber(ctx, cfg, thread, i, sampleEvery, &st, signal(ready), signal(done))
			case cfg.Transport == "wire":
				err = wireSubscriber(ctx, cfg, thread, i, sampleEvery, &st, signal(ready), signal(done))
			default:
				err = sseSubscriber(ctx, cfg, thread, i, sampleEvery, &st, signal(ready), signal(done))
			}
			if err != nil && ctx.Err() == nil {
				errs <- err
			}
		}(i)
	}
	// stop ends the connections and returns err.
	stop := func(err error) (Result, error) {
		cancel()
		wg.Wait()
		return Result{}, err
	}
	if err := waitN(ctx, ready, errs, cfg.Subscribers); err != nil {
		return stop(fmt.Errorf("connecting %d subscribers: %w", cfg.Subscribers, err))
	}
	cpu0, _ := cfg.serverCPU()
	cfg.acks = &ackLog{}
	if err := publish(ctx, cfg, thread, func(err error) {
		select {
		case errs <- err:
		default:
		}
	}); err != nil {
		return stop(err)
	}
	if err := waitN(ctx, done, errs, cfg.Subscribers); err != nil {
		return stop(fmt.Errorf("waiting for deliveries (%d so far): %w", st.deliveries.Load(), err))
	}
	cpu1, _ := cfg.serverCPU()
	cancel()
	wg.Wait()
	r := Result{}
	r.Deliveries, r.Seconds, r.PerSecond, r.P50, r.P99 = st.summary()
	r.PerNode = st.nodeLatencies(cfg.SubscribeURLs)
	r.Acks, r.AckP50, r.AckP99 = cfg.acks.summary()
	if cfg.ServerPID > 0 && r.Deliveries > 0 {
		r.ServerCPUSeconds = cpu1 - cpu0
		r.CPUPerDelivery = time.Duration(r.ServerCPUSeconds / float64(r.Deliveries) * 1e9)
	}
	return r, nil
}

// signal returns a function that sends on ch.
func signal(ch chan<- struct{}) func() { return func() { ch <- struct{}{} } }

// waitN waits for n signals on ch, the first error on errs, or ctx's end.
func waitN(ctx context.Context, ch <-chan struct{}, errs <-chan error, n int) error {
	for i := 0; i < n; i++ {
		select {
		case <-ch:
		case err := <-errs:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func sseSubscriber(ctx context.Context, cfg Config, thread string, i, sampleEvery int, st *stats, ready, done func()) error {
	name := "firehose"
	switch cfg.Wire {
	case WireJobs:
		thread, name = "job:"+thread, "node_stream_event"
	case WireInstanceAI:
		name = "status"
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", cfg.subURL(i)+"/threads/"+thread+"/stream/events", strings.NewReader(`{"channels": ["custom:`+name+`"]}`))
	req.Header.Set("Content-Type", "application/json")
	return readSSE(ctx, cfg, req, i, sampleEvery, st, ready, done)
}

// wireSubscriber reads the events through the wire's own stream
// (Config.Wire).
func wireSubscriber(ctx context.Context, cfg Config, thread string, i, sampleEvery int, st *stats, ready, done func()) error {
	path := "/instance-ai/events/" + thread
	if cfg.Wire == WireJobs {
		path = "/jobs/" + thread + "/stream"
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", cfg.subURL(i)+path, nil)
	return readSSE(ctx, cfg, req, i, sampleEvery, st, ready, done)
}

// readSSE counts the data lines of an event stream (a job stream's
// snapshot aside) until Count came, then stays connected until ctx ends.
func readSSE(ctx context.Context, cfg Config, req *http.Request, i, sampleEvery int, st *stats, ready, done func()) error {
	resp, err := cfg.client(i).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("stream: HTTP %d", resp.StatusCode)
	}
	ready()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	got := 0
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("data: ")) || bytes.HasPrefix(line, []byte(`data: {"result":`)) {
			continue
		}
		got++
		st.recordAt(cfg.nodeOf(i), line, (got+i)%sampleEvery == 0)
		if got == cfg.Count {
			done()
			_, _ = io.Copy(io.Discard, resp.Body) // stay connected until the end
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return fmt.Errorf("subscriber %d: the stream ended after %d of %d events (cut off as a slow consumer? see agentstream_slow_consumers_total)", i, got, cfg.Count)
}

func wsSubscriber(ctx context.Context, cfg Config, thread string, i, sampleEvery int, st *stats, ready, done func()) error {
	url := "ws" + strings.TrimPrefix(cfg.subURL(i), "http") + "/threads/" + thread + "/stream"
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: cfg.client(i)})
	if err != nil {
		return err
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"id": 1, "method": "subscription.subscribe", "params": {"channels": ["custom:firehose"]}}`)); err != nil {
		return err
	}
	_, b, err := c.Read(ctx)
	if err != nil {
		return err
	}
	var resp struct{ Type string }
	if json.Unmarshal(b, &resp) != nil || resp.Type != "success" {
		return fmt.Errorf("subscribe: %s", b)
	}
	ready()
	got := 0
	return readMessages(ctx, c, func(msg []byte) error {
		got++
		st.recordAt(cfg.nodeOf(i), msg, (got+i)%sampleEvery == 0)
		if got == cfg.Count {
			done()
		}
		return nil
	})
}

// readMessages hands each message c receives to fn, in one reused buffer
// valid until fn returns, until reading fails, fn returns an error, or ctx
// ends (which closes c; that end is no error). It reads with a context
// that never ends (the library would otherwise arm and disarm a watcher
// per message), so the client spends its core on reading.
func readMessages(ctx context.Context, c *websocket.Conn, fn func(msg []byte) error) error {
	stop := context.AfterFunc(ctx, func() { c.CloseNow() })
	defer stop()
	var buf bytes.Buffer
	for {
		_, r, err := c.Reader(context.Background())
		if err == nil {
			buf.Reset()
			_, err = buf.ReadFrom(r)
		}
		if err == nil {
			err = fn(buf.Bytes())
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// IdleMemory opens n idle connections (each subscribed, with no events),
// from the source addresses given (none: the default one), at most 256
// being opened at a time, waits settle, and returns the server's
// resident memory growth per connection, from a baseline read settle
// after a warm-up. It fails if a connection ended meanwhile.
func IdleMemory(ctx context.Context, url, transport string, n, pid int, settle time.Duration, sources ...string) (perConn int64, err error) {
	// Warm up first, so one-time costs (compiling schemas, first pools) are
	// not counted against the connections.
	if _, err := Run(ctx, Config{URL: url, Transport: transport, Subscribers: 10, Count: 10, Size: 100}); err != nil {
		return 0, fmt.Errorf("warming up: %w", err)
	}
	// The baseline settles as long as the connections will: a server that
	// gives memory back when it goes quiet gives back the warm-up's too,
	// which must not be taken off the connections' cost.
	time.Sleep(max(time.Second, settle))
	before, err := rssBytes(pid)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	thread := fmt.Sprintf("idle-%d", time.Now().UnixNano())
	var wg sync.WaitGroup
	ready := make(chan struct{}, n)
	errs := make(chan error, n)
	cfg := Config{URL: url, Count: 1 << 30, SourceAddrs: sources}
	var st stats
	opening := make(chan struct{}, 256) // a listen backlog is not flooded
	for i := 0; i < n; i++ {
		select {
		case opening <- struct{}{}:
		case <-ctx.Done():
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var once sync.Once
			opened := func() { once.Do(func() { <-opening }) }
			defer opened()
			up := func() { opened(); ready <- struct{}{} }
			var err error
			if transport == "ws" {
				err = wsSubscriber(ctx, cfg, thread, i, 1, &st, up, func() {})
			} else {
				err = sseSubscriber(ctx, cfg, thread, i, 1, &st, up, func() {})
			}
			if err != nil && ctx.Err() == nil {
				errs <- err
			}
		}(i)
	}
	if err := waitN(ctx, ready, errs, n); err != nil {
		cancel()
		wg.Wait()
		return 0, err
	}
	select { // let the server settle
	case <-time.After(settle):
	case <-ctx.Done():
		cancel()
		wg.Wait()
		return 0, ctx.Err()
	}
	after, err := rssBytes(pid)
	if len(errs) > 0 {
		err = fmt.Errorf("%d of %d connections ended before the memory was read (the first: %w)", len(errs), n, <-errs)
	}
	cancel()
	wg.Wait()
	if err != nil {
		return 0, err
	}
	return (after - before) / int64(n), nil
}

// cpuSeconds reads a process's user+system CPU time from /proc.
func cpuSeconds(pid int) (float64, error) {
	if pid <= 0 {
		return 0, nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which may hold spaces, in parens).
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100, nil // USER_HZ is 100 on Linux
}

// rssBytes reads a process's resident set size from /proc.
func rssBytes(pid int) (int64, error) { return statusBytes(pid, "VmRSS:") }

// statusBytes reads a size field of /proc/PID/status (VmRSS:, VmHWM:).
func statusBytes(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, field) {
			kb, err := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("no " + field)
}

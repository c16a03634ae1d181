package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// Bare is the reference the many-conversations workload is measured
// against: the least a server must do for it, and nothing else. One
// scheduler goroutine makes each thread's events when they are due,
// encodes each once, and writes it at once to each of the thread's
// watchers, WebSocket or SSE; no history, no filters, no queues, no
// authentication. It speaks just enough of the protocol for the load
// tool: `subscription.subscribe` (answered success), the SSE stream
// request, and run.start of `firehose` with its count, rate and size.
type Bare struct {
	mu      sync.Mutex
	threads map[string]*bareThread
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

type bareThread struct {
	watchers []bareWatcher
	// The run: count events, one every every, the next at next.
	count, sent int
	every       time.Duration
	next        time.Time
	pad         string
	seq         uint64
}

// bareWatcher writes a thread's events to one client.
type bareWatcher interface {
	write(event []byte) error
}

type wsWatcher struct {
	mu sync.Mutex // held while the subscribe's answer is written: events go after it
	c  *websocket.Conn
}

func (w *wsWatcher) write(event []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return w.c.Write(ctx, websocket.MessageText, event)
}

type sseWatcher struct {
	mu     sync.Mutex
	closed bool // the handler returned: its ResponseWriter is not ours
	w      io.Writer
	rc     *http.ResponseController
}

func (s *sseWatcher) write(event []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return net.ErrClosed
	}
	buf := make([]byte, 0, len(event)+16)
	buf = append(append(append(buf, "data: "...), event...), "\n\n"...)
	if _, err := s.w.Write(buf); err != nil {
		return err
	}
	return s.rc.Flush()
}

func (s *sseWatcher) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// NewBare starts the reference's scheduler; Close stops it.
func NewBare() *Bare {
	b := &Bare{threads: map[string]*bareThread{}, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go b.schedule()
	return b
}

// Close stops the scheduler.
func (b *Bare) Close() {
	close(b.stop)
	<-b.done
}

func (b *Bare) thread(id string) *bareThread {
	t := b.threads[id]
	if t == nil {
		t = &bareThread{}
		b.threads[id] = t
	}
	return t
}

// ServeHTTP serves the routes the load tool uses.
func (b *Bare) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" {
		_, _ = io.WriteString(w, "ok\n")
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(parts) < 3 || parts[0] != "threads" {
		http.NotFound(w, r)
		return
	}
	thread := parts[1]
	switch {
	case r.Method == "GET" && len(parts) == 3 && parts[2] == "stream":
		b.serveWS(w, r, thread)
	case r.Method == "POST" && parts[2] == "stream":
		b.serveSSE(w, r, thread)
	case r.Method == "POST" && len(parts) == 3 && parts[2] == "commands":
		b.command(w, r, thread)
	default:
		http.NotFound(w, r)
	}
}

func (b *Bare) watch(thread string, wt bareWatcher) {
	b.mu.Lock()
	t := b.thread(thread)
	t.watchers = append(t.watchers, wt)
	b.mu.Unlock()
}

func (b *Bare) serveWS(w http.ResponseWriter, r *http.Request, thread string) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	_, msg, err := c.Read(r.Context())
	if err != nil {
		return
	}
	var cmd struct {
		ID     uint64 `json:"id"`
		Method string `json:"method"`
	}
	if json.Unmarshal(msg, &cmd) != nil || cmd.Method != "subscription.subscribe" {
		c.Close(websocket.StatusPolicyViolation, "subscription.subscribe first")
		return
	}
	// Watching from before the answer (a client that has it may start the
	// run at once), the events held until the answer is written.
	ans := fmt.Sprintf(`{"type":"success","id":%d,"result":{"subscription_id":"sub-1"}}`, cmd.ID)
	wt := &wsWatcher{c: c}
	wt.mu.Lock()
	b.watch(thread, wt)
	err = c.Write(r.Context(), websocket.MessageText, []byte(ans))
	wt.mu.Unlock()
	if err != nil {
		return
	}
	// Read until the client leaves (it sends nothing more).
	for {
		if _, _, err := c.Read(r.Context()); err != nil {
			return
		}
	}
}

func (b *Bare) serveSSE(w http.ResponseWriter, r *http.Request, thread string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	// Watching from before the head reaches the client (which may start
	// the run once it has it), the events held until the head is out.
	wt := &sseWatcher{w: w, rc: rc}
	wt.mu.Lock()
	b.watch(thread, wt)
	err := rc.Flush()
	wt.mu.Unlock()
	if err == nil {
		<-r.Context().Done()
	}
	wt.close()
}

func (b *Bare) command(w http.ResponseWriter, r *http.Request, thread string) {
	var cmd struct {
		ID     uint64 `json:"id"`
		Method string `json:"method"`
		Params struct {
			Input struct {
				Count int     `json:"count"`
				Rate  float64 `json:"rate"`
				Size  int     `json:"size"`
			} `json:"input"`
		} `json:"params"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&cmd); err != nil || cmd.Method != "run.start" || cmd.Params.Input.Count <= 0 || cmd.Params.Input.Rate <= 0 {
		http.Error(w, "run.start of firehose with count and rate", http.StatusBadRequest)
		return
	}
	in := cmd.Params.Input
	b.mu.Lock()
	t := b.thread(thread)
	t.count, t.sent, t.every, t.next = in.Count, 0, time.Duration(float64(time.Second)/in.Rate), time.Now()
	t.pad = ""
	if in.Size > 64 {
		t.pad = strings.Repeat("x", in.Size-64)
	}
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"type":"success","id":%d,"result":{"run_id":"bare"}}`, cmd.ID)
}

// schedule makes and writes every due event, then sleeps until the next
// one is due.
func (b *Bare) schedule() {
	defer close(b.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var buf []byte
	for {
		now := time.Now()
		next := now.Add(time.Hour)
		b.mu.Lock()
		var due []*bareThread
		for _, t := range b.threads {
			if t.sent >= t.count {
				continue
			}
			if !t.next.After(now) {
				due = append(due, t)
			} else if t.next.Before(next) {
				next = t.next
			}
		}
		b.mu.Unlock()
		for _, t := range due {
			t.seq++
			ts := time.Now().UnixNano()
			buf = buf[:0]
			buf = append(buf, `{"type":"event","event_id":"bare-`...)
			buf = strconv.AppendUint(buf, t.seq, 10)
			buf = append(buf, `","seq":`...)
			buf = strconv.AppendUint(buf, t.seq, 10)
			buf = append(buf, `,"method":"custom","params":{"namespace":[],"timestamp":`...)
			buf = strconv.AppendInt(buf, ts/1e6, 10)
			buf = append(buf, `,"data":{"name":"firehose","payload":{"i":`...)
			buf = strconv.AppendInt(buf, int64(t.sent), 10)
			buf = append(buf, `,"ts":`...)
			buf = strconv.AppendInt(buf, ts, 10)
			buf = append(buf, `,"pad":"`...)
			buf = append(buf, t.pad...)
			buf = append(buf, `"}}}}`...)
			b.mu.Lock()
			watchers := t.watchers
			t.sent++
			t.next = t.next.Add(t.every)
			if t.sent < t.count && t.next.Before(next) {
				next = t.next
			}
			b.mu.Unlock()
			for _, wt := range watchers {
				_ = wt.write(buf)
			}
		}
		timer.Reset(max(0, time.Until(next)))
		select {
		case <-b.stop:
			return
		case <-b.wake:
		case <-timer.C:
		}
	}
}

// ServeBare serves the reference on ln until ctx ends.
func ServeBare(ctx context.Context, ln net.Listener) error {
	b := NewBare()
	defer b.Close()
	hs := &http.Server{Handler: b, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		c, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = hs.Shutdown(c)
		_ = hs.Close()
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Comparison is the many-conversations workload measured against the
// bare reference and against agentstream, alternated.
type Comparison struct {
	Bare, Agentstream []ManyResult
}

// median of f over rs.
func median(rs []ManyResult, f func(ManyResult) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	if len(v) == 0 {
		return 0
	}
	return v[len(v)/2]
}

func (c Comparison) String() string {
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	row := func(name string, f func(ManyResult) float64, unit string) string {
		b, a := median(c.Bare, f), median(c.Agentstream, f)
		ratio := "-"
		if b > 0 {
			ratio = fmt.Sprintf("%.2fx", a/b)
		}
		return fmt.Sprintf("  %-20s bare %10.3f%s  agentstream %10.3f%s  ratio %s  (agentstream - bare %+.3f%s)\n", name, b, unit, a, unit, ratio, a-b, unit)
	}
	var s strings.Builder
	fmt.Fprintf(&s, "medians of %d alternated runs each:\n", len(c.Bare))
	s.WriteString(row("delivered/s", func(r ManyResult) float64 { return r.PerSecond }, ""))
	s.WriteString(row("latency p50", func(r ManyResult) float64 { return ms(r.P50) }, "ms"))
	s.WriteString(row("latency p99", func(r ManyResult) float64 { return ms(r.P99) }, "ms"))
	s.WriteString(row("CPU per delivery", func(r ManyResult) float64 { return float64(r.CPUPerDelivery) / 1e3 }, "µs"))
	return strings.TrimRight(s.String(), "\n")
}

// AgainstBare runs the workload cfg against the bare reference at
// bareURL (its process barePID) and against cfg.URL, alternated, rounds
// times each, reporting each run to each as it ends.
func AgainstBare(ctx context.Context, cfg ManyConfig, bareURL string, barePID, rounds int, each func(name string, r ManyResult)) (Comparison, error) {
	var c Comparison
	if rounds <= 0 {
		rounds = 1
	}
	for i := 0; i < rounds; i++ {
		b := cfg
		b.URL, b.ServerPID = bareURL, barePID
		r, err := RunMany(ctx, b)
		if err != nil {
			return c, fmt.Errorf("the bare server: %w", err)
		}
		each("bare", r)
		c.Bare = append(c.Bare, r)
		r, err = RunMany(ctx, cfg)
		if err != nil {
			return c, fmt.Errorf("agentstream: %w", err)
		}
		each("agentstream", r)
		c.Agentstream = append(c.Agentstream, r)
	}
	return c, nil
}

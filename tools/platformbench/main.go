// Command platformbench measures a LangGraph Platform API server (the
// reference server or agentstream with --profiles langgraph) from
// outside: the server's CPU per operation (read from /proc for the
// process and its children), operations a second and latency
// percentiles, for
//
//	-op wait    runs.wait of the echo graph on a new thread each time
//	-op search  threads.search by a metadata member a tenth of -threads
//	            threads hold (made first), the newest 10
//	-op stream  runs.stream (messages-tuple) of echo answering -words
//	            words, read to its end: CPU per streamed token
//	-op protocol the same run through the protocol's own SSE (a stream
//	            of the thread's messages, then run.start), for comparison
//	            (agentstream only)
//	-op watch   -watchers joinStreams (messages-tuple, from the run's
//	            start) of one echo run answering -words words at -delay
//	            ms a word: deliveries a second, CPU per delivery
//	-op watchprotocol the same watchers as protocol SSE streams of the
//	            thread (agentstream only)
//
// Usage (docs/langgraph.md has the figures):
//
//	go run ./tools/platformbench -url http://127.0.0.1:2108 -pid PID -op wait -n 2000 -c 8
package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:2108", "the server")
	pid := flag.Int("pid", 0, "the server's process id (its children are counted too); 0: CPU is not measured")
	op := flag.String("op", "wait", "wait or search")
	n := flag.Int("n", 1000, "operations")
	c := flag.Int("c", 8, "operations at once")
	threads := flag.Int("threads", 100000, "with -op search: threads made first")
	nwords := flag.Int("words", 200, "with -op stream, protocol, watch: the words (tokens) of each run's answer")
	watchers := flag.Int("watchers", 1000, "with -op watch and watchprotocol: the readers of the one run")
	delay := flag.Int("delay", 1, "with -op watch and watchprotocol: ms between two words")
	flag.Parse()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *c * 2}, Timeout: 60 * time.Second}
	post := func(path string, body any) error {
		b, _ := json.Marshal(body)
		resp, err := client.Post(*url+path, "application/json", bytes.NewReader(b))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			return fmt.Errorf("%s: %d %s", path, resp.StatusCode, out)
		}
		return nil
	}
	waitUp(client, *url)
	mark := uuid()
	var do func(i int) error
	switch *op {
	case "wait":
		do = func(int) error {
			return post("/threads/"+uuid()+"/runs/wait", map[string]any{"assistant_id": "echo", "if_not_exists": "create",
				"input":  map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hello world"}}},
				"config": map[string]any{"configurable": map[string]any{"token_delay_ms": 0}}})
		}
	case "search":
		fmt.Fprintf(os.Stderr, "making %d threads...\n", *threads)
		if err := parallel(*threads, *c*2, func(i int) error {
			md := map[string]any{"bench": mark, "n": i}
			if i%10 == 0 {
				md["tenth"] = true
			}
			return post("/threads", map[string]any{"metadata": md})
		}); err != nil {
			fail(err)
		}
		do = func(int) error {
			return post("/threads/search", map[string]any{"metadata": map[string]any{"bench": mark, "tenth": true}, "limit": 10})
		}
	case "stream", "protocol":
		text := strings.TrimSpace(strings.Repeat("word ", *nwords))
		input := map[string]any{"messages": []any{map[string]any{"role": "user", "content": text}}}
		readTo := func(resp *http.Response, end string) error {
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				b, _ := io.ReadAll(resp.Body)
				return fmt.Errorf("%d %s", resp.StatusCode, b)
			}
			b := make([]byte, 32<<10)
			var tail []byte
			for {
				n, err := resp.Body.Read(b)
				tail = append(tail, b[:n]...)
				if end != "" && bytes.Contains(tail, []byte(end)) {
					return nil
				}
				if len(tail) > 4096 {
					tail = tail[len(tail)-4096:]
				}
				if err == io.EOF {
					return nil
				}
				if err != nil {
					return err
				}
			}
		}
		if *op == "stream" {
			do = func(int) error {
				b, _ := json.Marshal(map[string]any{"assistant_id": "echo", "input": input, "stream_mode": "messages-tuple", "if_not_exists": "create",
					"config": map[string]any{"configurable": map[string]any{"token_delay_ms": 0}}})
				resp, err := client.Post(*url+"/threads/"+uuid()+"/runs/stream", "application/json", bytes.NewReader(b))
				if err != nil {
					return err
				}
				return readTo(resp, "")
			}
		} else {
			do = func(int) error {
				thread := uuid()
				resp, err := client.Post(*url+"/threads/"+thread+"/stream", "application/json", strings.NewReader(`{"channels": ["messages", "lifecycle"]}`))
				if err != nil {
					return err
				}
				cmd, _ := json.Marshal(map[string]any{"id": 1, "method": "run.start", "params": map[string]any{"assistant_id": "echo", "input": input, "config": map[string]any{"token_delay_ms": 0}}})
				if err := post("/threads/"+thread+"/commands", json.RawMessage(cmd)); err != nil {
					resp.Body.Close()
					return err
				}
				return readTo(resp, `"completed"`)
			}
		}
	case "watch", "watchprotocol": // watch, below
	default:
		fail(fmt.Errorf("-op: wait, search, stream, protocol, watch or watchprotocol"))
	}
	if *op == "watch" || *op == "watchprotocol" {
		watch(client, *url, *op, *pid, *watchers, *nwords, *delay)
		return
	}
	_ = do(0) // warm
	cpu0 := treeCPU(*pid)
	lat := make([]time.Duration, *n)
	start := time.Now()
	err := parallel(*n, *c, func(i int) error {
		t := time.Now()
		err := do(i)
		lat[i] = time.Since(t)
		return err
	})
	wall := time.Since(start)
	cpu := treeCPU(*pid) - cpu0
	if err != nil {
		fail(err)
	}
	slices.Sort(lat)
	fmt.Printf("op=%s n=%d c=%d: %.0f/s, p50 %.2f ms, p99 %.2f ms", *op, *n, *c, float64(*n)/wall.Seconds(),
		ms(lat[len(lat)/2]), ms(lat[len(lat)*99/100]))
	if *pid > 0 {
		fmt.Printf(", server CPU %.3f ms per op (%.0f%% of a core)", ms(cpu)/float64(*n), 100*cpu.Seconds()/wall.Seconds())
		if *op == "stream" || *op == "protocol" {
			fmt.Printf(", %.2f µs per token", float64(cpu.Microseconds())/float64(*n**nwords))
		}
	}
	fmt.Println()
}

// waitUp waits (30 s at most) until the server answers anything.
func waitUp(client *http.Client, url string) {
	for i := 0; i < 300; i++ {
		if resp, err := client.Get(url + "/assistants/none"); err == nil {
			resp.Body.Close()
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	fail(fmt.Errorf("%s does not answer", url))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "platformbench:", err)
	os.Exit(1)
}

// parallel runs f(0..n-1), c at once; the first error stops it.
func parallel(n, c int, f func(int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var first atomic.Value
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for first.Load() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					first.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	wg.Wait()
	if err, ok := first.Load().(error); ok {
		return err
	}
	return nil
}

func uuid() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// treeCPU is the CPU time (user + system) of pid and its descendants.
func treeCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	parent := map[int]int{}
	ticks := map[int]int64{}
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+2:]) // state ppid ... utime(12) stime(13)
		if len(f) < 13 {
			continue
		}
		p, _ := strconv.Atoi(strings.TrimPrefix(strings.TrimSuffix(d, "/stat"), "/proc/"))
		pp, _ := strconv.Atoi(f[1])
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		parent[p], ticks[p] = pp, u+st
	}
	var total int64
	for p, t := range ticks {
		for q := p; q > 0; q = parent[q] {
			if q == pid {
				total += t
				break
			}
		}
	}
	return time.Duration(total) * time.Second / 100 // USER_HZ
}

// watch measures one run read by many: the watchers open first (joinStream
// from the run's start, or the protocol's stream of the thread before
// run.start), the run answers words words, each watcher reads to the end.
func watch(client *http.Client, url, op string, pid, watchers, words, delay int) {
	text := strings.TrimSpace(strings.Repeat("word ", words))
	input := map[string]any{"messages": []any{map[string]any{"role": "user", "content": text}}}
	thread := uuid()
	run := func(body any, path string) []byte {
		b, _ := json.Marshal(body)
		resp, err := client.Post(url+path, "application/json", bytes.NewReader(b))
		if err != nil {
			fail(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			fail(fmt.Errorf("%s: %d %s", path, resp.StatusCode, out))
		}
		return out
	}
	var open func() (*http.Response, error)
	var start func()
	marker := "event: messages"
	if op == "watch" {
		// The run first, slow to begin (its first word after the watchers
		// are in), then the joins from its start.
		cfg := map[string]any{"configurable": map[string]any{"token_delay_ms": delay}}
		var rec struct {
			RunID string `json:"run_id"`
		}
		_ = json.Unmarshal(run(map[string]any{"assistant_id": "echo", "if_not_exists": "create", "input": input, "config": cfg}, "/threads/"+thread+"/runs"), &rec)
		open = func() (*http.Response, error) {
			req, _ := http.NewRequest("GET", url+"/threads/"+thread+"/runs/"+rec.RunID+"/stream?stream_mode=messages-tuple", nil)
			req.Header.Set("Last-Event-ID", "-1")
			return client.Do(req)
		}
		start = func() {}
	} else {
		marker = `"content-block-delta"`
		open = func() (*http.Response, error) {
			return client.Post(url+"/threads/"+thread+"/stream", "application/json", strings.NewReader(`{"channels": ["messages", "lifecycle"]}`))
		}
		start = func() {
			run(map[string]any{"id": 1, "method": "run.start", "params": map[string]any{"assistant_id": "echo", "input": input, "config": map[string]any{"token_delay_ms": delay}}}, "/threads/"+thread+"/commands")
		}
	}
	cpu0 := treeCPU(pid)
	t0 := time.Now()
	var wg sync.WaitGroup
	var got atomic.Int64
	ready := make(chan struct{}, watchers)
	for range watchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := open()
			ready <- struct{}{}
			if err != nil {
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				line := sc.Text()
				if strings.HasPrefix(line, marker) || (marker[0] == '"' && strings.Contains(line, marker)) {
					got.Add(1)
				}
				if op == "watchprotocol" && strings.Contains(line, `"completed"`) {
					return
				}
			}
		}()
	}
	for range watchers {
		<-ready
	}
	start()
	wg.Wait()
	wall := time.Since(t0)
	cpu := treeCPU(pid) - cpu0
	n := got.Load()
	fmt.Printf("op=%s watchers=%d words=%d: %d of %d deliveries, %.0f deliveries/s", op, watchers, words, n, int64(watchers*words), float64(n)/wall.Seconds())
	if pid > 0 && n > 0 {
		fmt.Printf(", server CPU %.2f µs per delivery", float64(cpu.Microseconds())/float64(n))
	}
	fmt.Println()
}

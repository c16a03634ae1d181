package bindings

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentstream/agentstream/internal/testkit/sdktest"
	"github.com/agentstream/agentstream/internal/testkit/servetest"
	"github.com/agentstream/agentstream/internal/testkit/ssetest"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/stretchr/testify/require"
)

// workerLang is one language's worker example: how to start it and the
// names of the two assistants it serves.
type workerLang struct {
	name          string
	echo, approve string
	command       func(t *testing.T, url string) *exec.Cmd
}

var workerLangs = []workerLang{
	{name: "python", echo: "py-echo", approve: "py-approve", command: func(t *testing.T, url string) *exec.Cmd {
		cmd := exec.Command(tool(t, "python3"), "python/examples/worker.py", url)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(mustAbs(t, "python")))
		return cmd
	}},
	{name: "node", echo: "ts-echo", approve: "ts-approve", command: func(t *testing.T, url string) *exec.Cmd {
		return exec.Command(tool(t, "node"), "ts/examples/worker.mjs", url)
	}},
}

func mustAbs(t *testing.T, p string) string {
	abs, err := filepath.Abs(p)
	require.NoError(t, err)
	return abs
}

// startServer runs the core with the built-ins behind the HTTP transport
// on a loopback port until the test ends.
func startServer(t *testing.T, cfg server.Config) (*servetest.Server, *server.Server) {
	t.Helper()
	s := servetest.StartConfig(t, cfg, transport.Options{})
	return s, s.Core()
}

// startWorker starts a worker example against url and waits for the line
// it prints once the server registered it. The process is killed when the
// test ends.
func startWorker(t *testing.T, lang workerLang, url string) *exec.Cmd {
	t.Helper()
	return startProcess(t, lang.name, lang.command(t, url), "serves "+lang.echo)
}

// startProcess starts a worker process and waits for its first line,
// which must hold ready.
func startProcess(t *testing.T, name string, cmd *exec.Cmd, ready string) *exec.Cmd {
	t.Helper()
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("%s worker's stderr:\n%s", name, stderr.String())
		}
	})
	first := make(chan string, 1)
	go func() {
		defer close(exited)
		r := bufio.NewReader(out)
		line, _ := r.ReadString('\n')
		first <- line
		_, _ = io.Copy(io.Discard, r)
		_ = cmd.Wait()
	}()
	select {
	case line := <-first:
		require.Contains(t, line, ready, "the worker's first line; stderr: %s", stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("the %s worker did not connect; stderr: %s", name, stderr.String())
	}
	return cmd
}

// lockedBuffer is a buffer a process writes to while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestWorkersPassConformance: the official SDK's conformance suite (echo,
// interrupt + respond, cancel, late joiner, a dropped WebSocket, filters,
// hydration, fast runs) over SSE and WebSocket against the assistants a
// Python worker and a Node worker serve, as it passes against the
// built-ins.
func TestWorkersPassConformance(t *testing.T) {
	node, script := sdktest.Conformance(t)
	for _, lang := range workerLangs {
		t.Run(lang.name, func(t *testing.T) {
			ts, _ := startServer(t, server.Config{})
			startWorker(t, lang, ts.URL())
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, script, ts.URL())
			cmd.Env = append(os.Environ(), "AGENTSTREAM_ECHO_ASSISTANT="+lang.echo, "AGENTSTREAM_INTERRUPT_ASSISTANT="+lang.approve)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			t.Log("\n" + out.String())
			require.NoError(t, err, "conformance failed")
			require.Contains(t, out.String(), "14 passed, 0 failed")
		})
	}
}

func command(t *testing.T, base, thread, body string) map[string]any {
	t.Helper()
	resp, err := http.Post(base+"/threads/"+thread+"/commands", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	require.Equal(t, "success", out["type"], "%s: %v", body, out)
	return out
}

// follow reads a thread's events (all channels, from the start) into
// events until stop says so or the deadline passes.
func follow(t *testing.T, base, thread string, stop func(e map[string]any) bool) (events []map[string]any, ok bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/threads/"+thread+"/stream", strings.NewReader(`{"channels": ["lifecycle", "messages", "values", "tools", "input", "custom"]}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	_ = ssetest.Scan(bufio.NewReader(resp.Body), func(f ssetest.Frame) bool {
		var e map[string]any
		require.NoError(t, json.Unmarshal([]byte(f.Data), &e))
		events = append(events, e)
		if stop(e) {
			ok = true
			return false
		}
		return true
	})
	return events, ok
}

func data(e map[string]any) map[string]any {
	p, _ := e["params"].(map[string]any)
	d, _ := p["data"].(map[string]any)
	return d
}

// rootEnd is the root lifecycle's end of a run.
func rootEnd(e map[string]any) bool {
	if e["method"] != "lifecycle" || len(e["params"].(map[string]any)["namespace"].([]any)) != 0 {
		return false
	}
	switch data(e)["event"] {
	case "completed", "failed", "interrupted":
		return true
	}
	return false
}

func textOf(events []map[string]any) string {
	var b strings.Builder
	for _, e := range events {
		if d := data(e); e["method"] == "messages" && d["event"] == "content-block-delta" {
			b.WriteString(d["delta"].(map[string]any)["text"].(string))
		}
	}
	return b.String()
}

func words(n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = fmt.Sprintf("w%d", i)
	}
	return strings.Join(w, " ")
}

// TestWorkerKilledMidRun: a worker process killed (SIGKILL) in the middle
// of a run's message: within the lease the run fails with "worker lost",
// the open message gets its error event first, and the thread takes a new
// run, which a new worker serves to its end.
func TestWorkerKilledMidRun(t *testing.T) {
	for _, lang := range workerLangs {
		t.Run(lang.name, func(t *testing.T) {
			ts, srv := startServer(t, server.Config{WorkerLease: time.Second})
			w := startWorker(t, lang, ts.URL())
			text := words(200)
			command(t, ts.URL(), "k", fmt.Sprintf(`{"id": 1, "method": "run.start", "params": {"assistant_id": %q, "input": {"messages": [{"role": "user", "content": %q}]}, "config": {"token_delay_ms": 20}}}`, lang.echo, text))
			var killedAt time.Time
			events, ok := follow(t, ts.URL(), "k", func(e map[string]any) bool {
				if killedAt.IsZero() && data(e)["event"] == "content-block-delta" {
					require.NoError(t, w.Process.Signal(syscall.SIGKILL))
					killedAt = time.Now()
				}
				return rootEnd(e)
			})
			require.True(t, ok, "the run ends")
			lost := time.Since(killedAt)
			end := data(events[len(events)-1])
			require.Equal(t, "failed", end["event"])
			require.Contains(t, end["error"], "worker lost")
			require.Less(t, lost, 5*time.Second, "lost within the lease (1 s) and the sweep")
			var kinds []string
			for _, e := range events[len(events)-3:] {
				kinds = append(kinds, fmt.Sprint(data(e)["event"]))
			}
			require.Equal(t, "error", kinds[1], "the open message is closed before the run's end: %v", kinds)
			got := textOf(events)
			require.True(t, len(got) < len(text) && strings.HasPrefix(text, got), "what streamed is a prefix of the text: %q", got)
			require.Equal(t, uint64(1), srv.Metrics().WorkersLost)

			startWorker(t, lang, ts.URL())
			command(t, ts.URL(), "k", fmt.Sprintf(`{"id": 2, "method": "run.start", "params": {"assistant_id": %q, "input": {"messages": [{"role": "user", "content": "again"}]}}}`, lang.echo))
			events, ok = follow(t, ts.URL(), "k", func(e map[string]any) bool { return rootEnd(e) && data(e)["event"] == "completed" })
			require.True(t, ok, "the thread's next run completes")
		})
	}
}

// TestWorkerStopsCleanly: a worker process told to stop (SIGTERM) in the
// middle of a run tells the server it leaves: the run fails with "worker
// lost: the worker stopped" at once, not when its one-minute lease would
// run out, and the thread takes a new run.
func TestWorkerStopsCleanly(t *testing.T) {
	for _, lang := range workerLangs {
		t.Run(lang.name, func(t *testing.T) {
			ts, _ := startServer(t, server.Config{WorkerLease: time.Minute})
			w := startWorker(t, lang, ts.URL())
			command(t, ts.URL(), "s", fmt.Sprintf(`{"id": 1, "method": "run.start", "params": {"assistant_id": %q, "input": {"messages": [{"role": "user", "content": %q}]}, "config": {"token_delay_ms": 20}}}`, lang.echo, words(200)))
			var stoppedAt time.Time
			events, ok := follow(t, ts.URL(), "s", func(e map[string]any) bool {
				if stoppedAt.IsZero() && data(e)["event"] == "content-block-delta" {
					require.NoError(t, w.Process.Signal(syscall.SIGTERM))
					stoppedAt = time.Now()
				}
				return rootEnd(e)
			})
			require.True(t, ok, "the run ends")
			end := data(events[len(events)-1])
			require.Equal(t, "failed", end["event"])
			require.Contains(t, end["error"], "worker lost: the worker stopped", "the server failed it when the worker said it left")
			require.Less(t, time.Since(stoppedAt), 10*time.Second, "long before the one-minute lease")
			command(t, ts.URL(), "s", `{"id": 2, "method": "run.start", "params": {"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "again"}]}}}`)
		})
	}
}

// dropProxy forwards TCP connections to a server; drop closes every
// connection open through it (a network drop), new ones still pass.
type dropProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newDropProxy(t *testing.T, target string) *dropProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &dropProxy{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); _, _ = io.Copy(s, c); s.Close() }()
			go func() { defer p.wg.Done(); _, _ = io.Copy(c, s); c.Close() }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.drop()
		p.wg.Wait()
	})
	return p
}

func (p *dropProxy) url() string { return "http://" + p.ln.Addr().String() }

func (p *dropProxy) drop() int {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	return len(conns)
}

// TestWorkerReconnectsWithoutDuplicates: every connection between a
// worker and the server is cut (several times) in the middle of a run:
// the worker connects again under its name, sends its batches again under
// their numbers, and the run completes with every word once.
func TestWorkerReconnectsWithoutDuplicates(t *testing.T) {
	for _, lang := range workerLangs {
		t.Run(lang.name, func(t *testing.T) {
			ts, srv := startServer(t, server.Config{WorkerLease: 5 * time.Second})
			proxy := newDropProxy(t, strings.TrimPrefix(ts.URL(), "http://"))
			startWorker(t, lang, proxy.url())
			text := words(60)
			command(t, ts.URL(), "r", fmt.Sprintf(`{"id": 1, "method": "run.start", "params": {"assistant_id": %q, "input": {"messages": [{"role": "user", "content": %q}]}, "config": {"token_delay_ms": 15}}}`, lang.echo, text))
			stop := make(chan struct{})
			dropped := make(chan int, 1)
			go func() {
				n := 0
				for i := 0; i < 4; i++ {
					select {
					case <-stop:
					case <-time.After(150 * time.Millisecond):
						n += proxy.drop()
					}
				}
				dropped <- n
			}()
			events, ok := follow(t, ts.URL(), "r", rootEnd)
			close(stop)
			require.True(t, ok, "the run ends")
			require.Equal(t, "completed", data(events[len(events)-1])["event"], "%v", events[len(events)-1])
			require.Equal(t, text, textOf(events), "every word once, in order")
			seen := map[float64]bool{}
			for _, e := range events {
				if s, ok := e["seq"].(float64); ok {
					require.False(t, seen[s], "seq %v twice", s)
					seen[s] = true
				}
			}
			require.Positive(t, <-dropped, "connections were cut")
			require.Zero(t, srv.Metrics().WorkersLost, "a reconnecting worker is not lost")
		})
	}
}

// injectWorkers are workers, one per language, serving "inject": a run
// that waits for the input a client injects and publishes it back as a
// custom event named "got".
var injectWorkers = map[string]string{
	"python": `import sys
from agentstream_protocol.worker import Worker

def inject(run):
    got = run.injected.get(timeout=10)
    run.event("custom", {"name": "got", "payload": got})

Worker(sys.argv[1], on_ready=lambda i: print("worker", i, "serves inject", flush=True)).serve({"inject": inject})
`,
	"node": `import { Worker } from "WORKER_JS";
const w = new Worker({ url: process.argv[1], onReady: (id) => console.log("worker", id, "serves inject") });
await w.serve({
  async inject(run) {
    const got = await run.nextInput();
    run.event("custom", { name: "got", payload: got });
  },
});
`,
}

// TestWorkerGetsInjectedInput: input.inject sent to a worker's running run
// reaches the worker's handler (Python's run.injected, Node's
// run.nextInput()), which publishes it back.
func TestWorkerGetsInjectedInput(t *testing.T) {
	for _, lang := range workerLangs {
		t.Run(lang.name, func(t *testing.T) {
			ts, _ := startServer(t, server.Config{})
			var cmd *exec.Cmd
			if lang.name == "python" {
				cmd = exec.Command(tool(t, "python3"), "-c", injectWorkers["python"], ts.URL())
				cmd.Env = append(os.Environ(), "PYTHONPATH="+mustAbs(t, "python"))
			} else {
				code := strings.ReplaceAll(injectWorkers["node"], "WORKER_JS", mustAbs(t, "ts/worker.js"))
				cmd = exec.Command(tool(t, "node"), "--input-type=module", "-e", code, ts.URL())
			}
			startProcess(t, lang.name, cmd, "serves inject")
			command(t, ts.URL(), "i", `{"id": 1, "method": "run.start", "params": {"assistant_id": "inject", "input": null}}`)
			// The run is running once its root lifecycle says so; then a
			// client injects a message into it.
			_, ok := follow(t, ts.URL(), "i", func(e map[string]any) bool { return data(e)["event"] == "running" })
			require.True(t, ok)
			command(t, ts.URL(), "i", `{"id": 2, "method": "input.inject", "params": {"namespace": [], "message": {"role": "user", "content": "also this"}}}`)
			events, ok := follow(t, ts.URL(), "i", rootEnd)
			require.True(t, ok, "the run ends")
			require.Equal(t, "completed", data(events[len(events)-1])["event"])
			var got any
			for _, e := range events {
				if e["method"] == "custom" && data(e)["name"] == "got" {
					got = data(e)["payload"]
				}
			}
			require.Equal(t, map[string]any{"role": "user", "content": "also this"}, got, "the injected message reached the worker")
		})
	}
}

package redisstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentstream/agentstream/client"
	"github.com/agentstream/agentstream/internal/testkit/redistest"
	"github.com/agentstream/agentstream/internal/testkit/ssetest"
	"github.com/stretchr/testify/require"
)

// follow opens an SSE stream of a thread on a node and returns a function
// that reads its events (decoded) until one matches stop.
func follow(t *testing.T, ctx context.Context, base, thread string) func(stop func(map[string]any) bool) []map[string]any {
	t.Helper()
	br := openSSE(t, ctx, base, thread, "")
	return func(stop func(map[string]any) bool) []map[string]any {
		var got []map[string]any
		require.NoError(t, ssetest.Scan(br, func(f ssetest.Frame) bool {
			var e map[string]any
			require.NoError(t, json.Unmarshal([]byte(f.Data), &e))
			got = append(got, e)
			return !stop(e)
		}))
		return got
	}
}

func kind(e map[string]any) string {
	p, _ := e["params"].(map[string]any)
	d, _ := p["data"].(map[string]any)
	if s, ok := d["event"].(string); ok {
		return s
	}
	return fmt.Sprint(e["method"])
}

func runEnded(e map[string]any) bool {
	ns, _ := e["params"].(map[string]any)["namespace"].([]any)
	return e["method"] == "lifecycle" && len(ns) == 0 && (kind(e) == "completed" || kind(e) == "failed")
}

// text joins the text deltas of events.
func text(evs []map[string]any) string {
	var b strings.Builder
	for _, e := range evs {
		if d, ok := e["params"].(map[string]any)["data"].(map[string]any)["delta"].(map[string]any); ok {
			b.WriteString(fmt.Sprint(d["text"]))
		}
	}
	return b.String()
}

// TestWorkersAcrossNodes: with three nodes on one Redis, a worker
// connected to node A serves runs started through node C (even on a
// thread whose last run, a built-in's, ran on C), streamed to a client of
// node B; a cancel, an interrupt's answer and injected input sent to node
// B reach the worker on A. An assistant no node's worker serves is
// refused; a node whose worker goes away stops being picked.
func TestWorkersAcrossNodes(t *testing.T) {
	workersAcrossNodes(t, redistest.Start(t).URL())
}

func workersAcrossNodes(t *testing.T, url string) {
	a, b, c := startClusterNode(t, url), startClusterNode(t, url), startClusterNode(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	status, out := command(t, c, "t1", `{"id": 1, "method": "run.start", "params": {"assistant_id": "remote", "input": {"words": 1}}}`)
	require.Equal(t, 400, status, "%v", out)
	require.Contains(t, out["message"], `unknown assistant "remote"`)

	cancelled := make(chan error, 1)
	wctx, wcancel := context.WithCancel(ctx)
	wdone := make(chan error, 1)
	go func() {
		wdone <- client.ServeWorker(wctx, client.WorkerOptions{URL: a.ts.URL, Assistants: []string{"remote"}}, func(ctx context.Context, run *client.WorkerRun) error {
			in, _ := run.Input.(map[string]any)
			switch {
			case in["ask"] == true:
				answer, err := run.Interrupt(ctx, map[string]any{"question": "go on?"})
				if err != nil {
					return err
				}
				return run.Text(fmt.Sprintf("answer %v", answer))
			case in["wait"] == true:
				if err := run.Text("waiting"); err != nil {
					return err
				}
				for {
					select {
					case v := <-run.Injected():
						m, _ := v.(map[string]any)
						if err := run.Text(fmt.Sprintf("injected %v", m["content"])); err != nil {
							return err
						}
					case <-ctx.Done():
						cancelled <- context.Cause(ctx)
						return ctx.Err()
					}
				}
			}
			return run.Text("one ", "two ", "three")
		})
	}()
	var once sync.Once
	stopWorker := func() {
		once.Do(func() {
			wcancel()
			require.NoError(t, ignoreCanceled(<-wdone))
		})
	}
	defer stopWorker()
	// The worker is known on C once A has written its directory entry.
	require.Eventually(t, func() bool {
		status, _ := command(t, c, "probe", `{"id": 1, "method": "run.start", "params": {"assistant_id": "remote", "input": {}}}`)
		return status == 200
	}, 10*time.Second, 20*time.Millisecond, "node C hears of the worker on A")

	// A built-in run through C (C holds the thread's lease for a while
	// after it), then the worker's run through C: it runs on A.
	read := follow(t, ctx, b.ts.URL, "t1")
	status, out = command(t, c, "t1", `{"id": 2, "method": "run.start", "params": {"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "x"}]}}}`)
	require.Equal(t, 200, status, "%v", out)
	read(runEnded)
	status, out = command(t, c, "t1", `{"id": 3, "method": "run.start", "params": {"assistant_id": "remote", "input": {}}}`)
	require.Equal(t, 200, status, "%v", out)
	got := read(runEnded)
	require.Equal(t, "completed", kind(got[len(got)-1]), "%v", got)
	require.Equal(t, "one two three", text(got))

	// A cancel and injected input sent to B reach the worker on A.
	read = follow(t, ctx, b.ts.URL, "t2")
	status, out = command(t, c, "t2", `{"id": 4, "method": "run.start", "params": {"assistant_id": "remote", "input": {"wait": true}}}`)
	require.Equal(t, 200, status, "%v", out)
	runID := out["result"].(map[string]any)["run_id"].(string)
	read(func(e map[string]any) bool { return kind(e) == "message-finish" })
	status, out = command(t, b, "t2", `{"id": 5, "method": "input.inject", "params": {"namespace": [], "message": {"role": "user", "content": "hello"}}}`)
	require.Equal(t, 200, status, "%v", out)
	got = read(func(e map[string]any) bool { return kind(e) == "message-finish" })
	require.Equal(t, "injected hello", text(got))
	status, out = command(t, b, "t2", `{"id": 6, "method": "run.cancel", "params": {"run_id": "`+runID+`"}}`)
	require.Equal(t, 200, status, "%v", out)
	got = read(runEnded)
	last := got[len(got)-1]["params"].(map[string]any)["data"].(map[string]any)
	require.Equal(t, "failed", last["event"])
	require.Equal(t, true, last["cancelled"])
	select {
	case err := <-cancelled:
		require.ErrorContains(t, err, "cancel")
	case <-time.After(10 * time.Second):
		t.Fatal("the cancel sent to B did not reach the worker on A")
	}

	// An interrupt raised by the worker on A, answered through B.
	read = follow(t, ctx, b.ts.URL, "t3")
	status, out = command(t, c, "t3", `{"id": 7, "method": "run.start", "params": {"assistant_id": "remote", "input": {"ask": true}}}`)
	require.Equal(t, 200, status, "%v", out)
	got = read(func(e map[string]any) bool { return kind(e) == "interrupted" })
	var interruptID string
	for _, e := range got {
		if e["method"] == "input.requested" {
			interruptID = e["params"].(map[string]any)["data"].(map[string]any)["interrupt_id"].(string)
		}
	}
	require.NotEmpty(t, interruptID, "%v", got)
	status, out = command(t, b, "t3", `{"id": 8, "method": "input.respond", "params": {"namespace": [], "interrupt_id": "`+interruptID+`", "response": "yes"}}`)
	require.Equal(t, 200, status, "%v", out)
	got = read(runEnded)
	require.Equal(t, "completed", kind(got[len(got)-1]), "%v", got)
	require.Equal(t, "answer yes", text(got))

	// The worker stops (and says so): A's entry goes, and C refuses the
	// assistant again.
	stopWorker()
	require.Eventually(t, func() bool {
		status, out := command(t, c, "t4", `{"id": 9, "method": "run.start", "params": {"assistant_id": "remote", "input": {}}}`)
		return status == 400 && strings.Contains(fmt.Sprint(out["message"]), `unknown assistant "remote"`)
	}, 10*time.Second, 20*time.Millisecond, "node C forgets the worker that left A")
}

func ignoreCanceled(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

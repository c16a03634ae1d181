package transport_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/client"
	"github.com/agentstream/agentstream/internal/testkit/ssetest"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
)

// serveWorker runs a Go worker (client.ServeWorker) against base until
// the test ends, and waits until the server lists its assistants.
func serveWorker(t *testing.T, base string, srv *server.Server, assistants []string, maxRuns int, handle client.WorkerHandler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- client.ServeWorker(ctx, client.WorkerOptions{URL: base, Assistants: assistants, MaxRuns: maxRuns}, handle)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the worker did not stop")
		}
	})
	require.Eventually(t, func() bool {
		for _, a := range srv.Assistants() {
			if a == assistants[0] {
				return true
			}
		}
		return false
	}, 5*time.Second, 5*time.Millisecond, "the worker connects")
}

// watch opens an SSE stream of a thread and returns a function that reads
// its events (as decoded JSON) until one matches stop.
func watch(t *testing.T, base, thread string) func(stop func(map[string]any) bool) []map[string]any {
	t.Helper()
	resp, err := http.Post(base+"/threads/"+thread+"/stream", "application/json", strings.NewReader(`{"channels": ["lifecycle", "messages", "input", "custom"]}`))
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	t.Cleanup(func() { resp.Body.Close() })
	br := bufio.NewReader(resp.Body)
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

// dataEvent is an event's params.data.event (or its method).
func dataEvent(e map[string]any) string {
	p, _ := e["params"].(map[string]any)
	d, _ := p["data"].(map[string]any)
	if s, ok := d["event"].(string); ok {
		return s
	}
	return fmt.Sprint(e["method"])
}

func ended(e map[string]any) bool {
	return e["method"] == "lifecycle" && (dataEvent(e) == "completed" || dataEvent(e) == "failed")
}

func echoWorker(ctx context.Context, run *client.WorkerRun) error {
	in, _ := run.Input.(map[string]any)
	words := strings.Fields(fmt.Sprint(in["text"]))
	for i := range words {
		if i < len(words)-1 {
			words[i] += " "
		}
	}
	return run.Text(words...)
}

// TestWorkerServesARun: a Go worker serving an assistant gets run.start's
// run and streams a message; a client sees the server's lifecycle around
// the worker's events, in order, and the run completes. run.start of an
// assistant no worker serves is refused.
func TestWorkerServesARun(t *testing.T) {
	ts, _, srv := start(t, transport.Options{})
	status, out := post(t, ts.URL+"/threads/w/commands", `{"id": 1, "method": "run.start", "params": {"assistant_id": "remote-echo", "input": {"text": "hi"}}}`)
	require.Equal(t, 400, status, "%v", out)
	require.Contains(t, out["message"], `unknown assistant "remote-echo"`)

	serveWorker(t, ts.URL, srv, []string{"remote-echo"}, 0, echoWorker)
	read := watch(t, ts.URL, "w")
	status, out = post(t, ts.URL+"/threads/w/commands", `{"id": 2, "method": "run.start", "params": {"assistant_id": "remote-echo", "input": {"text": "one two three"}}}`)
	require.Equal(t, 200, status, "%v", out)
	runID := out["result"].(map[string]any)["run_id"]
	got := read(ended)
	var kinds []string
	var text strings.Builder
	lastSeq := 0.0
	for _, e := range got {
		kinds = append(kinds, dataEvent(e))
		require.Greater(t, e["seq"], lastSeq)
		lastSeq = e["seq"].(float64)
		d := e["params"].(map[string]any)["data"].(map[string]any)
		if delta, ok := d["delta"].(map[string]any); ok {
			text.WriteString(delta["text"].(string))
		}
		if e["method"] == "messages" {
			require.Equal(t, runID, d["run_id"], "message events carry the run id")
		}
	}
	require.Equal(t, []string{"started", "running", "message-start", "content-block-start", "content-block-delta", "content-block-delta", "content-block-delta", "content-block-finish", "message-finish", "completed"}, kinds)
	require.Equal(t, "one two three", text.String())
}

// TestWorkerCancelAndInterrupt: run.cancel reaches the worker (its
// handler's context ends) and the run fails as cancelled; an interrupt the
// worker raises is answered by input.respond, whose answer the worker
// gets back and uses.
func TestWorkerCancelAndInterrupt(t *testing.T) {
	ts, _, srv := start(t, transport.Options{})
	cancelled := make(chan error, 1)
	serveWorker(t, ts.URL, srv, []string{"waiter", "asker"}, 0, func(ctx context.Context, run *client.WorkerRun) error {
		if run.AssistantID == "waiter" {
			if err := run.Text("waiting"); err != nil {
				return err
			}
			<-ctx.Done()
			cancelled <- context.Cause(ctx)
			return ctx.Err()
		}
		answer, err := run.Interrupt(ctx, map[string]any{"question": "approve?"})
		if err != nil {
			return err
		}
		return run.Text(fmt.Sprintf("answer: %v", answer.(map[string]any)["approved"]))
	})

	read := watch(t, ts.URL, "c")
	status, out := post(t, ts.URL+"/threads/c/commands", `{"id": 1, "method": "run.start", "params": {"assistant_id": "waiter", "input": null}}`)
	require.Equal(t, 200, status, "%v", out)
	runID := out["result"].(map[string]any)["run_id"].(string)
	read(func(e map[string]any) bool { return dataEvent(e) == "message-finish" })
	status, out = post(t, ts.URL+"/threads/c/commands", `{"id": 2, "method": "run.cancel", "params": {"run_id": "`+runID+`"}}`)
	require.Equal(t, 200, status, "%v", out)
	got := read(ended)
	last := got[len(got)-1]["params"].(map[string]any)["data"].(map[string]any)
	require.Equal(t, "failed", last["event"])
	require.Equal(t, true, last["cancelled"])
	select {
	case err := <-cancelled:
		require.ErrorContains(t, err, "cancel")
	case <-time.After(5 * time.Second):
		t.Fatal("the worker's handler was not cancelled")
	}

	read = watch(t, ts.URL, "i")
	status, out = post(t, ts.URL+"/threads/i/commands", `{"id": 3, "method": "run.start", "params": {"assistant_id": "asker", "input": null}}`)
	require.Equal(t, 200, status, "%v", out)
	got = read(func(e map[string]any) bool { return dataEvent(e) == "interrupted" })
	var interruptID string
	for _, e := range got {
		if e["method"] == "input.requested" {
			d := e["params"].(map[string]any)["data"].(map[string]any)
			interruptID = d["interrupt_id"].(string)
			require.Equal(t, map[string]any{"question": "approve?"}, d["payload"])
		}
	}
	require.NotEmpty(t, interruptID, "input.requested reached the client: %v", got)
	status, out = post(t, ts.URL+"/threads/i/commands", `{"id": 4, "method": "input.respond", "params": {"namespace": [], "interrupt_id": "`+interruptID+`", "response": {"approved": true}}}`)
	require.Equal(t, 200, status, "%v", out)
	got = read(ended)
	var text strings.Builder
	for _, e := range got {
		if d, ok := e["params"].(map[string]any)["data"].(map[string]any)["delta"].(map[string]any); ok {
			text.WriteString(d["text"].(string))
		}
	}
	require.Equal(t, "answer: true", text.String())
	require.Equal(t, "completed", dataEvent(got[len(got)-1]))
}

// TestWorkerAssistantIDsAreChecked: an assistant id with a newline or
// another control character, "." or "..", or an empty one among others,
// is refused at connect (400).
func TestWorkerAssistantIDsAreChecked(t *testing.T) {
	ts, _, _ := start(t, transport.Options{})
	for _, q := range []string{"a%0Ab", "a%00b", "..", "a,.", "a%7Fb"} {
		resp, err := http.Get(ts.URL + "/workers/connect?assistants=" + q)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 400, resp.StatusCode, "%s: %s", q, b)
		require.Contains(t, string(b), "invalid_argument")
	}
}

// TestWorkerHeartbeatNeedsNoBody: a heartbeat with no body needs no
// Content-Type (a worker's HTTP client sends none for an empty POST).
func TestWorkerHeartbeatNeedsNoBody(t *testing.T) {
	ts, _, _ := start(t, transport.Options{})
	id, _, body := rawWorker(t, ts.URL, "echo")
	defer body.Close()
	req, err := http.NewRequest("POST", ts.URL+"/workers/"+id+"/heartbeat", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Less(t, resp.StatusCode, 300, "%s", b)
}

// rawWorker connects a worker by hand (no heartbeat) and returns its id
// and the lines of its stream.
func rawWorker(t *testing.T, base, assistants string) (string, *bufio.Scanner, io.Closer) {
	t.Helper()
	resp, err := http.Get(base + "/workers/connect?assistants=" + assistants)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	require.True(t, sc.Scan())
	var ready map[string]any
	require.NoError(t, json.Unmarshal(sc.Bytes(), &ready))
	require.Equal(t, "ready", ready["type"])
	return ready["worker_id"].(string), sc, resp.Body
}

// nextAssign reads the stream up to the next assignment.
func nextAssign(t *testing.T, sc *bufio.Scanner) map[string]any {
	t.Helper()
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m))
		if m["type"] == "assign" {
			return m
		}
	}
	t.Fatal("the stream ended before an assignment")
	return nil
}

func postOps(t *testing.T, base, worker, run string, seq int, ops string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest("POST", base+"/workers/"+worker+"/runs/"+run, strings.NewReader(ops))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-ndjson")
	if seq > 0 {
		req.Header.Set(transport.ProducerSeqHeader, fmt.Sprint(seq))
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

const (
	opStart = `{"op":"emit","event":{"type":"event","method":"messages","params":{"namespace":[],"data":{"event":"message-start","role":"ai","id":"m1"}}}}`
	opBlock = `{"op":"emit","event":{"type":"event","method":"messages","params":{"namespace":[],"data":{"event":"content-block-start","index":0,"content":{"type":"text","text":""}}}}}`
)

// TestWorkerLost: a worker that stops sending (no batch, no heartbeat)
// for its lease is lost: its run fails with "worker lost", the message it
// left open is closed first, and the thread takes a new run. A batch sent
// again appends nothing twice; a bad operation refuses its batch with its
// index.
func TestWorkerLost(t *testing.T) {
	ts, _, srv := startWith(t, server.Config{WorkerLease: 400 * time.Millisecond}, transport.Options{})
	wid, sc, body := rawWorker(t, ts.URL, "slow")
	defer body.Close()
	read := watch(t, ts.URL, "l")
	status, out := post(t, ts.URL+"/threads/l/commands", `{"id": 1, "method": "run.start", "params": {"assistant_id": "slow", "input": null}}`)
	require.Equal(t, 200, status, "%v", out)
	a := nextAssign(t, sc)
	run := a["run_id"].(string)
	require.Equal(t, "l", a["thread_id"])

	status, out = postOps(t, ts.URL, wid, run, 1, opStart+"\n"+opBlock+"\n")
	require.Equal(t, 200, status, "%v", out)
	require.Equal(t, []any{3.0, 4.0}, out["seqs"])
	status, out = postOps(t, ts.URL, wid, run, 1, opStart+"\n"+opBlock+"\n")
	require.Equal(t, 200, status, "%v", out)
	require.Equal(t, true, out["duplicate"], "the same batch again appends nothing")
	require.Equal(t, []any{3.0, 4.0}, out["seqs"])
	status, out = postOps(t, ts.URL, wid, run, 2, `{"op":"end","status":"done"}`)
	require.Equal(t, 400, status, "%v", out)
	require.Contains(t, out["message"], "[0].status")
	status, out = postOps(t, ts.URL, wid, run, 3, `{"op":"emit","event":{"type":"event","method":"lifecycle","params":{"namespace":[],"data":{"event":"completed"}}}}`)
	require.Equal(t, 400, status, "%v", out)
	require.Contains(t, out["message"], "the server's")

	began := time.Now()
	got := read(ended)
	require.Less(t, time.Since(began), 5*time.Second)
	var kinds []string
	for _, e := range got {
		kinds = append(kinds, dataEvent(e))
	}
	require.Equal(t, []string{"started", "running", "message-start", "content-block-start", "error", "failed"}, kinds)
	last := got[len(got)-1]["params"].(map[string]any)["data"].(map[string]any)
	require.Contains(t, last["error"], "worker lost")
	require.Equal(t, uint64(1), srv.Metrics().WorkersLost)
	status, out = postOps(t, ts.URL, wid, run, 4, opStart)
	require.Equal(t, 404, status, "a lost worker is told to connect again: %v", out)

	status, out = post(t, ts.URL+"/threads/l/commands", `{"id": 2, "method": "run.start", "params": {"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "again"}]}}}`)
	require.Equal(t, 200, status, "the thread takes a new run: %v", out)
}

// TestWorkersShareRuns: two workers of one assistant, each taking two
// runs at a time, share 100 runs on 100 threads; every run completes.
func TestWorkersShareRuns(t *testing.T) {
	ts, _, srv := start(t, transport.Options{})
	var counts [2]atomic.Int64
	for i := range counts {
		serveWorker(t, ts.URL, srv, []string{"shared"}, 2, func(ctx context.Context, run *client.WorkerRun) error {
			counts[i].Add(1)
			time.Sleep(20 * time.Millisecond)
			return run.Text("done")
		})
	}
	var wg sync.WaitGroup
	for n := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			thread := fmt.Sprintf("s%d", n)
			read := watch(t, ts.URL, thread)
			status, out := post(t, ts.URL+"/threads/"+thread+"/commands", `{"id": 1, "method": "run.start", "params": {"assistant_id": "shared", "input": null}}`)
			require.Equal(t, 200, status, "%v", out)
			got := read(ended)
			require.Equal(t, "completed", dataEvent(got[len(got)-1]), "%v", got[len(got)-1])
		}()
	}
	wg.Wait()
	require.Equal(t, int64(100), counts[0].Load()+counts[1].Load())
	require.Greater(t, counts[0].Load(), int64(20), "both workers take runs")
	require.Greater(t, counts[1].Load(), int64(20), "both workers take runs")
}

// TestWorkerRefusedBatchFailsTheRun: a handler that emits an event the
// schema refuses does not leave its run hanging: nothing of the refused
// batch is published, the emits after it fail, and the run ends failed
// with the refusal (the path of the error).
func TestWorkerRefusedBatchFailsTheRun(t *testing.T) {
	ts, _, srv := start(t, transport.Options{})
	emitErr := make(chan error, 1)
	serveWorker(t, ts.URL, srv, []string{"sloppy"}, 0, func(ctx context.Context, run *client.WorkerRun) error {
		if err := run.Emit(map[string]any{"type": "event", "method": "custom", "params": map[string]any{"namespace": "root", "data": 1}}); err != nil {
			return err
		}
		flushErr := run.Flush(ctx)
		emitErr <- run.Emit(map[string]any{"type": "event", "method": "custom", "params": map[string]any{"namespace": []string{}, "data": 2}})
		return flushErr
	})
	read := watch(t, ts.URL, "bad")
	status, out := post(t, ts.URL+"/threads/bad/commands", `{"id": 1, "method": "run.start", "params": {"assistant_id": "sloppy", "input": null}}`)
	require.Equal(t, 200, status, "%v", out)
	got := read(ended)
	var kinds []string
	for _, e := range got {
		kinds = append(kinds, dataEvent(e))
	}
	require.Equal(t, []string{"started", "running", "failed"}, kinds, "nothing of the refused batch is published")
	end := got[len(got)-1]["params"].(map[string]any)["data"].(map[string]any)
	require.Contains(t, end["error"], "namespace", "the run's error names what was refused")
	require.Error(t, <-emitErr, "emits after a refused batch fail")
}

// TestWorkerLeaves: a worker that says it leaves (DELETE /workers/{id})
// has its runs failed at once, long before its lease would run out, and
// is gone: saying it again, or renewing, is refused with 404.
func TestWorkerLeaves(t *testing.T) {
	ts, _, _ := startWith(t, server.Config{WorkerLease: time.Minute}, transport.Options{})
	wid, sc, body := rawWorker(t, ts.URL, "leaver")
	defer body.Close()
	read := watch(t, ts.URL, "bye")
	status, out := post(t, ts.URL+"/threads/bye/commands", `{"id": 1, "method": "run.start", "params": {"assistant_id": "leaver", "input": null}}`)
	require.Equal(t, 200, status, "%v", out)
	nextAssign(t, sc)

	leave := func() int {
		req, err := http.NewRequest("DELETE", ts.URL+"/workers/"+wid, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusNoContent, leave())
	got := read(ended)
	last := got[len(got)-1]["params"].(map[string]any)["data"].(map[string]any)
	require.Equal(t, "failed", last["event"])
	require.Contains(t, last["error"], "worker lost: the worker stopped")
	require.Equal(t, http.StatusNotFound, leave(), "a worker that left is gone")
	resp, err := http.Post(ts.URL+"/workers/"+wid+"/heartbeat", "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}

// TestAssistantsBelongToWhoMayServeThem: with authentication on, a
// producer without an assistants grant owns the ids it serves first, and
// another such producer cannot serve them (it would receive the first's
// users' runs); one with a grant serves what it grants and nothing else,
// and a producer without one cannot take a granted id; nobody but an
// admin serves the server's own assistants; an admin releases an id.
func TestAssistantsBelongToWhoMayServeThem(t *testing.T) {
	keys := map[string]auth.Principal{
		"k-alice":   {Subject: "alice", Producer: true},
		"k-mallory": {Subject: "mallory", Producer: true},
		"k-gina":    {Subject: "gina", Producer: true, Assistants: []string{"team-*"}},
		"k-admin":   {Subject: "root", Admin: true},
	}
	a, err := auth.New(context.Background(), auth.Config{APIKeys: keys})
	require.NoError(t, err)
	ts, _, _ := start(t, transport.Options{Auth: a})
	connect := func(key, assistants string) (int, string, io.Closer) {
		req, _ := http.NewRequest("GET", ts.URL+"/workers/connect?assistants="+assistants, nil)
		req.Header.Set("x-api-key", key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode, string(b), nil
		}
		return 200, "", resp.Body
	}
	status, _, alice := connect("k-alice", "helper")
	require.Equal(t, 200, status)
	defer alice.Close()
	status, body, _ := connect("k-mallory", "helper")
	require.Equal(t, 403, status, body)
	require.Contains(t, body, "served by another principal")
	status, body, _ = connect("k-mallory", "other,helper")
	require.Equal(t, 403, status, "all or nothing: %s", body)
	status, body, _ = connect("k-mallory", "echo")
	require.Equal(t, 403, status, "the server's own: %s", body)
	status, _, gina := connect("k-gina", "team-x")
	require.Equal(t, 200, status)
	defer gina.Close()
	status, body, _ = connect("k-gina", "helper")
	require.Equal(t, 403, status, "outside the grant: %s", body)
	status, body, _ = connect("k-mallory", "team-x")
	require.Equal(t, 403, status, "a granted id: %s", body)
	status, _, adm := connect("k-admin", "helper,echo")
	require.Equal(t, 200, status, "an admin serves anything")
	adm.Close()

	release := func(key, id string) int {
		req, _ := http.NewRequest("DELETE", ts.URL+"/workers/assistants/"+id, nil)
		req.Header.Set("x-api-key", key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, 403, release("k-mallory", "helper"))
	require.Equal(t, 204, release("k-admin", "helper"))
	require.Equal(t, 404, release("k-admin", "helper"))
	status, _, mal := connect("k-mallory", "helper")
	require.Equal(t, 200, status, "released: the next to serve it owns it")
	mal.Close()
}

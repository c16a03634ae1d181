package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentstream/agentstream/internal/testkit/redistest"
)

// TestAcknowledgedPlatformWritesSurviveKill: three clients write through
// the Platform API in a loop (thread create, patch and delete, store put
// and delete, updateState, runs.wait), the node is killed (kill -9) at a
// random moment, and every write answered 2xx is read back: on a
// --data-dir started again on the same directory, and on Redis through
// the other node. A write not answered may or may not be there; one
// answered is. Each trial's check is shown able to fail: an answered
// store item removed behind the checker's back is reported lost. A few
// trials here; AGENTSTREAM_SOAK=1 runs thirty per engine.
func TestAcknowledgedPlatformWritesSurviveKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers")
	}
	trials := 3
	if os.Getenv("AGENTSTREAM_SOAK") != "" {
		trials = 30
	}
	t.Run("disk", func(t *testing.T) {
		dir := t.TempDir()
		start := func() string {
			url, proc := startProcessNode(t, "--data-dir", dir, "--profiles", "langgraph")
			platformVictim = proc
			return url
		}
		platformKillTrials(t, trials, start, func() string { return start() })
	})
	t.Run("redis", func(t *testing.T) {
		rs := redistest.Start(t)
		n := 0
		start := func() string {
			n++
			url, proc := startProcessNode(t, "--redis", rs.URL(), "--lease-ttl", "1s", "--node-id", fmt.Sprintf("victim%d", n), "--profiles", "langgraph")
			platformVictim = proc
			return url
		}
		survivor, _ := startProcessNode(t, "--redis", rs.URL(), "--lease-ttl", "1s", "--node-id", "survivor", "--profiles", "langgraph")
		platformKillTrials(t, max(1, trials/2), start, func() string { start(); return survivor })
	})
}

// platformVictim is the process the next kill ends (set by start).
var platformVictim *exec.Cmd

// platformClient is one writer's view: what it was answered 2xx for,
// and what it sent without an answer (which may or may not be kept).
type platformClient struct {
	c            int
	runThread    string // runs.wait goes here
	stateThread  string // updateState goes here
	threads      []string
	created      map[string]bool // answered create, not answered delete
	deleted      map[string]bool // answered delete
	patched      map[string]int  // the last patch answered, per thread
	sentPatch    map[string]int  // the last patch sent
	stateAcked   int             // the last updateState answered (k)
	stateSent    int
	items        map[string]bool // answered put, not deleted since
	gone         map[string]bool // answered delete
	runsAcked    []string        // the messages of runs.wait answered
	wrongAnswers []string        // runs.wait answered with values without its message
	n            int             // the numbers the trials before used
	writes       atomic.Int64    // the writes answered 2xx
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// platformCall sends a request and reads its answer within 10 s.
func platformCall(ctx context.Context, method, url, body string) (status int, out []byte, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err = io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

// setup makes the client's two threads (each with a run, so that its
// state has a graph) on url, before any kill.
func (pc *platformClient) setup(t *testing.T, url string) {
	pc.runThread, pc.stateThread = newUUID(), newUUID()
	for _, th := range []string{pc.runThread, pc.stateThread} {
		st, out, err := platformCall(context.Background(), "POST", url+"/threads", `{"thread_id": "`+th+`"}`)
		require.NoError(t, err)
		require.Equal(t, 200, st, "%s", out)
		st, out, err = platformCall(context.Background(), "POST", url+"/threads/"+th+"/runs/wait", `{"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "setup"}]}}`)
		require.NoError(t, err)
		require.Equal(t, 200, st, "%s", out)
	}
	pc.created, pc.deleted, pc.patched, pc.sentPatch = map[string]bool{}, map[string]bool{}, map[string]int{}, map[string]int{}
	pc.items, pc.gone = map[string]bool{}, map[string]bool{}
}

// write writes against url until ctx ends or the server goes: four
// loops at once, one per kind of write (threads, state, store, runs),
// each as fast as the server answers.
func (pc *platformClient) write(ctx context.Context, url string) {
	ok := func(method, path, body string) bool {
		st, _, err := platformCall(ctx, method, url+path, body)
		return err == nil && st >= 200 && st < 300
	}
	var wg sync.WaitGroup
	loop := func(f func(i int)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; ctx.Err() == nil; i++ {
				f(i)
			}
		}()
	}
	base := pc.n       // numbers go on from the trial before
	loop(func(i int) { // threads: create, patch, and delete one made earlier
		i += base
		th := newUUID()
		if ok("POST", "/threads", fmt.Sprintf(`{"thread_id": %q, "metadata": {"c": %d, "i": %d}}`, th, pc.c, i)) {
			pc.created[th] = true
			pc.threads = append(pc.threads, th)
			pc.writes.Add(1)
		}
		if pc.created[th] {
			pc.sentPatch[th] = i
			if ok("PATCH", "/threads/"+th, fmt.Sprintf(`{"metadata": {"v": %d}}`, i)) {
				pc.patched[th] = i
				pc.writes.Add(1)
			}
		}
		if len(pc.threads) > 2 && i%3 == 0 {
			old := pc.threads[len(pc.threads)-3]
			if pc.created[old] {
				delete(pc.created, old) // sent: no longer known to be there
				if ok("DELETE", "/threads/"+old, "") {
					pc.deleted[old] = true
					pc.writes.Add(1)
				}
			}
		}
	})
	loop(func(i int) { // updateState
		i += base
		pc.stateSent = i
		if ok("POST", "/threads/"+pc.stateThread+"/state", fmt.Sprintf(`{"values": {"k": %d}}`, i)) {
			pc.stateAcked = i
			pc.writes.Add(1)
		}
	})
	loop(func(i int) { // store: put, and delete one put earlier
		i += base
		key := fmt.Sprintf("k%d", i)
		if ok("PUT", "/store/items", fmt.Sprintf(`{"namespace": ["c%d"], "key": %q, "value": {"i": %d}}`, pc.c, key, i)) {
			pc.items[key] = true
			pc.writes.Add(1)
		}
		if old := fmt.Sprintf("k%d", i-2); pc.items[old] && i%2 == 0 {
			delete(pc.items, old) // sent: no longer known to be there
			if ok("DELETE", "/store/items", fmt.Sprintf(`{"namespace": ["c%d"], "key": %q}`, pc.c, old)) {
				pc.gone[old] = true
				pc.writes.Add(1)
			}
		}
	})
	loop(func(i int) { // runs.wait
		msg := fmt.Sprintf("m-%d-%d", pc.c, i+base)
		// A run that failed is answered 200 too, with __error__: not a run
		// whose values were kept.
		st, out, err := platformCall(ctx, "POST", url+"/threads/"+pc.runThread+"/runs/wait", `{"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "`+msg+`"}]}}`)
		if err == nil && st == 200 && !bytes.Contains(out, []byte(`"__error__"`)) {
			pc.runsAcked = append(pc.runsAcked, msg)
			pc.writes.Add(1)
			if !bytes.Contains(out, []byte(`"`+msg+`"`)) { // another run's values
				pc.wrongAnswers = append(pc.wrongAnswers, msg)
			}
		}
	})
	wg.Wait()
	pc.n = base + 1_000_000 // the next trial's numbers are all greater
}

// check reads back on url everything the client was answered 2xx for;
// it returns what it found lost.
func (pc *platformClient) check(t *testing.T, url string) []string {
	var lost []string
	get := func(method, path, body string) (int, map[string]any) {
		st, out, err := platformCall(context.Background(), method, url+path, body)
		require.NoError(t, err)
		var v map[string]any
		_ = json.Unmarshal(out, &v)
		return st, v
	}
	for th := range pc.created {
		st, rec := get("GET", "/threads/"+th, "")
		if st != 200 {
			lost = append(lost, fmt.Sprintf("thread %s created: %d", th, st))
			continue
		}
		md, _ := rec["metadata"].(map[string]any)
		if v, acked := pc.patched[th]; acked {
			got, _ := md["v"].(float64)
			if int(got) < v || int(got) > pc.sentPatch[th] {
				lost = append(lost, fmt.Sprintf("thread %s patched v=%d: reads %v", th, v, md["v"]))
			}
		}
	}
	for th := range pc.deleted {
		if st, _ := get("GET", "/threads/"+th, ""); st != 404 {
			lost = append(lost, fmt.Sprintf("thread %s deleted: %d", th, st))
		}
	}
	if pc.stateAcked > 0 {
		_, state := get("GET", "/threads/"+pc.stateThread+"/state", "")
		values, _ := state["values"].(map[string]any)
		got, _ := values["k"].(float64)
		if int(got) < pc.stateAcked || int(got) > pc.stateSent {
			lost = append(lost, fmt.Sprintf("state k=%d answered: reads %v", pc.stateAcked, values["k"]))
		}
	}
	item := func(key string) bool { // a missing item is 200 null, as the Platform answers
		st, v := get("GET", fmt.Sprintf("/store/items?namespace=c%d&key=%s", pc.c, key), "")
		require.Equal(t, 200, st)
		return v != nil
	}
	for key := range pc.items {
		if !item(key) {
			lost = append(lost, fmt.Sprintf("item %s put: not there", key))
		}
	}
	for key := range pc.gone {
		if item(key) {
			lost = append(lost, fmt.Sprintf("item %s deleted: there", key))
		}
	}
	_, state := get("GET", "/threads/"+pc.runThread+"/state", "")
	raw, _ := json.Marshal(state["values"])
	for _, msg := range pc.wrongAnswers {
		lost = append(lost, fmt.Sprintf("run %s answered with values that do not hold it", msg))
	}
	for _, msg := range pc.runsAcked {
		if !bytes.Contains(raw, []byte(`"`+msg+`"`)) {
			var contents []string
			for _, m := range stateMessages(state) {
				contents = append(contents, fmt.Sprint(m["type"], ":", m["content"]))
			}
			lost = append(lost, fmt.Sprintf("run %s answered: not in the thread's values (answered %v; values %v)", msg, pc.runsAcked, contents))
		}
	}
	// The runs' records: each ended (a cut one in error, once the restart
	// or the lease's end cut it), and one in success per run answered.
	var runs []struct {
		RunID  string `json:"run_id"`
		Status string
	}
	open := ""
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st, out, err := platformCall(context.Background(), "GET", url+"/threads/"+pc.runThread+"/runs?limit=1000", "")
		require.NoError(t, err)
		require.Equal(t, 200, st, "%s", out)
		runs = nil
		require.NoError(t, json.Unmarshal(out, &runs))
		open = ""
		for _, r := range runs {
			if r.Status != "success" && r.Status != "error" {
				open = fmt.Sprintf("run record %s: %s 10 s after the kill", r.RunID, r.Status)
			}
		}
		if open == "" || time.Now().After(deadline) {
			break
		}
	}
	if open != "" {
		lost = append(lost, open)
	}
	success := 0
	for _, r := range runs {
		if r.Status == "success" {
			success++
		}
	}
	if success < len(pc.runsAcked)+1 { // and its setup run
		lost = append(lost, fmt.Sprintf("%d runs answered, %d records say success", len(pc.runsAcked)+1, success))
	}
	if len(lost) > 0 { // what the failure needs to be understood: the records, oldest first
		var statuses []string
		for _, r := range slices.Backward(runs) {
			statuses = append(statuses, r.Status)
		}
		lost = append(lost, fmt.Sprintf("the run records: %v", statuses))
	}
	return lost
}

// stateMessages are the messages of a thread's state.
func stateMessages(state map[string]any) []map[string]any {
	values, _ := state["values"].(map[string]any)
	list, _ := values["messages"].([]any)
	var out []map[string]any
	for _, m := range list {
		if mm, ok := m.(map[string]any); ok {
			out = append(out, mm)
		}
	}
	return out
}

// platformKillTrials runs the trials: writes to the node start gives,
// a kill -9, then the check on the node restart gives (the same one
// again, or another).
func platformKillTrials(t *testing.T, trials int, start func() string, restart func() string) {
	const clients = 3
	url := start()
	pcs := make([]*platformClient, clients)
	for c := range pcs {
		pcs[c] = &platformClient{c: c}
		pcs[c].setup(t, url)
	}
	for trial := 0; trial < trials; trial++ {
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for _, pc := range pcs {
			wg.Add(1)
			go func() { defer wg.Done(); pc.write(ctx, url) }()
		}
		time.Sleep(time.Duration(400+mrand.IntN(1200)) * time.Millisecond)
		require.NoError(t, platformVictim.Process.Signal(syscall.SIGKILL))
		_ = platformVictim.Wait()
		stop()
		wg.Wait()
		url = restart()
		writes := int64(0)
		for _, pc := range pcs {
			lost := pc.check(t, url)
			require.Empty(t, lost, "trial %d, client %d: answered 2xx and lost", trial, pc.c)
			writes += pc.writes.Load()
		}
		t.Logf("trial %d: %d writes answered 2xx so far, every one kept", trial, writes)
	}
	// The check can fail: an item answered, removed behind its back.
	pc := pcs[0]
	for key := range pc.items {
		st, _, err := platformCall(context.Background(), "DELETE", url+"/store/items", fmt.Sprintf(`{"namespace": ["c%d"], "key": %q}`, pc.c, key))
		require.NoError(t, err)
		require.Equal(t, 204, st)
		require.NotEmpty(t, pc.check(t, url), "the check misses an item that is gone")
		break
	}
}

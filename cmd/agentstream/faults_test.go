package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/agentstream/agentstream/internal/testkit/redistest"
	"github.com/agentstream/agentstream/internal/testkit/ssetest"
)

// faultFrame is one SSE frame a fault-test client read; conn counts the
// client's connections, so a record can be read connection by connection.
type faultFrame struct {
	conn            int
	id, event, data string
}

// TestRandomFaults: three `serve --redis` processes, runs started on random
// nodes, SSE clients that drop and resume with their last id on random
// nodes, and random faults: kill -9 of a node (started again), kill -9 of
// Redis (started again with what it acknowledged, append-only with fsync
// before each answer, or empty), Redis stalled (SIGSTOP). At the end
// every client's record is checked against Redis's streams: every event it
// got is in the stream under its id with the same content, one connection
// after another it is in order with nothing repeated, and every jump is
// announced by events.missed. It runs for AGENTSTREAM_FAULT_SECONDS (6 by
// default) with the seed AGENTSTREAM_FAULT_SEED (random by default,
// printed either way).
func TestRandomFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	t.Run("appendonly", func(t *testing.T) { randomFaults(t, true) })
	// Without persistence Redis comes back empty: what a client saw before
	// is gone from it, so only what it still holds is compared.
	t.Run("no-persistence", func(t *testing.T) { randomFaults(t, false) })
}

func randomFaults(t *testing.T, appendOnly bool) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("AGENTSTREAM_FAULT_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	seconds := 6
	if s := os.Getenv("AGENTSTREAM_FAULT_SECONDS"); s != "" {
		var err error
		seconds, err = strconv.Atoi(s)
		require.NoError(t, err)
	}
	t.Logf("seed %d (AGENTSTREAM_FAULT_SEED=%d to run it again), %d s", seed, seed, seconds)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("failed with AGENTSTREAM_FAULT_SEED=%d", seed)
		}
	})
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var rngMu sync.Mutex
	intn := func(n int) int { rngMu.Lock(); defer rngMu.Unlock(); return rng.IntN(n) }

	rs := redistest.StartWith(t, redistest.Options{AppendOnly: appendOnly})
	type node struct {
		mu   sync.Mutex
		base string
		cmd  *exec.Cmd
	}
	nodes := make([]*node, 3)
	for i := range nodes {
		base, cmd := startProcessNode(t, "--redis", rs.URL(), "--lease-ttl", "1s", "--node-id", fmt.Sprintf("n%d", i))
		nodes[i] = &node{base: base, cmd: cmd}
	}
	baseOf := func(i int) string { n := nodes[i]; n.mu.Lock(); defer n.mu.Unlock(); return n.base }
	threads := []string{"f0", "f1"}

	ctx, stop := context.WithTimeout(context.Background(), time.Duration(seconds)*time.Second)
	defer stop()
	var wg sync.WaitGroup
	every := func(min, spread time.Duration, fn func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(min + time.Duration(intn(int(spread)))):
				}
				fn()
			}
		}()
	}

	// Runs on random nodes (refused while one is going, or during a fault).
	runs := 0
	every(150*time.Millisecond, 300*time.Millisecond, func() {
		body := `{"id": 1, "method": "run.start", "params": {"assistant_id": "firehose", "input": {"count": 40, "rate": 100}}}`
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(rctx, "POST", baseOf(intn(len(nodes)))+"/threads/"+threads[intn(len(threads))]+"/commands", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if r, err := http.DefaultClient.Do(req); err == nil {
			if r.StatusCode == 200 {
				runs++
			}
			r.Body.Close()
		}
	})

	// Faults.
	var faults []string
	var faultMu sync.Mutex
	every(400*time.Millisecond, 600*time.Millisecond, func() {
		var what string
		switch intn(4) {
		case 0:
			i := intn(len(nodes))
			n := nodes[i]
			n.mu.Lock()
			_ = n.cmd.Process.Signal(syscall.SIGKILL)
			_ = n.cmd.Wait()
			n.mu.Unlock()
			time.Sleep(time.Duration(100+intn(400)) * time.Millisecond)
			base, cmd := startProcessNode(t, "--redis", rs.URL(), "--lease-ttl", "1s", "--node-id", fmt.Sprintf("n%d", i))
			n.mu.Lock()
			n.base, n.cmd = base, cmd
			n.mu.Unlock()
			what = fmt.Sprintf("kill -9 node %d", i)
		case 1:
			rs.Stop()
			time.Sleep(time.Duration(100+intn(500)) * time.Millisecond)
			rs.Restart()
			what = "kill -9 and restart Redis"
		case 2:
			d := time.Duration(200+intn(800)) * time.Millisecond
			rs.Pause()
			time.Sleep(d)
			rs.Resume()
			what = fmt.Sprintf("Redis stalled %v", d)
		default:
			return
		}
		faultMu.Lock()
		faults = append(faults, what)
		faultMu.Unlock()
	})

	// Clients: each reads one thread, from random nodes in turn, resuming
	// with the last id it read.
	records := make([][]faultFrame, 4)
	for c := range records {
		thread := threads[c%len(threads)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			ssetest.Follow(ctx, func(int) (context.Context, context.CancelFunc, string) {
				rctx, cancel := context.WithTimeout(ctx, time.Duration(200+intn(1500))*time.Millisecond)
				return rctx, cancel, baseOf(intn(len(nodes))) + "/threads/" + thread + "/stream"
			}, func(conn int, f ssetest.Frame) bool {
				if f.Event != "error" {
					records[c] = append(records[c], faultFrame{conn: conn, id: f.ID, event: f.Event, data: f.Data})
				}
				return true
			})
		}()
	}
	wg.Wait()
	faultMu.Lock()
	t.Logf("%d runs started; faults: %s", runs, strings.Join(faults, ", "))
	faultMu.Unlock()

	// What Redis holds, by id.
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{rs.Addr}, DisableCache: true})
	require.NoError(t, err)
	defer rc.Close()
	held := map[string]string{}
	for _, th := range threads {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		entries, err := rc.Do(rctx, rc.B().Xrange().Key("agentstream:{"+th+"}:events").Start("-").End("+").Build()).AsXRange()
		cancel()
		require.NoError(t, err)
		for _, en := range entries {
			var m struct {
				EventID string `json:"event_id"`
			}
			require.NoError(t, json.Unmarshal([]byte(en.FieldValues["e"]), &m))
			held[m.EventID] = en.FieldValues["e"]
		}
	}

	counts := make([]int, len(records))
	for c, rec := range records {
		for _, f := range rec {
			if f.id != "" {
				counts[c]++
			}
		}
		checkFaultRecord(t, c, rec, held, appendOnly)
	}
	t.Logf("events read by each client: %v; Redis holds %d", counts, len(held))
	require.Positive(t, min(counts[0], counts[1], counts[2], counts[3]), "every client read events")
}

// checkFaultRecord checks one client's record against what Redis holds:
// every event is there (allHeld: Redis kept everything) or at least not
// under its id with other content; from one event
// to the next (across the client's connections too) the sequence goes up
// by one in the same epoch, unless events.missed came between (a reset
// starts the stream again; a new epoch going on with the next sequence
// number is no jump); the first event of a connection without a cursor
// starts anywhere.
func checkFaultRecord(t *testing.T, c int, rec []faultFrame, held map[string]string, allHeld bool) {
	t.Helper()
	var epoch string
	var seq int
	known := false                 // epoch and seq say where the client stands
	allowed := false               // events.missed since the last event
	around := func(i int) string { // the frames before i, for the message
		var b strings.Builder
		for j := max(0, i-6); j <= i; j++ {
			d := rec[j].data
			if len(d) > 160 {
				d = d[:160]
			}
			fmt.Fprintf(&b, "\n  conn %d id %s %s %s", rec[j].conn, rec[j].id, rec[j].event, d)
		}
		return b.String()
	}
	for i, f := range rec {
		if f.event == "events.missed" {
			allowed = true
			if strings.Contains(f.data, `"reset":true`) {
				known = false
			}
			continue
		}
		if f.id == "" {
			continue
		}
		want, ok := held[f.id]
		require.True(t, ok || !allHeld, "client %d, frame %d: event %s is not in Redis:%s", c, i, f.id, around(i))
		if ok {
			require.Equal(t, want, f.data, "client %d, frame %d: event %s names another event in Redis", c, i, f.id)
		}
		ep, s, _ := strings.Cut(f.id, "-")
		n, err := strconv.Atoi(s)
		require.NoError(t, err)
		if known {
			// A stream taken over in a new epoch goes on with the next
			// sequence number: that is no gap (TailClaimer). After an
			// events.missed it may go on further on (the events Redis lost
			// in between, announced), still above what the client had.
			if ep != epoch && !allowed {
				require.Equal(t, seq+1, n, "client %d, frame %d: another epoch, not going on from %s-%d, without a reset notice:%s", c, i, epoch, seq, around(i))
			}
			if allowed {
				require.Greater(t, n, seq, "client %d, frame %d: %s repeats or goes back:%s", c, i, f.id, around(i))
			} else {
				require.Equal(t, seq+1, n, "client %d, frame %d: %s after %s-%d without events.missed:%s", c, i, f.id, epoch, seq, around(i))
			}
		}
		epoch, seq, known, allowed = ep, n, true, false
	}
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAcknowledgedBatchesSurviveKill: producers post 20-event batches to
// a server on --data-dir in a tight loop, each batch sent again (same
// producer, same batch number) until it is acknowledged; the server is
// killed (kill -9) at a random moment and started again on the same
// directory, and each producer sends its unacknowledged batch again:
// every event of every batch acknowledged is in the thread's history
// once, in the order the producer sent it, and no event twice; the last
// batch acknowledged, sent again after the restart, is answered as a
// duplicate with the seqs of its first answer. Three
// trials here; AGENTSTREAM_SOAK=1 runs thirty.
func TestAcknowledgedBatchesSurviveKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers")
	}
	trials := 3
	if os.Getenv("AGENTSTREAM_SOAK") != "" {
		trials = 30
	}
	dir := t.TempDir()
	url, proc := startProcessNode(t, "--data-dir", dir, "--ingest-rate", "1000000", "--ingest-burst", "1000000")
	const producers, perBatch = 2, 20
	acked := make([][]int, producers) // per producer: the payload numbers of acknowledged events, in order
	next := make([]int, producers)    // per producer: the next payload number
	batchSeq := make([]int, producers)
	inFlight := make([]int, producers) // per producer: the first payload of the batch not acknowledged yet (-1: none)
	for p := range inFlight {
		inFlight[p] = -1
	}
	var retried, duplicates int
	lastSeqs := make([][]uint64, producers) // per producer: the seqs of its last acknowledged batch
	// post sends producer p's batch of payloads first.. as batch seq; it
	// reports whether the server acknowledged it (and as a duplicate).
	post := func(ctx context.Context, url string, p, first, seq int) (ok, duplicate bool, seqs []uint64, err error) {
		var b strings.Builder
		for i := 0; i < perBatch; i++ {
			fmt.Fprintf(&b, `{"type":"event","method":"custom","params":{"namespace":[],"data":{"name":"p%d","payload":{"n":%d}}}}`+"\n", p, first+i)
		}
		req, _ := http.NewRequestWithContext(ctx, "POST", url+"/threads/acks/events", strings.NewReader(b.String()))
		req.Header.Set("Content-Type", "application/x-ndjson")
		req.Header.Set("Agentstream-Producer", "p"+strconv.Itoa(p))
		req.Header.Set("Agentstream-Producer-Seq", strconv.Itoa(seq))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, false, nil, err // the server is gone
		}
		var res struct {
			Seqs      []uint64
			Duplicate bool
		}
		decodeErr := json.NewDecoder(resp.Body).Decode(&res)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || decodeErr != nil {
			return false, false, nil, nil // not acknowledged (the kill may cut the answer short)
		}
		if len(res.Seqs) != perBatch {
			t.Errorf("a batch of %d events was given %d seqs (duplicate %v)", perBatch, len(res.Seqs), res.Duplicate)
		}
		return true, res.Duplicate, res.Seqs, nil
	}
	for trial := 0; trial < trials; trial++ {
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var mu sync.Mutex
		for p := 0; p < producers; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					mu.Lock()
					if inFlight[p] < 0 {
						inFlight[p] = next[p]
						next[p] += perBatch
						batchSeq[p]++
					}
					first, seq := inFlight[p], batchSeq[p]
					mu.Unlock()
					ok, _, seqs, err := post(ctx, url, p, first, seq)
					if err != nil {
						return
					}
					if !ok {
						continue // sent again, the same batch
					}
					mu.Lock()
					for i := 0; i < perBatch; i++ {
						acked[p] = append(acked[p], first+i)
					}
					inFlight[p] = -1
					lastSeqs[p] = seqs
					mu.Unlock()
				}
			}()
		}
		time.Sleep(time.Duration(300+rand.IntN(900)) * time.Millisecond)
		require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
		_ = proc.Wait()
		stop()
		wg.Wait()
		url, proc = startProcessNode(t, "--data-dir", dir, "--ingest-rate", "1000000", "--ingest-burst", "1000000")

		// Each batch the kill left unacknowledged is sent again: appended
		// now, or answered as a duplicate when it was kept before.
		for p := 0; p < producers; p++ {
			if inFlight[p] < 0 {
				continue
			}
			ok, dup, seqs, err := post(context.Background(), url, p, inFlight[p], batchSeq[p])
			require.NoError(t, err)
			lastSeqs[p] = seqs
			require.True(t, ok, "trial %d: producer %d's retry after the restart was not acknowledged", trial, p)
			retried++
			if dup {
				duplicates++
			}
			for i := 0; i < perBatch; i++ {
				acked[p] = append(acked[p], inFlight[p]+i)
			}
			inFlight[p] = -1
		}
		// The last acknowledged batch, sent again, is recognised: the
		// same seqs as its first answer, nothing appended.
		for p := 0; p < producers; p++ {
			if batchSeq[p] == 0 {
				continue
			}
			ok, dup, seqs, err := post(context.Background(), url, p, next[p]-perBatch, batchSeq[p])
			require.NoError(t, err)
			require.True(t, ok && dup, "trial %d: producer %d's last batch sent again after the restart: not answered as a duplicate", trial, p)
			require.Equal(t, lastSeqs[p], seqs, "trial %d: producer %d: a duplicate's seqs differ from the first answer's", trial, p)
		}

		// The whole history, read back: each producer's events by payload.
		hctx, hcancel := context.WithTimeout(context.Background(), 3*time.Second)
		req, _ := http.NewRequestWithContext(hctx, "POST", url+"/threads/acks/stream", strings.NewReader(`{"channels": ["custom"]}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		stored := make([][]int, producers)
		eachFrame(resp.Body, func(_, data string) {
			var e struct {
				Params struct {
					Data struct {
						Name    string
						Payload struct{ N int }
					}
				}
			}
			if json.Unmarshal([]byte(data), &e) == nil && strings.HasPrefix(e.Params.Data.Name, "p") {
				p, _ := strconv.Atoi(e.Params.Data.Name[1:])
				stored[p] = append(stored[p], e.Params.Data.Payload.N)
			}
		})
		resp.Body.Close()
		hcancel()
		for p := 0; p < producers; p++ {
			has := map[int]int{} // payload -> position in the history
			for i, n := range stored[p] {
				_, twice := has[n]
				require.False(t, twice, "trial %d: producer %d's event %d is in the history twice", trial, p, n)
				has[n] = i
			}
			last := -1
			for _, n := range acked[p] {
				pos, ok := has[n]
				require.True(t, ok, "trial %d: producer %d's acknowledged event %d was lost (%d acknowledged, %d stored)", trial, p, n, len(acked[p]), len(stored[p]))
				require.Greater(t, pos, last, "trial %d: producer %d's events out of order", trial, p)
				last = pos
			}
			require.Len(t, stored[p], len(acked[p]), "trial %d: producer %d: events stored that were never acknowledged", trial, p)
		}
		t.Logf("trial %d: %d and %d events acknowledged, all kept once", trial, len(acked[0]), len(acked[1]))
	}
	t.Logf("%d batches sent again after a restart, %d of them answered as duplicates", retried, duplicates)
}

// TestAcknowledgedBatchesSurviveANodeKill: two nodes on one Redis; a
// producer posts 20-event batches to one in a tight loop, each sent
// again until acknowledged; that node is killed (kill -9) and the
// producer goes on with the other node, sending its unacknowledged batch
// there first (while the dead node's lease lasts it is refused, and sent
// again): every acknowledged event is in the thread once, in order, and
// the last batch, sent once more, is answered as a duplicate with its
// first answer's seqs.
func TestAcknowledgedBatchesSurviveANodeKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers")
	}
	_, victim, proc, survivor, cancel, done := victimAndSurvivorNodes(t)
	const perBatch = 20
	post := func(url string, first, seq int) (status int, seqs []uint64, duplicate bool) {
		var b strings.Builder
		for i := 0; i < perBatch; i++ {
			fmt.Fprintf(&b, `{"type":"event","method":"custom","params":{"namespace":[],"data":{"name":"p","payload":{"n":%d}}}}`+"\n", first+i)
		}
		ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
		defer stop()
		req, _ := http.NewRequestWithContext(ctx, "POST", url+"/threads/nodeacks/events", strings.NewReader(b.String()))
		req.Header.Set("Content-Type", "application/x-ndjson")
		req.Header.Set("Agentstream-Producer", "p")
		req.Header.Set("Agentstream-Producer-Seq", strconv.Itoa(seq))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil, false
		}
		defer resp.Body.Close()
		var res struct {
			Seqs      []uint64
			Duplicate bool
		}
		if json.NewDecoder(resp.Body).Decode(&res) != nil {
			return 0, nil, false
		}
		return resp.StatusCode, res.Seqs, res.Duplicate
	}
	var acked []int
	var lastSeqs []uint64
	seq, next := 0, 0
	stop := time.After(time.Duration(400+rand.IntN(600)) * time.Millisecond)
	inFlight := -1
loop:
	for {
		select {
		case <-stop:
			break loop
		default:
		}
		if inFlight < 0 {
			inFlight, next, seq = next, next+perBatch, seq+1
		}
		status, seqs, _ := post(victim, inFlight, seq)
		if status == http.StatusOK {
			for i := 0; i < perBatch; i++ {
				acked = append(acked, inFlight+i)
			}
			lastSeqs, inFlight = seqs, -1
		}
	}
	// The kill lands while a batch is on its way to the victim.
	posted := make(chan struct{})
	if inFlight < 0 {
		inFlight, next, seq = next, next+perBatch, seq+1
	}
	go func() {
		defer close(posted)
		if status, seqs, _ := post(victim, inFlight, seq); status == http.StatusOK {
			lastSeqs = seqs // acknowledged before the kill: kept, and a duplicate below
		}
	}()
	time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
	require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
	_ = proc.Wait()
	<-posted
	deadline := time.Now().Add(15 * time.Second)
	for {
		status, seqs, _ := post(survivor, inFlight, seq)
		if status == http.StatusOK {
			lastSeqs = seqs
			break
		}
		require.True(t, time.Now().Before(deadline), "the survivor never took the batch (last status %d)", status)
		time.Sleep(50 * time.Millisecond)
	}
	for i := 0; i < perBatch; i++ {
		acked = append(acked, inFlight+i)
	}
	status, seqs, dup := post(survivor, inFlight, seq)
	require.Equal(t, http.StatusOK, status)
	require.True(t, dup, "the last batch, once more: a duplicate")
	require.Equal(t, lastSeqs, seqs, "with its first answer's seqs")

	ctx, stopRead := context.WithTimeout(context.Background(), 5*time.Second)
	defer stopRead()
	req, _ := http.NewRequestWithContext(ctx, "POST", survivor+"/threads/nodeacks/stream", strings.NewReader(`{"channels": ["custom"]}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var stored []int
	eachFrame(resp.Body, func(_, data string) {
		var e struct {
			Params struct {
				Data struct{ Payload struct{ N int } }
			}
		}
		if json.Unmarshal([]byte(data), &e) == nil {
			stored = append(stored, e.Params.Data.Payload.N)
			if len(stored) == len(acked) {
				time.AfterFunc(300*time.Millisecond, stopRead) // anything more would come by then
			}
		}
	})
	resp.Body.Close()
	require.Equal(t, acked, stored, "every acknowledged event once, in order, and nothing else")
	t.Logf("%d events acknowledged across the kill, all kept once", len(acked))
	cancel()
	require.Equal(t, 0, <-done)
}

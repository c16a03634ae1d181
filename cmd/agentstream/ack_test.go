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
// a server on --data-dir in a tight loop; the server is killed (kill -9)
// at a random moment and started again on the same directory: every
// event of every batch it acknowledged (200) is in the thread's history,
// in the order the producer sent it. Three trials here;
// AGENTSTREAM_SOAK=1 runs thirty.
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
					first := next[p]
					next[p] += perBatch
					batchSeq[p]++
					seq := batchSeq[p]
					mu.Unlock()
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
						return // the server is gone
					}
					var res struct{ Seqs []uint64 }
					decodeErr := json.NewDecoder(resp.Body).Decode(&res)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK || decodeErr != nil {
						continue // not acknowledged (the kill may cut the answer short)
					}
					if len(res.Seqs) != perBatch {
						t.Errorf("a batch of %d events was given %d seqs", perBatch, len(res.Seqs))
					}
					mu.Lock()
					for i := 0; i < perBatch; i++ {
						acked[p] = append(acked[p], first+i)
					}
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
				has[n] = i
			}
			last := -1
			for _, n := range acked[p] {
				pos, ok := has[n]
				require.True(t, ok, "trial %d: producer %d's acknowledged event %d was lost (%d acknowledged, %d stored)", trial, p, n, len(acked[p]), len(stored[p]))
				require.Greater(t, pos, last, "trial %d: producer %d's events out of order", trial, p)
				last = pos
			}
		}
		t.Logf("trial %d: %d and %d events acknowledged, all kept", trial, len(acked[0]), len(acked[1]))
	}
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestKillDuringPublishOnDisk: a server on --data-dir is killed (kill -9)
// while a producer publishes about 5,000 events/s and a client streams
// them; restarted on the same directory, no id names two different
// events: every event the client saw that the store still has is the
// same, byte for byte; the client resuming with its cursor gets the reset
// notice (the store was not closed cleanly, its threads go on in new
// epochs); and the stream goes on.
func TestKillDuringPublishOnDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers")
	}
	dir := t.TempDir()
	url, proc := startProcessNode(t, "--data-dir", dir, "--ingest-rate", "100000", "--ingest-burst", "100000")
	const thread = "crash1"

	// The client: every event it gets, by id.
	seen := map[string]string{}
	var mu sync.Mutex
	var last string
	read := func(ctx context.Context, base, cursor string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"/threads/"+thread+"/stream", strings.NewReader(`{"channels": ["custom"]}`))
		req.Header.Set("Content-Type", "application/json")
		if cursor != "" {
			req.Header.Set("Last-Event-ID", cursor)
		}
		return http.DefaultClient.Do(req)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := read(ctx, url, "")
	require.NoError(t, err)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		eachFrame(resp.Body, func(id, data string) {
			mu.Lock()
			seen[id], last = data, id
			mu.Unlock()
		})
	}()

	// The producer: batches of 50 every 10 ms.
	pubCtx, stopPub := context.WithCancel(ctx)
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		for n := 0; pubCtx.Err() == nil; n++ {
			var b bytes.Buffer
			for i := 0; i < 50; i++ {
				fmt.Fprintf(&b, `{"type":"event","method":"custom","params":{"namespace":[],"data":{"name":"tick","payload":{"n":%d}}}}`+"\n", n*50+i)
			}
			req, _ := http.NewRequestWithContext(pubCtx, "POST", url+"/threads/"+thread+"/events", &b)
			req.Header.Set("Content-Type", "application/x-ndjson")
			if r, err := http.DefaultClient.Do(req); err == nil {
				r.Body.Close()
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) > 3000 }, 20*time.Second, 10*time.Millisecond)
	require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
	_ = proc.Wait()
	stopPub()
	<-pubDone
	<-readerDone
	mu.Lock()
	cursor := last
	mu.Unlock()

	url2, _ := startProcessNode(t, "--data-dir", dir)
	// Resumed with its cursor: the reset notice (another epoch now).
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	r, err := read(rctx, url2, cursor)
	require.NoError(t, err)
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	reset := false
	for sc.Scan() && !reset {
		reset = strings.HasPrefix(sc.Text(), "data: ") && strings.Contains(sc.Text(), `"events.missed"`) && strings.Contains(sc.Text(), `"reset":true`)
	}
	r.Body.Close()
	require.True(t, reset, "the cursor of the lost epoch gets the reset notice")

	// What the store holds now: every id the client saw is the same event.
	fctx, fcancel := context.WithTimeout(ctx, 2*time.Second)
	defer fcancel()
	all, err := read(fctx, url2, "")
	require.NoError(t, err)
	stored := map[string]string{}
	eachFrame(all.Body, func(id, data string) { stored[id] = data })
	all.Body.Close()
	kept := 0
	for id, data := range seen {
		if s, ok := stored[id]; ok {
			require.Equal(t, data, s, "id %s names one event", id)
			kept++
		}
	}
	t.Logf("the client saw %d events, the store kept %d of them", len(seen), kept)
	require.Greater(t, kept, len(seen)-2000, "at most the last group commits were lost")

	// The stream goes on, in a new epoch.
	b := strings.NewReader(`[{"type":"event","method":"custom","params":{"namespace":[],"data":{"name":"tick","payload":{"n":-1}}}}]`)
	pr, err := http.Post(url2+"/threads/"+thread+"/events", "application/json", b)
	require.NoError(t, err)
	defer pr.Body.Close()
	require.Equal(t, 200, pr.StatusCode)
}

// eachFrame calls fn with the id and data of each SSE frame that has an
// id, until r ends.
func eachFrame(r io.Reader, fn func(id, data string)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	id := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			id = line[4:]
		case strings.HasPrefix(line, "data: ") && id != "":
			fn(id, line[6:])
			id = ""
		}
	}
}

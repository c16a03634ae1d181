package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentstream/agentstream/diskstore"
	"github.com/agentstream/agentstream/internal/testkit/ssetest"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/stretchr/testify/require"
)

// TestDataCommands: `agentstream data` reports a store's threads, events
// and bytes, compacts it, and exports a thread as NDJSON without seq and
// event_id (a producer's batch); it refuses a store a server holds, and
// bad usage.
func TestDataCommands(t *testing.T) {
	dir := t.TempDir()
	eng, err := diskstore.Open(diskstore.Options{Dir: dir})
	require.NoError(t, err)
	srv := server.New(server.Config{Engine: eng})
	name := "note"
	b := server.ProducerBatch{}
	for i := 0; i < 3; i++ {
		b.Events = append(b.Events, protocol.ProducerEvent{Event: &protocol.ServerEventCustom{Params: protocol.EventCustomParams{
			Namespace: protocol.Namespace{}, Data: protocol.CustomData{Name: &name, Payload: i}}}})
	}
	_, err = srv.Publish(context.Background(), "exp", b)
	require.NoError(t, err)

	do := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"data"}, args...), &out, &errOut, nil)
		return code, out.String(), errOut.String()
	}
	code, _, stderr := do("--data-dir", dir, "stats")
	require.Equal(t, 1, code, "held by the running server")
	require.Contains(t, stderr, "is a server running on it?")
	require.NoError(t, srv.Close(context.Background()))

	code, out, stderr := do("--data-dir", dir, "stats")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "threads 1\nevents 3\n")
	code, _, stderr = do("--data-dir", dir, "compact")
	require.Equal(t, 0, code, stderr)
	code, out, stderr = do("--data-dir", dir, "export", "exp")
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3)
	for i, l := range lines {
		var ev map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &ev))
		require.NotContains(t, ev, "seq")
		require.NotContains(t, ev, "event_id")
		require.Equal(t, float64(i), ev["params"].(map[string]any)["data"].(map[string]any)["payload"])
	}
	code, _, _ = do("--data-dir", dir, "export")
	require.Equal(t, 2, code)

	// One thread's figures; flags after the command too.
	code, out, stderr = do("stats", "exp", "--data-dir", dir)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "events 3\nfirst 1\nlast 3\n", out)
	code, out, _ = do("export", "--data-dir", dir, "exp")
	require.Equal(t, 0, code)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 3)
	// A thread the store does not hold: an error naming it, exit 1.
	for _, cmd := range []string{"export", "stats"} {
		code, out, stderr = do("--data-dir", dir, cmd, "nosuch")
		require.Equal(t, 1, code, cmd)
		require.Empty(t, out, cmd)
		require.Contains(t, stderr, `no such thread: "nosuch"`, cmd)
	}
	code, _, _ = do("--data-dir", dir, "compact", "exp")
	require.Equal(t, 2, code, "compact takes no thread")
	code, _, _ = do("stats")
	require.Equal(t, 2, code, "no --data-dir")
}

// TestDamagedCommitLog: a server killed after twenty acknowledged batches
// leaves them in its commit log; eight bytes flipped in the middle of it
// make the store refused, by serve and by `data check`, naming the file
// and the offset; `data repair` keeps every commit it can read, and the
// store opens again.
func TestDamagedCommitLog(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	dir := t.TempDir()
	url, proc := startProcessNode(t, "--data-dir", dir)
	publishPadded(t, url, "dmg", 20, 200)
	require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
	_ = proc.Wait()
	segs, err := filepath.Glob(filepath.Join(dir, "commits", "*.log"))
	require.NoError(t, err)
	require.Len(t, segs, 1)
	b, err := os.ReadFile(segs[0])
	require.NoError(t, err)
	// The commit log's records end where the last commit ended; the rest
	// of the file (a new one's) is zeros. Flip eight bytes in the middle.
	end := len(bytes.TrimRight(b, "\x00"))
	require.Greater(t, end, 2000, "twenty commits are in it")
	for i := end / 2; i < end/2+8; i++ {
		b[i] ^= 0xa5
	}
	require.NoError(t, os.WriteFile(segs[0], b, 0o640))

	do := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), args, &out, &errOut, nil)
		return code, out.String(), errOut.String()
	}
	code, _, stderr := do("data", "--data-dir", dir, "check")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "damaged")
	require.Contains(t, stderr, filepath.Base(segs[0])+" offset ")
	require.Contains(t, stderr, "repair")
	code, _, stderr = do("serve", "--addr", "127.0.0.1:0", "--data-dir", dir)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "--data-repair")

	code, out, stderr := do("data", "--data-dir", dir, "repair")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "could not be read and are lost")
	code, out, stderr = do("data", "--data-dir", dir, "check")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "no damage found\n", out)
	code, out, _ = do("data", "--data-dir", dir, "stats", "dmg")
	require.Equal(t, 0, code)
	var events, first, last int
	_, err = fmt.Sscanf(out, "events %d\nfirst %d\nlast %d\n", &events, &first, &last)
	require.NoError(t, err)
	require.Equal(t, 20, last, "the commits after the damage are kept")
	require.Less(t, events, 20, "the damaged one is lost")

	// A reader of the repaired thread is told of the hole, then gets
	// the rest in order.
	url, _ = startProcessNode(t, "--data-dir", dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/threads/dmg/stream", strings.NewReader(`{"channels": ["custom"]}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	prev, notices := uint64(0), 0
	require.NoError(t, ssetest.Scan(bufio.NewReader(resp.Body), func(f ssetest.Frame) bool {
		var m struct {
			Seq    uint64
			Params struct {
				Data struct {
					Since             uint64 `json:"since"`
					FirstAvailableSeq uint64 `json:"first_available_seq"`
				}
			}
		}
		require.NoError(t, json.Unmarshal([]byte(f.Data), &m))
		if f.Event == "events.missed" {
			require.Equal(t, prev, m.Params.Data.Since)
			prev = m.Params.Data.FirstAvailableSeq - 1
			notices++
		} else {
			require.Equal(t, prev+1, m.Seq, "in order; a hole only after its notice")
			prev = m.Seq
		}
		return prev < 20
	}))
	require.Positive(t, notices, "the lost commit's events are announced")
}

// publishPadded publishes n custom events into thread, each padded with
// pad bytes, one batch each.
func publishPadded(t *testing.T, url, thread string, n, pad int) {
	t.Helper()
	for i := 0; i < n; i++ {
		b := strings.NewReader(fmt.Sprintf(`[{"type":"event","method":"custom","params":{"namespace":[],"data":{"name":"n","payload":{"i":%d,"pad":"%s"}}}}]`, i, strings.Repeat("x", pad)))
		resp, err := http.Post(url+"/threads/"+thread+"/events", "application/json", b)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentstream/agentstream/diskstore"
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

package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestServeAndGracefulShutdown starts `agentstream serve` on a free port,
// streams an echo run over SSE, and stops it as SIGINT would.
func TestServeAndGracefulShutdown(t *testing.T) {
	t.Setenv("AGENTSTREAM_LOG_FORMAT", "json")
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	var logs bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--heartbeat", "100ms"}, io.Discard, &logs, ready)
	}()
	var addr string
	select {
	case addr = <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("server did not start")
	}
	base := "http://" + addr
	resp, err := http.Post(base+"/threads/t/stream", "application/json", strings.NewReader(`{"channels": ["messages"]}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	r, err := http.Post(base+"/threads/t/commands", "application/json", strings.NewReader(`{"id": 1, "method": "run.start", "params": {"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "hi"}]}}}`))
	require.NoError(t, err)
	r.Body.Close()
	require.Equal(t, 200, r.StatusCode)
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		if line == "event: messages\n" {
			break // heartbeats may come first
		}
	}
	cancel() // as SIGINT does
	select {
	case code := <-done:
		require.Equal(t, 0, code, logs.String())
	case <-time.After(15 * time.Second):
		t.Fatal("no graceful shutdown")
	}
	_, err = io.ReadAll(br)
	require.NoError(t, err, "the open stream ended cleanly")
	require.Contains(t, logs.String(), `"message":"stopped"`)
}

func TestUsageAndBadFlags(t *testing.T) {
	var stderr bytes.Buffer
	require.Equal(t, 2, run(context.Background(), nil, io.Discard, &stderr, nil))
	require.Contains(t, stderr.String(), "usage")
	t.Setenv("AGENTSTREAM_LOG_LEVEL", "loud")
	stderr.Reset()
	require.Equal(t, 2, run(context.Background(), []string{"serve"}, io.Discard, &stderr, nil))
	require.Contains(t, stderr.String(), "log level")
}

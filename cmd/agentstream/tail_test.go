package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/agentstream/agentstream/client"
	"github.com/agentstream/agentstream/protocol"
	"github.com/stretchr/testify/require"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/*.golden")

// maskTail hides what changes from run to run in tail's output: times and
// generated ids.
func maskTail(s string) string {
	s = regexp.MustCompile(`\b\d\d:\d\d:\d\d\.\d\d\d\b`).ReplaceAllString(s, "HH:MM:SS.mmm")
	return regexp.MustCompile(`(run|int|ckpt|msg)_[0-9a-f]+`).ReplaceAllString(s, "${1}_X")
}

// runDemoAnswered starts demo on thread, approves its interrupt, and
// returns once the answer is sent.
func runDemoAnswered(t *testing.T, base, thread string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, base, client.Options{})
	require.NoError(t, err)
	defer c.Close()
	th := c.Thread(thread)
	sub, err := th.Subscribe(ctx, client.Filter{Channels: []string{"input"}})
	require.NoError(t, err)
	defer sub.Close()
	_, err = th.Run.Start(ctx, protocol.RunStartParams{AssistantID: "demo", Input: map[string]any{"messages": []any{map[string]any{"role": "user", "content": "What is agentstream?"}}}})
	require.NoError(t, err)
	for {
		e, err := sub.Next(ctx)
		require.NoError(t, err)
		if in, ok := e.Payload.(*protocol.ServerEventInputRequested); ok {
			require.NoError(t, th.Input.RespondOne(ctx, in.Params.Namespace, in.Params.Data.InterruptID, map[string]any{"approved": true}))
			return
		}
	}
}

// TestTailGolden: tail's readable output for the demo run (approved)
// matches testdata/tail-demo.golden, times and ids masked; --until-done
// exits 0 when the run completes; --json prints the events as received.
func TestTailGolden(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, done := startServe(t, ctx, io.Discard)
	base := "http://" + addr
	for _, tr := range []string{"websocket", "sse"} {
		t.Run(tr, func(t *testing.T) {
			thread := "tail-" + tr
			runDemoAnswered(t, base, thread)
			var out, errb bytes.Buffer
			code := run(context.Background(), []string{"tail", base, thread, "--until-done", "--transport", tr}, &out, &errb, nil)
			require.Equal(t, 0, code, errb.String())
			got := maskTail(out.String())
			const golden = "testdata/tail-demo.golden"
			if *updateGolden {
				require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err)
			require.Equal(t, string(want), got)
		})
	}
	// --json: one JSON event per line; --channels narrows; --since skips.
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"tail", base, "tail-websocket", "--json", "--channels", "lifecycle", "--until-done", "--since", "3"}, &out, &errb, nil)
	require.Equal(t, 0, code, errb.String())
	lines := bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n"))
	require.NotEmpty(t, lines)
	for _, l := range lines {
		require.Contains(t, string(l), `"method":"lifecycle"`)
		require.NotContains(t, string(l), `"seq":1,`)
		require.NotContains(t, string(l), `"seq":2,`)
	}
	// Bad usage and an unreachable server.
	require.Equal(t, 2, run(context.Background(), []string{"tail", base}, io.Discard, io.Discard, nil))
	require.Equal(t, 1, run(context.Background(), []string{"tail", "http://127.0.0.1:1", "x"}, io.Discard, io.Discard, nil))
	cancel()
	require.Equal(t, 0, <-done)
}

package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/client"
	"github.com/agentstream/agentstream/internal/testkit/wiretest"
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
	started, err := th.Run.Start(ctx, protocol.RunStartParams{AssistantID: "demo", Input: map[string]any{"messages": []any{map[string]any{"role": "user", "content": "What is agentstream?"}}}})
	require.NoError(t, err)
	for {
		e, err := sub.Next(ctx)
		require.NoError(t, err)
		if e.Seq <= started.AppliedThroughSeq {
			continue // an earlier run's (the replay)
		}
		if in, ok := e.Payload.(*protocol.ServerEventInputRequested); ok {
			require.NoError(t, th.Input.RespondOne(ctx, in.Params.Namespace, in.Params.Data.InterruptID, map[string]any{"approved": true}))
			return
		}
	}
}

// tailWhile runs tail with args, and then, once tail has attached, start
// (which starts the run tail is to follow); it returns tail's exit code.
func tailWhile(t *testing.T, args []string, out, errb *bytes.Buffer, start func()) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := args[1]
	if !strings.HasPrefix(base, "http") {
		base = "http://" + base
	}
	subscribed := wiretest.Metric(t, base, "agentstream_subscribes_total")
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, out, errb, nil) }()
	// Attached: a run that starts later, or is under way as it attaches,
	// is the one it follows.
	wiretest.WaitMetricAbove(t, base, "agentstream_subscribes_total", subscribed)
	start()
	return <-done
}

// TestTailUntilDoneWaitsForTheNewRun: on a thread with three finished
// runs, --until-done exits at the end of the run started after it
// attached, not at the first end its replay holds.
func TestTailUntilDoneWaitsForTheNewRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, done := startServe(t, ctx, io.Discard)
	base := "http://" + addr
	c, err := client.Dial(ctx, base, client.Options{})
	require.NoError(t, err)
	defer c.Close()
	th := c.Thread("three-before")
	echo := func(text string, delay float64) *client.Started {
		s, err := th.Run.Start(ctx, protocol.RunStartParams{AssistantID: "echo", Input: map[string]any{"messages": []any{map[string]any{"role": "user", "content": text}}}, Config: map[string]any{"token_delay_ms": delay}})
		require.NoError(t, err)
		return s
	}
	sub, err := th.Subscribe(ctx, client.Filter{Channels: []string{"lifecycle"}})
	require.NoError(t, err)
	for i, text := range []string{"first", "second", "third"} {
		started := echo(text, 0)
		require.Equal(t, "run_", started.RunID[:4])
		for {
			e, err := sub.Next(ctx)
			require.NoError(t, err)
			if e.RunEndAfter(started.AppliedThroughSeq) != "" {
				break
			}
		}
		t.Logf("run %d (%s) ended", i+1, text)
	}
	sub.Close()
	for _, tr := range []string{"websocket", "sse"} {
		var out, errb bytes.Buffer
		code := tailWhile(t, []string{"tail", addr, "three-before", "--until-done", "--transport", tr}, &out, &errb, func() { echo("fourth and last words here", 50) })
		require.Equal(t, 0, code, errb.String())
		require.Contains(t, out.String(), "ai: fourth and last words here", "it waited for the new run's message")
	}
	// A thread with nothing yet is said to be waiting.
	var out, errb bytes.Buffer
	code := tailWhile(t, []string{"tail", addr, "fresh", "--until-done"}, &out, &errb, func() {
		_, err := c.Thread("fresh").Run.Start(ctx, protocol.RunStartParams{AssistantID: "echo", Input: map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}}})
		require.NoError(t, err)
	})
	require.Equal(t, 0, code, errb.String())
	require.Contains(t, errb.String(), "thread fresh has no events yet; waiting for a run")
	cancel()
	require.Equal(t, 0, <-done)
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
			var out, errb bytes.Buffer
			code := tailWhile(t, []string{"tail", base, thread, "--until-done", "--transport", tr}, &out, &errb, func() { runDemoAnswered(t, base, thread) })
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
	code := tailWhile(t, []string{"tail", base, "tail-websocket", "--json", "--channels", "lifecycle", "--until-done", "--since", "3"}, &out, &errb, func() { runDemoAnswered(t, base, "tail-websocket") })
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

// TestTailPrintsTextAsItStreams: a message's text shows while the
// message is still streaming, not only once it is complete.
func TestTailPrintsTextAsItStreams(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, done := startServe(t, ctx, io.Discard)
	var out, errb syncBuffer
	tctx, tcancel := context.WithTimeout(ctx, 30*time.Second)
	defer tcancel()
	subscribed := wiretest.Metric(t, "http://"+addr, "agentstream_subscribes_total")
	exited := make(chan int, 1)
	go func() { exited <- run(tctx, []string{"tail", addr, "streaming", "--until-done"}, &out, &errb, nil) }()
	wiretest.WaitMetricAbove(t, "http://"+addr, "agentstream_subscribes_total", subscribed) // attached
	c, err := client.Dial(ctx, "http://"+addr, client.Options{})
	require.NoError(t, err)
	defer c.Close()
	words := "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu"
	_, err = c.Thread("streaming").Run.Start(ctx, protocol.RunStartParams{AssistantID: "echo", Input: map[string]any{"messages": []any{map[string]any{"role": "user", "content": words}}}, Config: map[string]any{"token_delay_ms": float64(150)}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "ai: alpha beta") }, 10*time.Second, 20*time.Millisecond)
	require.NotContains(t, out.String(), "lambda mu", "the first words show before the last are sent")
	require.Equal(t, 0, <-exited, errb.String())
	require.Contains(t, out.String(), "ai: "+words+"\n")
	cancel()
	require.Equal(t, 0, <-done)
}

// TestTailAfterARestartShowsTheHistory: with --data-dir, a thread of a
// server restarted since is not "without events": tail, the first to ask
// for it after the restart, shows its history and then the new run.
func TestTailAfterARestartShowsTheHistory(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	addr, done := startServe(t, ctx, io.Discard, "--data-dir", dir)
	c, err := client.Dial(ctx, "http://"+addr, client.Options{})
	require.NoError(t, err)
	th := c.Thread("kept")
	sub, err := th.Subscribe(ctx, client.Filter{Channels: []string{"lifecycle"}})
	require.NoError(t, err)
	started, err := th.Run.Start(ctx, protocol.RunStartParams{AssistantID: "echo", Input: map[string]any{"messages": []any{map[string]any{"role": "user", "content": "before the restart"}}}})
	require.NoError(t, err)
	for {
		e, err := sub.Next(ctx)
		require.NoError(t, err)
		if e.RunEndAfter(started.AppliedThroughSeq) != "" {
			break
		}
	}
	c.Close()
	cancel()
	require.Equal(t, 0, <-done)

	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	addr, done = startServe(t, ctx, io.Discard, "--data-dir", dir)
	c, err = client.Dial(ctx, "http://"+addr, client.Options{})
	require.NoError(t, err)
	defer c.Close()
	var out, errb bytes.Buffer
	code := tailWhile(t, []string{"tail", addr, "kept", "--until-done"}, &out, &errb, func() {
		_, err := c.Thread("kept").Run.Start(ctx, protocol.RunStartParams{AssistantID: "echo", Input: map[string]any{"messages": []any{map[string]any{"role": "user", "content": "after it"}}}})
		require.NoError(t, err)
	})
	require.Equal(t, 0, code, errb.String())
	require.NotContains(t, errb.String(), "no events yet")
	require.Contains(t, out.String(), "before the restart")
	require.Contains(t, out.String(), "ai: after it")
	cancel()
	require.Equal(t, 0, <-done)
}

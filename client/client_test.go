package client

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentstream/agentstream/assistants"
	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/internal/testkit/sdktest"
	"github.com/agentstream/agentstream/internal/testkit/servetest"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/agentstream/agentstream/transport/inproc"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func dial(t *testing.T, ts *servetest.Server, opts Options) *Client {
	t.Helper()
	if opts.MinBackoff == 0 {
		opts.MinBackoff = 20 * time.Millisecond
	}
	c, err := Dial(context.Background(), ts.URL(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func echoInput(text string) map[string]any {
	return map[string]any{"messages": []any{map[string]any{"role": "user", "content": text}}}
}

// readRun reads events up to the end of a run (the root's completed or
// failed lifecycle), applying them to a.
func readRun(t *testing.T, s *Subscription, a *Assembler) []*Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*Event
	for {
		e, err := s.Next(ctx)
		require.NoError(t, err)
		out = append(out, e)
		if e.Payload != nil {
			a.Apply(e.Payload)
		}
		if e.RunEnd() != "" {
			return out
		}
	}
}

var transports = []Transport{WebSocket, SSE}

// TestStreamARun: over each transport, a subscription sees a run's events
// in order, each once, and the assembler builds its message.
func TestStreamARun(t *testing.T) {
	ts := servetest.Start(t, transport.Options{})
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) {
			c := dial(t, ts, Options{Transport: tr})
			th := c.Thread("stream-" + string(tr))
			sub, err := th.Subscribe(context.Background(), Filter{})
			require.NoError(t, err)
			defer sub.Close()
			res, err := th.Run.Start(context.Background(), protocol.RunStartParams{AssistantID: "echo", Input: echoInput("hello there")})
			require.NoError(t, err)
			require.NotEmpty(t, res.RunID)
			require.Equal(t, "run_", res.RunID[:4])
			a := NewAssembler()
			evs := readRun(t, sub, a)
			var last uint64
			for _, e := range evs {
				if e.ID == "" {
					continue // the values snapshot an SSE stream opens with
				}
				require.Greater(t, e.Seq, last, "in order, once")
				last = e.Seq
			}
			msgs := a.Messages(nil)
			require.Len(t, msgs, 1)
			require.Equal(t, "hello there", msgs[0].Text())
			require.Equal(t, protocol.MessageRoleAI, msgs[0].Role)
			require.True(t, msgs[0].Done)
			vals, ok := a.Values(nil).(map[string]any)
			require.True(t, ok, "%T", a.Values(nil))
			require.Len(t, vals["messages"], 2)
			tree := a.Tree()
			require.Equal(t, protocol.AgentStatusCompleted, tree[0].Status)
			require.Equal(t, "echo", tree[0].Graph)
		})
	}
}

// TestCommands: every command, typed results, typed errors, in-band over
// WebSocket and over HTTP with SSE.
func TestCommands(t *testing.T) {
	ts := servetest.Start(t, transport.Options{})
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) { testCommands(t, ts, tr) })
	}
}

func testCommands(t *testing.T, ts *servetest.Server, tr Transport) {
	c := dial(t, ts, Options{Transport: tr})
	ctx := context.Background()
	th := c.Thread("commands-" + string(tr))
	sub, err := th.Subscribe(ctx, Filter{Channels: []string{"lifecycle", "input"}})
	require.NoError(t, err)
	defer sub.Close()

	// demo stops at an interrupt; the answer resumes it.
	_, err = th.Run.Start(ctx, protocol.RunStartParams{AssistantID: "demo", Input: echoInput("plan a trip")})
	require.NoError(t, err)
	a := NewAssembler()
	var in []Interrupt
	for len(in) == 0 {
		e, err := sub.Next(ctx)
		require.NoError(t, err)
		a.Apply(e.Payload)
		in = a.Interrupts()
	}
	tree, err := th.Agent.GetTree(ctx, protocol.AgentGetTreeParams{})
	require.NoError(t, err)
	require.NotEmpty(t, tree.Tree)
	st, err := th.State.Get(ctx, protocol.StateGetParams{})
	require.NoError(t, err)
	require.NotNil(t, st)

	err = th.Input.RespondOne(ctx, in[0].Namespace, "no-such-interrupt", true)
	require.ErrorIs(t, err, ErrNoSuchInterrupt)
	var cerr *Error
	require.ErrorAs(t, err, &cerr)
	if tr == SSE {
		require.Equal(t, 404, cerr.Status, "over HTTP, the status too")
	} else {
		require.Zero(t, cerr.Status, "in-band: no HTTP status")
	}
	require.NoError(t, th.Input.RespondOne(ctx, in[0].Namespace, in[0].ID, map[string]any{"approved": true}))
	readRun(t, sub, a)
	require.Empty(t, a.Interrupts(), "answered")

	cps, err := th.State.ListCheckpoints(ctx, protocol.ListCheckpointsParams{})
	require.NoError(t, err)
	require.NotEmpty(t, cps.Checkpoints)
	fork, err := th.State.Fork(ctx, protocol.StateForkParams{CheckpointID: cps.Checkpoints[0].ID})
	require.NoError(t, err)
	require.NotEmpty(t, fork.ThreadID)

	// The fork started a run from the checkpoint: cancel it.
	cancelled, err := th.Run.Cancel(ctx, protocol.RunCancelParams{RunID: &fork.RunID})
	require.NoError(t, err)
	if cancelled.Cancelled { // else it had ended already
		require.Equal(t, fork.RunID, *cancelled.RunID)
	}
	readRun(t, sub, a)
	cancelled, err = th.Run.Cancel(ctx, protocol.RunCancelParams{})
	require.NoError(t, err)
	require.False(t, cancelled.Cancelled, "no run to cancel")

	err = th.Input.Inject(ctx, protocol.InputInjectParams{Namespace: []string{}, Message: protocol.InputMessage{Role: "user", Content: "more"}})
	require.ErrorIs(t, err, ErrNoSuchRun, "nothing runs to take it")

	err = th.Do(ctx, "run.explode", map[string]any{}, nil)
	require.ErrorIs(t, err, ErrUnknownCommand)
	_, err = th.Run.Start(ctx, protocol.RunStartParams{AssistantID: "no-such-assistant"})
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.False(t, errors.Is(err, ErrNoSuchInterrupt), "codes are told apart")
}

// firehose starts a run of n custom events at rate per second.
func firehose(t *testing.T, th *Thread, n, rate int) {
	t.Helper()
	_, err := th.Run.Start(context.Background(), protocol.RunStartParams{AssistantID: "firehose", Input: map[string]any{"count": n, "rate": rate}})
	require.NoError(t, err)
}

// TestDroppedConnectionResumes: the connection of a subscription drops
// mid-run, twice; it reconnects and every event arrives once, in order.
func TestDroppedConnectionResumes(t *testing.T) {
	ts := servetest.Start(t, transport.Options{})
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) {
			c := dial(t, ts, Options{Transport: tr})
			th := c.Thread("dropped-" + string(tr))
			sub, err := th.Subscribe(context.Background(), Filter{Channels: []string{"custom", "lifecycle"}})
			require.NoError(t, err)
			defer sub.Close()
			firehose(t, th, 60, 300)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var seqs []uint64
			custom := 0
			for {
				e, err := sub.Next(ctx)
				require.NoError(t, err)
				require.Nil(t, e.Missed, "nothing is lost")
				if e.ID == "" {
					continue
				}
				seqs = append(seqs, e.Seq)
				if e.Method == "custom" {
					custom++
					if custom == 10 || custom == 30 {
						sub.dropConnection()
					}
				}
				if e.RunEnd() == protocol.AgentStatusCompleted {
					break
				}
			}
			require.Equal(t, 60, custom, "every event once")
			for i := 1; i < len(seqs); i++ {
				require.Greater(t, seqs[i], seqs[i-1], "in order, no duplicate")
			}
			require.GreaterOrEqual(t, sub.connections(), 3, "it reconnected")
		})
	}
}

// TestServerRestartSurfacesMissed: the in-memory server restarts (its
// streams begin again, in a new epoch); the subscription reconnects, says
// that events were missed, and goes on with the new stream.
func TestServerRestartSurfacesMissed(t *testing.T) {
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) {
			ts := servetest.Start(t, transport.Options{})
			c := dial(t, ts, Options{Transport: tr})
			th := c.Thread("restart")
			sub, err := th.Subscribe(context.Background(), Filter{})
			require.NoError(t, err)
			defer sub.Close()
			_, err = th.Run.Start(context.Background(), protocol.RunStartParams{AssistantID: "echo", Input: echoInput("before")})
			require.NoError(t, err)
			readRun(t, sub, NewAssembler())

			ts.Stop()
			ts.Start()
			require.Eventually(t, func() bool {
				_, err := th.Run.Start(context.Background(), protocol.RunStartParams{AssistantID: "echo", Input: echoInput("after")})
				return err == nil
			}, 10*time.Second, 20*time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			e, err := sub.Next(ctx)
			require.NoError(t, err)
			require.NotNil(t, e.Missed, "first the notice: %s", e.JSON)
			require.True(t, e.Missed.Reset != nil && *e.Missed.Reset)
			a := NewAssembler()
			readRun(t, sub, a)
			require.Equal(t, "after", a.Messages(nil)[0].Text())
		})
	}
}

// TestBadCredentials: with authentication on, a missing or wrong
// credential is ErrUnauthenticated, another principal's thread is
// ErrPermissionDenied, on commands and on subscriptions of both
// transports; the right key works.
func TestBadCredentials(t *testing.T) {
	a, err := auth.New(context.Background(), auth.Config{APIKeys: map[string]auth.Principal{"k-alice": {Subject: "alice"}, "k-bob": {Subject: "bob"}}})
	require.NoError(t, err)
	defer a.Close()
	ts := servetest.Start(t, transport.Options{Auth: a})
	ctx := context.Background()
	alice := dial(t, ts, Options{APIKey: "k-alice"})
	_, err = alice.Thread("alices").Run.Start(ctx, protocol.RunStartParams{AssistantID: "echo", Input: echoInput("mine")})
	require.NoError(t, err)
	for _, tr := range transports {
		for _, c := range []struct {
			key  string
			want error
		}{{"", ErrUnauthenticated}, {"k-wrong", ErrUnauthenticated}, {"k-bob", ErrPermissionDenied}} {
			cl := dial(t, ts, Options{Transport: tr, APIKey: c.key})
			th := cl.Thread("alices")
			_, err := th.State.Get(ctx, protocol.StateGetParams{})
			require.ErrorIs(t, err, c.want, "command with %q", c.key)
			_, err = th.Subscribe(ctx, Filter{})
			require.ErrorIs(t, err, c.want, "%s subscription with %q", tr, c.key)
		}
		sub, err := dial(t, ts, Options{Transport: tr, APIKey: "k-alice"}).Thread("alices").Subscribe(ctx, Filter{})
		require.NoError(t, err)
		sub.Close()
	}
}

// TestAssemblerAgreesWithTheOfficialSDK: for the same run, the Assembler's
// messages and values are what the official SDK assembles (its
// thread.messages projection and final state, tools/node/assembled.mjs).
func TestAssemblerAgreesWithTheOfficialSDK(t *testing.T) {
	node, conformance := sdktest.Conformance(t)
	script := filepath.Join(filepath.Dir(conformance), "assembled.mjs")
	ts := servetest.Start(t, transport.Options{})
	const text = "The quick brown fox jumps over the lazy dog"
	out, err := exec.Command(node, script, ts.URL(), "sdk-assembled", "echo", text).Output()
	require.NoError(t, err, "%s", out)
	var sdk struct {
		Texts  []string `json:"texts"`
		Values []any    `json:"values"`
	}
	require.NoError(t, json.Unmarshal(out, &sdk), "%s", out)
	require.NotEmpty(t, sdk.Texts)

	// The Go client replays the same run (it has ended) and assembles it.
	for _, tr := range transports {
		c := dial(t, ts, Options{Transport: tr})
		sub, err := c.Thread("sdk-assembled").Subscribe(context.Background(), Filter{})
		require.NoError(t, err)
		a := NewAssembler()
		readRun(t, sub, a)
		sub.Close()
		var texts []string
		for _, m := range a.Messages(nil) {
			texts = append(texts, m.Text())
		}
		require.Equal(t, sdk.Texts, texts, "%s: the messages' text", tr)
		vals := a.Values(nil).(map[string]any)["messages"].([]any)
		var contents []any
		for _, m := range vals {
			contents = append(contents, m.(map[string]any)["content"])
		}
		require.Equal(t, sdk.Values, contents, "%s: the values' messages", tr)
	}
}

// TestAssemblerInProcess: the Assembler takes the in-process transport's
// events as they are.
func TestAssemblerInProcess(t *testing.T) {
	srv := server.New(server.Config{})
	assistants.Register(srv)
	defer srv.Close(context.Background())
	conn := inproc.Connect(srv, "inproc")
	defer conn.Close()
	sub, err := conn.Subscribe(channels.All, nil)
	require.NoError(t, err)
	defer sub.Close()
	_, err = conn.Start(context.Background(), "echo", echoInput("in process"))
	require.NoError(t, err)
	a := NewAssembler()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		e, err := sub.Next(ctx)
		require.NoError(t, err)
		a.Apply(e.Payload)
		if e.EndsRun() {
			break
		}
	}
	require.Equal(t, "in process", a.Messages(nil)[0].Text())
}

// TestTokenSourceOutlivesExpiry: with short-lived tokens from a
// TokenSource, a subscription whose credential expires mid-run reconnects
// with a fresh one and loses nothing; with a fixed token it ends with
// ErrUnauthenticated.
func TestTokenSourceOutlivesExpiry(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	a, err := auth.New(context.Background(), auth.Config{HS256Secret: secret, Leeway: -1})
	require.NoError(t, err)
	defer a.Close()
	ts := servetest.Start(t, transport.Options{Auth: a})
	mint := func(ctx context.Context) (string, error) {
		// Two seconds: a token's expiry is in whole seconds, so one of a
		// second may be minted with a millisecond left.
		return auth.Mint(secret, auth.TokenOptions{Subject: "alice", TTL: 2 * time.Second})
	}
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) {
			c := dial(t, ts, Options{Transport: tr, TokenSource: mint})
			th := c.Thread("expiring-" + string(tr))
			sub, err := th.Subscribe(context.Background(), Filter{Channels: []string{"custom", "lifecycle"}})
			require.NoError(t, err)
			defer sub.Close()
			firehose(t, th, 140, 40) // 3.5 s: the first token expires meanwhile
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			custom := 0
			for {
				e, err := sub.Next(ctx)
				require.NoError(t, err)
				require.Nil(t, e.Missed)
				if e.Method == "custom" {
					custom++
				}
				if e.RunEnd() == protocol.AgentStatusCompleted {
					break
				}
			}
			require.Equal(t, 140, custom, "every event once")
			require.GreaterOrEqual(t, sub.connections(), 2, "it reconnected with a new token")

			// A fixed token: the subscription ends when it expires.
			tok, err := mint(context.Background())
			require.NoError(t, err)
			fixed := dial(t, ts, Options{Transport: tr, Token: tok})
			sub2, err := fixed.Thread("expiring-"+string(tr)).Subscribe(context.Background(), Filter{Channels: []string{"lifecycle"}})
			require.NoError(t, err)
			defer sub2.Close()
			for {
				_, err := sub2.Next(ctx)
				if err != nil {
					require.ErrorIs(t, err, ErrUnauthenticated)
					break
				}
			}
		})
	}
}

// TestCommandConnectionRedials: over WebSocket, a command whose
// connection dropped fails, and the next one dials again.
func TestCommandConnectionRedials(t *testing.T) {
	ts := servetest.Start(t, transport.Options{})
	c := dial(t, ts, Options{})
	th := c.Thread("redial")
	ctx := context.Background()
	_, err := th.Agent.GetTree(ctx, protocol.AgentGetTreeParams{})
	require.ErrorIs(t, err, ErrNoSuchRun, "no run yet: a typed answer, in-band")
	first := th.cmd
	require.NotNil(t, first)
	first.close()
	<-first.done
	_, err = th.Run.Start(ctx, protocol.RunStartParams{AssistantID: "echo", Input: echoInput("again")})
	require.NoError(t, err)
	require.NotSame(t, first, th.cmd, "a new connection")
}

// TestClosedClient: after Close, commands and subscriptions are refused
// and leave nothing running (goleak checks at the end).
func TestClosedClient(t *testing.T) {
	ts := servetest.Start(t, transport.Options{})
	c := dial(t, ts, Options{})
	th := c.Thread("closed")
	_, err := th.Agent.GetTree(context.Background(), protocol.AgentGetTreeParams{})
	require.ErrorIs(t, err, ErrNoSuchRun)
	require.NoError(t, c.Close())
	_, err = th.Run.Start(context.Background(), protocol.RunStartParams{AssistantID: "echo", Input: echoInput("x")})
	require.ErrorIs(t, err, errClientClosed)
	_, err = th.Subscribe(context.Background(), Filter{})
	require.ErrorIs(t, err, errClientClosed)
}

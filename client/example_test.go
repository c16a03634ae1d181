package client_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/agentstream/agentstream/assistants"
	"github.com/agentstream/agentstream/client"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
)

// serve runs agentstream's server with its built-in assistants on a
// loopback port, as `agentstream serve` would, and returns its URL and
// how to stop it.
func serve() (string, func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv := server.New(server.Config{})
	assistants.Register(srv)
	h := transport.New(srv, transport.Options{})
	hs := &http.Server{Handler: h}
	go func() { _ = hs.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		go func() { _ = h.Shutdown(ctx) }()
		_ = hs.Shutdown(ctx)
		_ = h.Shutdown(ctx)
		_ = srv.Close(ctx)
	}
}

// Stream a run's text to stdout as its tokens arrive.
func Example_streamText() {
	url, stop := serve()
	defer stop()
	ctx := context.Background()
	c, err := client.Dial(ctx, url, client.Options{}) // WebSocket; client.Options{Transport: client.SSE} for SSE
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	th := c.Thread("example-stream")
	sub, err := th.Subscribe(ctx, client.Filter{Channels: []string{"messages", "lifecycle"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sub.Close()
	input := map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hello from Go"}}}
	started, err := th.Run.Start(ctx, protocol.RunStartParams{AssistantID: "echo", Input: input})
	if err != nil {
		fmt.Println(err)
		return
	}
	for e, err := sub.Next(ctx); err == nil; e, err = sub.Next(ctx) {
		fmt.Print(e.TextDelta())
		if e.RunEndAfter(started.AppliedThroughSeq) != "" { // this run's end, not an earlier one's
			break
		}
	}
	fmt.Println()
	// Output: hello from Go
}

// Answer an interrupt: the demo assistant asks for approval; the
// assembler keeps the pending interrupts, and the answer resumes the run.
func Example_answerInterrupt() {
	url, stop := serve()
	defer stop()
	ctx := context.Background()
	c, err := client.Dial(ctx, url, client.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	th := c.Thread("example-interrupt")
	sub, err := th.Subscribe(ctx, client.Filter{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sub.Close()
	input := map[string]any{"messages": []any{map[string]any{"role": "user", "content": "plan a trip"}}}
	started, err := th.Run.Start(ctx, protocol.RunStartParams{AssistantID: "demo", Input: input})
	if err != nil {
		fmt.Println(err)
		return
	}
	a := client.NewAssembler()
	answered := false
	for {
		e, err := sub.Next(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		if e.Seq <= started.AppliedThroughSeq {
			continue // an earlier run's, replayed: not this run's interrupt
		}
		a.Apply(e.Payload)
		if in := a.Interrupts(); len(in) > 0 && !answered {
			fmt.Println("interrupted; approving")
			if err := th.Input.RespondOne(ctx, in[0].Namespace, in[0].ID, map[string]any{"approved": true}); err != nil {
				fmt.Println(err)
				return
			}
			answered = true
		}
		if e.RunEndAfter(started.AppliedThroughSeq) != "" {
			fmt.Println("run:", a.Tree()[0].Status)
			return
		}
	}
	// Output:
	// interrupted; approving
	// run: completed
}

// Follow a thread across a restart of the server: the subscription
// reconnects by itself, says that the events of the old stream after its
// cursor are lost (an in-memory server begins its streams again), and goes
// on with the new stream.
func Example_followAcrossRestart() {
	url, stop := serve()
	ctx := context.Background()
	c, err := client.Dial(ctx, url, client.Options{Transport: client.SSE, MinBackoff: 20 * time.Millisecond})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	th := c.Thread("example-restart")
	sub, err := th.Subscribe(ctx, client.Filter{Channels: []string{"messages", "lifecycle"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sub.Close()
	run := func(text string) error {
		_, err := th.Run.Start(ctx, protocol.RunStartParams{AssistantID: "echo",
			Input: map[string]any{"messages": []any{map[string]any{"role": "user", "content": text}}}})
		return err
	}
	follow := func() {
		a := client.NewAssembler()
		for {
			e, err := sub.Next(ctx)
			if err != nil {
				fmt.Println(err)
				return
			}
			if e.Missed != nil {
				fmt.Println("missed events after", e.Missed.Since)
				continue
			}
			a.Apply(e.Payload)
			if e.RunEnd() != "" {
				msgs := a.Messages(nil)
				fmt.Println(msgs[len(msgs)-1].Text())
				return
			}
		}
	}
	if err := run("before the restart"); err != nil {
		fmt.Println(err)
		return
	}
	follow()

	// The server restarts on the same port.
	stop()
	ln, err := net.Listen("tcp", url[len("http://"):])
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := server.New(server.Config{})
	assistants.Register(srv)
	h := transport.New(srv, transport.Options{})
	hs := &http.Server{Handler: h}
	go func() { _ = hs.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		go func() { _ = h.Shutdown(sctx) }()
		_ = hs.Shutdown(sctx)
		_ = h.Shutdown(sctx)
		_ = srv.Close(sctx)
	}()
	if err := run("after the restart"); err != nil {
		fmt.Println(err)
		return
	}
	follow()
	// Output:
	// before the restart
	// missed events after 15
	// after the restart
}

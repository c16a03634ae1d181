package inproc_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentstream/agentstream/assistants"
	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport/inproc"
)

// Register an assistant, start a run, and read its messages as Go values.
func Example() {
	srv := server.New(server.Config{})
	defer srv.Close(context.Background())
	srv.Register("shout", server.AssistantFunc(func(ctx context.Context, rc *server.RunContext) error {
		m, err := rc.StartMessage(protocol.MessageRoleAI, "", nil)
		if err != nil {
			return err
		}
		if _, err := m.StartBlock(&protocol.TextContentBlock{}); err != nil {
			return err
		}
		for _, w := range []string{"HELLO ", "THERE"} {
			if err := m.Delta(&protocol.TextDelta{Text: w}); err != nil {
				return err
			}
		}
		if err := m.FinishBlock(&protocol.TextContentBlock{Text: "HELLO THERE"}); err != nil {
			return err
		}
		return m.Finish(nil)
	}))

	client := inproc.Connect(srv, "thread-1")
	defer client.Close()
	sub, _ := client.Subscribe(channels.Filter{Channels: []string{channels.Messages, channels.Lifecycle}, Depth: channels.Unlimited}, nil)
	defer sub.Close()
	if _, err := client.Start(context.Background(), "shout", nil); err != nil {
		fmt.Println(err)
		return
	}
	var text strings.Builder
	for {
		e, err := sub.Next(context.Background())
		if err != nil {
			fmt.Println(err)
			return
		}
		switch p := e.Payload.(type) {
		case *protocol.ServerEventMessages:
			if d, ok := p.Params.Data.Value.(*protocol.ContentBlockDeltaData); ok {
				text.WriteString(d.Delta.Text())
			}
		case *protocol.ServerEventLifecycle:
			if p.Params.Data.Event == protocol.AgentStatusCompleted {
				fmt.Println(text.String())
				return
			}
		}
	}
	// Output: HELLO THERE
}

// Subscribe to one subagent's namespace only: the demo assistant's
// researcher.
func Example_subagentNamespace() {
	srv := server.New(server.Config{})
	defer srv.Close(context.Background())
	assistants.Register(srv)

	client := inproc.Connect(srv, "thread-2")
	defer client.Close()
	only := channels.Filter{Namespaces: []channels.Namespace{{"researcher"}}, Depth: channels.Unlimited}
	sub, _ := client.Subscribe(only, nil)
	defer sub.Close()
	if _, err := client.Start(context.Background(), "demo", nil); err != nil {
		fmt.Println(err)
		return
	}
	for {
		e, _ := sub.Next(context.Background())
		fmt.Println(e.Method, e.Namespace)
		if l, ok := e.Payload.(*protocol.ServerEventLifecycle); ok && l.Params.Data.Event == protocol.AgentStatusCompleted {
			break
		}
	}
	// The demo now waits for approval; cancel it.
	_, _ = client.Do(context.Background(), &protocol.ClientCommandRunCancel{})
	// Output:
	// lifecycle [researcher]
	// lifecycle [researcher]
	// custom [researcher]
	// custom [researcher]
	// custom [researcher]
	// messages [researcher]
	// messages [researcher]
	// messages [researcher]
	// messages [researcher]
	// messages [researcher]
	// messages [researcher]
	// messages [researcher]
	// messages [researcher]
	// messages [researcher]
	// messages [researcher]
	// messages [researcher]
	// messages [researcher]
	// messages [researcher]
	// lifecycle [researcher]
}

// Subscribe with subscription.subscribe through Do, as a WebSocket client
// does, and read the client's events: its subscriptions merged into one
// stream, each event once, in sequence order.
func Example_subscribeThroughDo() {
	srv := server.New(server.Config{})
	defer srv.Close(context.Background())
	assistants.Register(srv)

	client := inproc.Connect(srv, "thread-3")
	defer client.Close()
	ctx := context.Background()
	for _, chans := range [][]protocol.Channel{{"messages", "lifecycle"}, {"lifecycle", "values"}} {
		resp, err := client.Do(ctx, &protocol.ClientCommandSubscriptionSubscribe{Params: protocol.SubscribeParams{Channels: chans}})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("subscribed:", resp.Result.(protocol.SubscribeResult).SubscriptionID != "")
	}
	if _, err := client.Start(ctx, "echo", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi there"}}}); err != nil {
		fmt.Println(err)
		return
	}
	for {
		e, err := client.Next(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		switch p := e.Payload.(type) {
		case *protocol.ServerEventLifecycle:
			fmt.Println(e.Seq, "lifecycle", p.Params.Data.Event)
			if p.Params.Data.Event == protocol.AgentStatusCompleted {
				return
			}
		case *protocol.ServerEventMessages:
			if d, ok := p.Params.Data.Value.(*protocol.ContentBlockDeltaData); ok {
				fmt.Printf("%d messages %q\n", e.Seq, d.Delta.Text())
			}
		case *protocol.ServerEventValues:
			msgs, _ := p.Params.Data.(map[string]any)["messages"].([]any)
			fmt.Println(e.Seq, "values", len(msgs), "messages")
		}
	}
	// Output:
	// subscribed: true
	// subscribed: true
	// 0 values 0 messages
	// 1 lifecycle started
	// 2 lifecycle running
	// 3 values 1 messages
	// 7 messages "hi "
	// 8 messages "there"
	// 12 values 2 messages
	// 14 lifecycle completed
}

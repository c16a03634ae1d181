package redisstore_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"testing"
	"time"

	"github.com/agentstream/agentstream/assistants"
	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/internal/testkit/redistest"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/redisstore"
	"github.com/agentstream/agentstream/server"
	"github.com/stretchr/testify/require"
)

// exampleRedis is the Redis the example uses; TestExampleTwoNodes points
// it at one the test starts.
var exampleRedis = "redis://127.0.0.1:6379/0"

// Two nodes on one Redis: a run started on node A streams to a client of
// node B. Each node is a server whose Config names the engine; nothing
// else is wired by hand. (It needs a Redis at exampleRedis, so go test
// does not run it as an example: TestExampleTwoNodes runs it against a
// redis-server of its own.)
func Example_twoNodes() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	node := func() *server.Server {
		eng, err := redisstore.New(ctx, redisstore.Options{URL: exampleRedis})
		if err != nil {
			log.Fatal(err)
		}
		srv := server.New(server.Config{Engine: eng}) // takes its stores and starts it
		assistants.Register(srv)
		return srv
	}
	a, b := node(), node()
	defer a.Close(ctx) // closes the engine too
	defer b.Close(ctx)

	watch, _, err := b.Subscribe("t1", channels.Filter{Channels: []string{channels.Messages}, Depth: channels.Unlimited}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer watch.Close()
	time.Sleep(100 * time.Millisecond) // B's subscription to the thread reaches Redis
	input := map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hello from A"}}}
	if _, err := a.Do(ctx, "t1", &protocol.ClientCommand{Value: &protocol.ClientCommandRunStart{ID: 1,
		Params: protocol.RunStartParams{AssistantID: "echo", Input: input}}}); err != nil {
		log.Fatal(err)
	}
	text := ""
	for {
		e, err := watch.Next(ctx)
		if err == nil {
			e, err = e.WithPayload() // an event from another node carries its JSON only
		}
		if err != nil {
			log.Fatal(err)
		}
		m, ok := e.Payload.(*protocol.ServerEventMessages)
		if !ok {
			continue
		}
		if d, ok := m.Params.Data.Value.(*protocol.ContentBlockDeltaData); ok {
			text += d.Delta.Text()
		}
		if _, ok := m.Params.Data.Value.(*protocol.MessageFinishData); ok {
			break
		}
	}
	fmt.Println("B saw:", text) // B saw: hello from A
}

// TestExampleTwoNodes runs the example against a redis-server of its own.
func TestExampleTwoNodes(t *testing.T) {
	rs := redistest.Start(t)
	exampleRedis = rs.URL()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	stdout := os.Stdout
	os.Stdout = w
	func() {
		defer func() { os.Stdout = stdout }()
		Example_twoNodes()
	}()
	require.NoError(t, w.Close())
	out, err := io.ReadAll(r)
	require.NoError(t, err)
	require.Equal(t, "B saw: hello from A\n", string(out))
}

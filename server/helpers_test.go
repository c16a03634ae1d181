package server_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentstream/agentstream/assistants"
	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newServer returns a server with the built-in assistants and stable ids,
// closed when the test ends.
func newServer(t *testing.T, cfg server.Config) *server.Server {
	t.Helper()
	var mu sync.Mutex
	n := 0
	if cfg.NewID == nil {
		cfg.NewID = func(prefix string) string {
			mu.Lock()
			defer mu.Unlock()
			n++
			return fmt.Sprintf("%s%d", prefix, n)
		}
	}
	s := server.New(cfg)
	assistants.Register(s)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, s.Close(ctx))
	})
	return s
}

var cmdID atomic.Uint64

// do runs a command and fails the test on a protocol error.
func do(t *testing.T, s *server.Server, thread string, v protocol.ClientCommandVariant) *protocol.CommandResponse {
	t.Helper()
	resp, errResp := tryDo(s, thread, v)
	require.Nil(t, errResp, "%+v", errResp)
	return resp
}

func tryDo(s *server.Server, thread string, v protocol.ClientCommandVariant) (*protocol.CommandResponse, *protocol.ErrorResponse) {
	v.SetID(cmdID.Add(1))
	resp, err := s.Do(context.Background(), thread, &protocol.ClientCommand{Value: v})
	return resp, protocol.ErrorResponseOf(nil, err)
}

func start(t *testing.T, s *server.Server, thread, assistant string, input any) string {
	t.Helper()
	resp := do(t, s, thread, &protocol.ClientCommandRunStart{Params: protocol.RunStartParams{AssistantID: assistant, Input: input}})
	return *resp.Result.(protocol.RunResult).RunID
}

func userInput(text string) map[string]any {
	return map[string]any{"messages": []any{map[string]any{"role": "user", "content": text}}}
}

// collect reads events until stop returns true for one (included) or the
// timeout passes.
func collect(t *testing.T, sub *server.Session, stop func(*server.Event) bool) []*server.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*server.Event
	for {
		e, err := sub.Next(ctx)
		require.NoError(t, err, "after %d events: %v", len(out), describeAll(out))
		out = append(out, e)
		if stop(e) {
			return out
		}
	}
}

// rootEnded reports the root lifecycle event that ends a run.
func rootEnded(e *server.Event) bool {
	st, ok := lifecycle(e)
	return ok && len(e.Namespace) == 0 && (st == protocol.AgentStatusCompleted || st == protocol.AgentStatusFailed)
}

func lifecycle(e *server.Event) (protocol.AgentStatus, bool) {
	if l, ok := e.Payload.(*protocol.ServerEventLifecycle); ok {
		return l.Params.Data.Event, true
	}
	return "", false
}

// describe summarises an event for comparisons: "method[ns] detail".
func describe(e *server.Event) string {
	ns := strings.Join(e.Namespace, "/")
	switch p := e.Payload.(type) {
	case *protocol.ServerEventLifecycle:
		return fmt.Sprintf("lifecycle[%s] %s", ns, p.Params.Data.Event)
	case *protocol.ServerEventMessages:
		switch d := p.Params.Data.Value.(type) {
		case *protocol.MessageStartData:
			return fmt.Sprintf("messages[%s] message-start %s", ns, d.Role)
		case *protocol.ContentBlockStartData:
			return fmt.Sprintf("messages[%s] content-block-start %d", ns, d.Index)
		case *protocol.ContentBlockDeltaData:
			return fmt.Sprintf("messages[%s] content-block-delta %d", ns, d.Index)
		case *protocol.ContentBlockFinishData:
			return fmt.Sprintf("messages[%s] content-block-finish %d", ns, d.Index)
		case *protocol.MessageFinishData:
			return fmt.Sprintf("messages[%s] message-finish", ns)
		case *protocol.MessageErrorData:
			return fmt.Sprintf("messages[%s] error", ns)
		}
	case *protocol.ServerEventTools:
		switch p.Params.Data.Value.(type) {
		case *protocol.ToolStartedData:
			return fmt.Sprintf("tools[%s] tool-started", ns)
		case *protocol.ToolOutputDeltaData:
			return fmt.Sprintf("tools[%s] tool-output-delta", ns)
		case *protocol.ToolFinishedData:
			return fmt.Sprintf("tools[%s] tool-finished", ns)
		case *protocol.ToolErrorData:
			return fmt.Sprintf("tools[%s] tool-error", ns)
		}
	case *protocol.ServerEventCustom:
		name := ""
		if p.Params.Data.Name != nil {
			name = *p.Params.Data.Name
		}
		return fmt.Sprintf("custom[%s] %s", ns, name)
	}
	return fmt.Sprintf("%s[%s]", e.Method, ns)
}

func describeAll(es []*server.Event) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = describe(e)
	}
	return out
}

// text assembles the text deltas of the messages in es.
func text(es []*server.Event) string {
	var b strings.Builder
	for _, e := range es {
		if m, ok := e.Payload.(*protocol.ServerEventMessages); ok {
			if d, ok := m.Params.Data.Value.(*protocol.ContentBlockDeltaData); ok {
				if td, ok := d.Delta.Value.(*protocol.TextDelta); ok {
					b.WriteString(td.Text)
				}
			}
		}
	}
	return b.String()
}

func seqs(es []*server.Event) []uint64 {
	var out []uint64
	for _, e := range es {
		if e.Seq > 0 {
			out = append(out, e.Seq)
		}
	}
	return out
}

var all = channels.All

// testClock is a clock tests move by hand (Config.Now).
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *testClock { return &testClock{now: time.Unix(1_700_000_000, 0)} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// typed is a command's outcome with the error as the ErrorResponse it is.
func typed(resp *protocol.CommandResponse, err error) (*protocol.CommandResponse, *protocol.ErrorResponse) {
	return resp, protocol.ErrorResponseOf(nil, err)
}

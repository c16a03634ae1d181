package ws

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentstream/agentstream/transport/wire"

	"github.com/coder/websocket"
	"github.com/fxamacker/cbor/v2"
	"github.com/stretchr/testify/require"
)

// reply is the part of an answer these tests read.
type reply struct {
	Type    string
	ID      *int
	Error   string
	Message string
}

// TestEveryFramePaysBeforeDecoding sends 10,000 frames that are not
// commands (half unknown methods, half malformed): each takes a token, so
// all but the burst (and what the rate refills meanwhile) are answered
// rate_limited, and a rate-limited frame's answer carries its id.
func TestEveryFramePaysBeforeDecoding(t *testing.T) {
	rc := &refusals{refused: map[string]int{}}
	mu, refused := &rc.mu, rc.refused
	base := serve(t, Options{CommandRate: 100, CommandBurst: 200, Observer: rc})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/threads/r/stream", nil)
	require.NoError(t, err)
	defer c.CloseNow()
	const n = 10_000
	start := time.Now()
	go func() {
		for i := range n {
			frame := fmt.Sprintf(`{"id": %d, "method": "no.such.method", "params": {}}`, i)
			if i%2 == 1 {
				frame = fmt.Sprintf(`{"id": %d, "method": [[[`, i)
			}
			if c.Write(ctx, websocket.MessageText, []byte(frame)) != nil {
				return
			}
		}
	}()
	codes := map[string]int{}
	for i := range n {
		_, b, err := c.Read(ctx)
		require.NoError(t, err)
		var m reply
		require.NoError(t, json.Unmarshal(b, &m))
		codes[m.Error]++
		if m.Error == "rate_limited" {
			require.NotNil(t, m.ID, "frame %d: the id is read without decoding", i)
			require.Equal(t, i, *m.ID)
		}
	}
	took := time.Since(start)
	// At most the burst and what the bucket refilled while they were sent.
	allowed := 200 + int(took.Seconds()*100) + 1
	t.Logf("%d frames in %v: %v", n, took, codes)
	require.LessOrEqual(t, codes["unknown_command"]+codes["invalid_argument"], allowed)
	require.Greater(t, codes["unknown_command"], 0)
	require.Greater(t, codes["invalid_argument"], 0)
	require.GreaterOrEqual(t, codes["rate_limited"], n-allowed)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, codes["rate_limited"], refused["command_rate"])
}

// TestByteBudgetBeforeDecoding: frames past the connection's bytes a
// second are refused without being decoded, however few they are.
func TestByteBudgetBeforeDecoding(t *testing.T) {
	base := serve(t, Options{CommandBytesRate: 1000, ReadLimit: 1 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/threads/r/stream", nil)
	require.NoError(t, err)
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	big := fmt.Sprintf(`{"id": %%d, "method": "agent.getTree", "params": {}, "x": "%s"}`, strings.Repeat("x", 900_000))
	var codes []string
	for i := 1; i <= 3; i++ {
		require.NoError(t, c.Write(ctx, websocket.MessageText, []byte(fmt.Sprintf(big, i))))
		_, b, err := c.Read(ctx)
		require.NoError(t, err)
		var m reply
		require.NoError(t, json.Unmarshal(b, &m))
		require.NotNil(t, m.ID)
		require.Equal(t, i, *m.ID)
		codes = append(codes, m.Error)
	}
	// The first fits the burst (one frame of the read limit) and is
	// carried out (no run yet); the next two are over the budget.
	require.Equal(t, []string{"no_such_run", "rate_limited", "rate_limited"}, codes)
}

// TestCBORAmplificationFrame sends the frame that cost ~110 MB and 2 s to
// decode: 917,504 empty maps. It is refused by the shape check, and the
// connection goes on.
func TestCBORAmplificationFrame(t *testing.T) {
	base := serve(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/threads/r/stream", &websocket.DialOptions{Subprotocols: []string{CBORSubprotocol}})
	require.NoError(t, err)
	defer c.CloseNow()
	maps := make([]map[string]any, 917_504)
	for i := range maps {
		maps[i] = map[string]any{}
	}
	frame, err := cbor.Marshal(map[string]any{"id": 7, "method": "run.start", "params": map[string]any{"assistant_id": "echo", "input": maps}})
	require.NoError(t, err)
	require.Less(t, len(frame), 1<<20)
	for i := 0; i < 2; i++ {
		require.NoError(t, c.Write(ctx, websocket.MessageBinary, frame))
		_, b, err := c.Read(ctx)
		require.NoError(t, err)
		var m reply
		require.NoError(t, cbor.Unmarshal(b, &m))
		require.Equal(t, "invalid_argument", m.Error)
		require.Contains(t, m.Message, "more than 10000 values")
	}
}

// refusals counts the refusals by limit.
type refusals struct {
	wire.NopObserver
	mu      sync.Mutex
	refused map[string]int
}

func (r *refusals) Refused(limit string) { r.mu.Lock(); r.refused[limit]++; r.mu.Unlock() }

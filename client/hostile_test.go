package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// hostileServer answers /healthz, and serves streams and commands with
// stream.
func hostileServer(t *testing.T, stream http.HandlerFunc) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("/threads/{id}/", stream)
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts.URL
}

// endless writes chunk until the client goes away, and counts the bytes.
func endless(w http.ResponseWriter, r *http.Request, head, chunk string) int {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	n, _ := w.Write([]byte(head))
	for r.Context().Err() == nil {
		m, err := w.Write([]byte(chunk))
		n += m
		if err != nil {
			break
		}
	}
	return n
}

// TestBoundedReadsFromAHostileServer: a server that sends one endless
// line, an event of endless data lines, a WebSocket message or a command
// answer larger than MaxMessageBytes ends the read with ErrTooLarge (not
// retried), having held no more than the limit.
func TestBoundedReadsFromAHostileServer(t *testing.T) {
	const limit = 1 << 20
	x := strings.Repeat("x", 64<<10)
	for _, tc := range []struct {
		name      string
		serve     func(w http.ResponseWriter, r *http.Request)
		transport Transport
	}{
		{"one endless SSE line", func(w http.ResponseWriter, r *http.Request) { endless(w, r, "data: ", x) }, SSE},
		{"endless data lines of one event", func(w http.ResponseWriter, r *http.Request) { endless(w, r, "", "data: "+x+"\n") }, SSE},
		{"an endless comment", func(w http.ResponseWriter, r *http.Request) { endless(w, r, ":", x) }, SSE},
		{"a WebSocket message over the limit", func(w http.ResponseWriter, r *http.Request) {
			c, err := websocket.Accept(w, r, nil)
			if err != nil {
				return
			}
			defer c.CloseNow()
			c.SetReadLimit(1 << 20)
			ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
			defer cancel()
			if _, _, err := c.Read(ctx); err != nil {
				return
			}
			_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"success","id":1,"result":{"x":"`+strings.Repeat("y", 2*limit)+`"}}`))
		}, WebSocket},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := hostileServer(t, tc.serve)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, err := Dial(ctx, base, Options{Transport: tc.transport, MaxMessageBytes: limit, MaxAttempts: 3})
			require.NoError(t, err)
			defer c.Close()
			sub, err := c.Thread("t").Subscribe(ctx, Filter{Channels: []string{"lifecycle"}})
			if err == nil {
				defer sub.Close()
				_, err = sub.Next(ctx)
			}
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrTooLarge), "%v", err)
			require.Contains(t, err.Error(), "MaxMessageBytes")
		})
	}
	t.Run("a command answer over the limit", func(t *testing.T) {
		base := hostileServer(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"type":"success","id":1,"result":{"x":"` + strings.Repeat("y", 2*limit) + `"}}`))
		})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := Dial(ctx, base, Options{Transport: SSE, MaxMessageBytes: limit})
		require.NoError(t, err)
		defer c.Close()
		err = c.Thread("t").Do(ctx, "state.get", map[string]any{}, nil)
		require.True(t, errors.Is(err, ErrTooLarge), "%v", err)
	})
}

// TestReconnectIsReported: a stream the server drops is reported to
// OnDisconnect with why, then to OnReconnect once it is back.
func TestReconnectIsReported(t *testing.T) {
	var served atomic.Int32
	base := hostileServer(t, func(w http.ResponseWriter, r *http.Request) {
		n := served.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		if n == 1 {
			w.Write([]byte("id: e-1\nevent: custom\ndata: {\"type\":\"event\",\"event_id\":\"e-1\",\"seq\":1,\"method\":\"custom\",\"params\":{\"namespace\":[],\"timestamp\":1,\"data\":{\"payload\":1}}}\n\n"))
			return // the connection ends
		}
		w.Write([]byte("id: e-2\nevent: custom\ndata: {\"type\":\"event\",\"event_id\":\"e-2\",\"seq\":2,\"method\":\"custom\",\"params\":{\"namespace\":[],\"timestamp\":1,\"data\":{\"payload\":2}}}\n\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var mu sync.Mutex
	var calls []string
	c, err := Dial(ctx, base, Options{Transport: SSE, MinBackoff: 10 * time.Millisecond,
		OnDisconnect: func(err error) { mu.Lock(); calls = append(calls, "down: "+err.Error()); mu.Unlock() },
		OnReconnect:  func() { mu.Lock(); calls = append(calls, "up"); mu.Unlock() },
	})
	require.NoError(t, err)
	defer c.Close()
	sub, err := c.Thread("t").Subscribe(ctx, Filter{})
	require.NoError(t, err)
	defer sub.Close()
	for _, want := range []uint64{1, 2} {
		e, err := sub.Next(ctx)
		require.NoError(t, err)
		require.Equal(t, want, e.Seq)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, calls, 2, "%v", calls)
	require.Contains(t, calls[0], "down: client: the stream ended")
	require.Equal(t, "up", calls[1])
}

package ws

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/internal/testkit/wstest"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport/internal/wsframe"
	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve runs a WebSocket handler for /threads/{id}/stream on loopback.
func serve(t *testing.T, opts Options) string {
	t.Helper()
	base, _ := serveHandler(t, opts)
	return base
}

// serveHandler is serve, returning the handler too.
func serveHandler(t *testing.T, opts Options) (string, *Handler) {
	t.Helper()
	srv := server.New(server.Config{})
	h := New(srv, opts)
	mux := http.NewServeMux()
	mux.Handle("GET /threads/{id}/stream", h)
	ts := httptest.NewServer(mux)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, h.Shutdown(ctx))
		ts.Close()
		require.NoError(t, srv.Close(ctx))
	})
	return ts.URL, h
}

// clientFrame is a masked client frame (RFC 6455 section 5.3).

const upgrade = "GET /threads/%s/stream HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"

// dialRaw opens a WebSocket by hand, writing extra right behind the
// upgrade request, and returns the socket and a reader past the 101.
func dialRaw(t *testing.T, base, thread string, extra []byte) (net.Conn, *bufio.Reader) {
	t.Helper()
	return dialWith(t, base, thread, "", extra)
}

// dialWith is dialRaw asking for a subprotocol ("" for none), which the
// server must accept.
func dialWith(t *testing.T, base, thread, proto string, extra []byte) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	req := fmt.Sprintf(upgrade, thread)
	if proto != "" {
		req = strings.TrimSuffix(req, "\r\n") + "Sec-WebSocket-Protocol: " + proto + "\r\n\r\n"
	}
	_, err = conn.Write(append([]byte(req), extra...))
	require.NoError(t, err)
	require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	require.Equal(t, proto, resp.Header.Get("Sec-WebSocket-Protocol"))
	return conn, r
}

// TestFirstFrameBehindTheHandshake sends the upgrade request and the first
// command in one write, so the command reaches the server inside the
// handshake's read: it must still be read and answered.
func TestFirstFrameBehindTheHandshake(t *testing.T) {
	base := serve(t, Options{})
	cmd := []byte(`{"id": 7, "method": "subscription.subscribe", "params": {"channels": ["messages"]}}`)
	_, r := dialRaw(t, base, "t1", wstest.ClientFrame(true, wsframe.OpText, cmd, true))
	_, op, payload, err := wstest.ReadFrame(r)
	require.NoError(t, err)
	assert.Equal(t, byte(wsframe.OpText), op)
	var out struct {
		ID   int    `json:"id"`
		Type string `json:"type"`
	}
	require.NoError(t, json.Unmarshal(payload, &out), "%s", payload)
	assert.Equal(t, 7, out.ID)
	assert.Equal(t, "success", out.Type)
}

func TestPingIsAnsweredWithItsPayload(t *testing.T) {
	base := serve(t, Options{})
	conn, r := dialRaw(t, base, "p", nil)
	_, err := conn.Write(wstest.ClientFrame(true, wsframe.OpPing, []byte("hi"), true))
	require.NoError(t, err)
	_, op, payload, err := wstest.ReadFrame(r)
	require.NoError(t, err)
	assert.Equal(t, byte(wsframe.OpPong), op)
	assert.Equal(t, "hi", string(payload))
}

func TestBadControlFramesCloseWith1002(t *testing.T) {
	for name, f := range map[string][]byte{
		"unmasked":   wstest.ClientFrame(true, wsframe.OpPing, nil, false),
		"fragmented": wstest.ClientFrame(false, wsframe.OpPing, nil, true),
		"reserved":   wstest.ClientFrame(true, 0xb, nil, true),
		"too long":   append([]byte{0x89, 0x80 | 126, 0, 200, 1, 2, 3, 4}, make([]byte, 200)...),
	} {
		t.Run(name, func(t *testing.T) {
			base := serve(t, Options{})
			conn, r := dialRaw(t, base, "b", nil)
			_, err := conn.Write(f)
			require.NoError(t, err)
			_, op, payload, err := wstest.ReadFrame(r)
			require.NoError(t, err)
			require.Equal(t, byte(wsframe.OpClose), op)
			require.GreaterOrEqual(t, len(payload), 2)
			assert.Equal(t, uint16(websocket.StatusProtocolError), binary.BigEndian.Uint16(payload))
		})
	}
}

func TestClosingHandshakeFromTheClient(t *testing.T) {
	base := serve(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/threads/c/stream", nil)
	require.NoError(t, err)
	// The library's Close waits for the server's answering close frame and
	// reports an error if it does not come or carries another status.
	require.NoError(t, c.Close(websocket.StatusNormalClosure, "bye"))
}

func TestPingsKeepALiveClientAndDropASilentOne(t *testing.T) {
	// An interval long enough that a busy test machine does not make the
	// live client miss one.
	base := serve(t, Options{PingInterval: 150 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// A live client answers pings while it reads (the library does).
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/threads/k/stream", nil)
	require.NoError(t, err)
	defer c.CloseNow()
	msgs := make(chan string, 4)
	go func() {
		for {
			_, b, err := c.Read(ctx)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(b)
		}
	}()
	// A silent one reads nothing and answers nothing.
	_, silent := dialRaw(t, base, "k", nil)
	time.Sleep(time.Second) // six intervals
	require.NoError(t, c.Write(ctx, websocket.MessageText, []byte(`{"id": 3, "method": "agent.getTree", "params": {}}`)))
	select {
	case m, ok := <-msgs:
		require.True(t, ok, "the live client was dropped")
		assert.Contains(t, m, `"id":3`)
	case <-ctx.Done():
		t.Fatal("no answer")
	}
	// The silent one got pings, then the connection ended.
	pings := 0
	for {
		_, op, _, err := wstest.ReadFrame(silent)
		if err != nil {
			require.ErrorIs(t, err, io.EOF)
			break
		}
		if op == wsframe.OpPing {
			pings++
		}
	}
	assert.GreaterOrEqual(t, pings, 1)
}

// TestShutdownDoesNotWaitForAPeerThatNeverAnswers: the close frame goes
// out, and a peer that does not answer it is dropped after wsframe.CloseTimeout.
func TestShutdownDoesNotWaitForAPeerThatNeverAnswers(t *testing.T) {
	defer func(d time.Duration) { wsframe.CloseTimeout = d }(wsframe.CloseTimeout)
	wsframe.CloseTimeout = 200 * time.Millisecond
	srv := server.New(server.Config{})
	h := New(srv, Options{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.SetPathValue("id", "s")
		h.ServeHTTP(w, r)
	}))
	defer ts.Close()
	defer srv.Close(context.Background())
	_, r := dialRaw(t, ts.URL, "s", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, h.Shutdown(ctx))
	_, op, payload, err := wstest.ReadFrame(r)
	require.NoError(t, err)
	require.Equal(t, byte(wsframe.OpClose), op)
	assert.Equal(t, uint16(websocket.StatusGoingAway), binary.BigEndian.Uint16(payload))
	_, _, _, err = wstest.ReadFrame(r)
	assert.ErrorIs(t, err, io.EOF, "then the connection ends")
}

// TestFramesReadByTheLibrary checks responses the connection frames itself
// through a real client of the library, text and CBOR.
func TestFramesReadByTheLibrary(t *testing.T) {
	base := serve(t, Options{})
	for _, proto := range []string{"", CBORSubprotocol} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		opts := &websocket.DialOptions{}
		if proto != "" {
			opts.Subprotocols = []string{proto}
		}
		c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/threads/t2/stream", opts)
		require.NoError(t, err)
		require.NoError(t, c.Write(ctx, websocket.MessageText, []byte(`{"id": 1, "method": "nope", "params": {}}`)))
		typ, b, err := c.Read(ctx)
		require.NoError(t, err)
		if proto == "" {
			assert.Equal(t, websocket.MessageText, typ)
			assert.Contains(t, string(b), `"unknown_command"`)
		} else {
			assert.Equal(t, websocket.MessageBinary, typ)
			assert.Contains(t, string(b), "unknown_command") // CBOR text strings are stored as is
		}
		c.Close(websocket.StatusNormalClosure, "")
		cancel()
	}
}

func TestCommandRateLimit(t *testing.T) {
	base := serve(t, Options{CommandRate: 1, CommandBurst: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/threads/r/stream", nil)
	require.NoError(t, err)
	defer c.CloseNow()
	var codes []string
	for i := 1; i <= 5; i++ {
		require.NoError(t, c.Write(ctx, websocket.MessageText, []byte(fmt.Sprintf(`{"id": %d, "method": "agent.getTree", "params": {}}`, i))))
		_, b, err := c.Read(ctx)
		require.NoError(t, err)
		var m struct {
			Type  string
			ID    int
			Error string
		}
		require.NoError(t, json.Unmarshal(b, &m))
		require.Equal(t, i, m.ID)
		codes = append(codes, m.Type+" "+m.Error)
	}
	require.Equal(t, []string{"error no_such_run", "error no_such_run", "error no_such_run", "error rate_limited", "error rate_limited"}, codes,
		"a burst of 3 is carried out (no run yet), then the rest is refused")
}

// TestIdleConnectionsAreParked: connections with nothing to read have no
// goroutine (they are parked on the handler's poller), answer pings and
// commands as before, and end when their peers leave.
func TestIdleConnectionsAreParked(t *testing.T) {
	// Pings come long after the last write's deadline passed.
	base, h := serveHandler(t, Options{PingInterval: 150 * time.Millisecond, WriteTimeout: 30 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = 40
	type client struct {
		c    *websocket.Conn
		msgs chan string
	}
	clients := make([]client, n)
	for i := range clients {
		c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+fmt.Sprintf("/threads/idle-%d/stream", i%4), nil)
		require.NoError(t, err)
		msgs := make(chan string, 16)
		go func() { // reads, and so answers pings, as a client does
			defer close(msgs)
			for {
				_, b, err := c.Read(ctx)
				if err != nil {
					return
				}
				msgs <- string(b)
			}
		}()
		clients[i] = client{c, msgs}
	}
	// command sends one command and waits for its answer.
	command := func(cl client, id int, method, params string) {
		t.Helper()
		require.NoError(t, cl.c.Write(ctx, websocket.MessageText, fmt.Appendf(nil, `{"id": %d, "method": %q, "params": %s}`, id, method, params)))
		select {
		case m, ok := <-cl.msgs:
			require.True(t, ok, "the connection was dropped")
			require.Contains(t, m, fmt.Sprintf(`"id":%d`, id))
		case <-ctx.Done():
			t.Fatal("no answer")
		}
	}
	ask := func(cl client, id int) { command(cl, id, "agent.getTree", "{}") }
	for i, cl := range clients {
		if i%2 == 0 {
			ask(cl, i)
		} else {
			command(cl, i, "subscription.subscribe", `{"channels": ["custom:firehose"]}`) // as watchers are
		}
	}
	require.Eventually(t, func() bool { return h.idle.Parked() == n }, 5*time.Second, 5*time.Millisecond, "every idle connection parked")
	time.Sleep(750 * time.Millisecond) // five pings, each answered by a pong that resumes the connection
	for i, cl := range clients {
		ask(cl, n+i) // still served
	}
	require.Eventually(t, func() bool { return h.idle.Parked() == n }, 5*time.Second, 5*time.Millisecond, "parked again")

	for _, cl := range clients[:n/2] {
		cl.c.CloseNow() // the peer leaves without a closing handshake
	}
	require.Eventually(t, func() bool {
		h.mu.Lock()
		open := len(h.conns)
		h.mu.Unlock()
		return open == n/2 && h.idle.Parked() == n/2
	}, 5*time.Second, 5*time.Millisecond, "a parked connection whose peer left ends")
	for _, cl := range clients[n/2:] {
		cl.c.CloseNow()
	}
}

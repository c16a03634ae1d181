package ws

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/server"
	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve runs a WebSocket handler for /threads/{id}/stream on loopback.
func serve(t *testing.T, opts Options) string {
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
	return ts.URL
}

// readFrame decodes one server frame (unmasked) straight from RFC 6455
// section 5.2, independently of the code under test.
func readFrame(r *bufio.Reader) (fin bool, opcode byte, payload []byte, err error) {
	var h [2]byte
	if _, err = io.ReadFull(r, h[:]); err != nil {
		return
	}
	fin, opcode = h[0]&0x80 != 0, h[0]&0x0f
	if h[0]&0x70 != 0 || h[1]&0x80 != 0 {
		return fin, opcode, nil, io.ErrUnexpectedEOF // reserved bits or a mask from a server
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err = io.ReadFull(r, b[:]); err != nil {
			return
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err = io.ReadFull(r, b[:]); err != nil {
			return
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	payload = make([]byte, n)
	_, err = io.ReadFull(r, payload)
	return
}

func TestAppendFrameLengths(t *testing.T) {
	// The three length encodings and their edges.
	for _, n := range []int{0, 1, 125, 126, 127, 65535, 65536, 1 << 20} {
		payload := []byte(strings.Repeat("x", n))
		b := appendFrame(nil, opText, payload)
		fin, op, got, err := readFrame(bufio.NewReader(strings.NewReader(string(b))))
		require.NoError(t, err, "length %d", n)
		assert.True(t, fin)
		assert.Equal(t, byte(opText), op)
		assert.Equal(t, n, len(got), "length %d", n)
	}
}

func TestNoDataFrameAfterClose(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c := &batchConn{Conn: a}
	go func() { _, _ = io.Copy(io.Discard, b) }()
	// The library writes a close frame (outside a batch): data frames stop.
	_, err := c.Write([]byte{0x80 | opClose, 2, 0x03, 0xe9})
	require.NoError(t, err)
	c.begin()
	assert.ErrorIs(t, c.frame(opText, []byte(`{}`)), errClosed)
	require.NoError(t, c.flush(time.Second))
	// A pong is not a close.
	d := &batchConn{Conn: a}
	_, err = d.Write([]byte{0x80 | 0xa, 0})
	require.NoError(t, err)
	d.begin()
	assert.NoError(t, d.frame(opText, []byte(`{}`)))
	require.NoError(t, d.flush(time.Second))
}

// TestFirstFrameBehindTheHandshake sends the upgrade request and the first
// command in one write, so the command reaches the server inside the
// handshake's read: it must still be read and answered.
func TestFirstFrameBehindTheHandshake(t *testing.T) {
	base := serve(t, Options{})
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	cmd := []byte(`{"id": 7, "method": "subscription.subscribe", "params": {"channels": ["messages"]}}`)
	req := "GET /threads/t1/stream HTTP/1.1\r\nHost: " + strings.TrimPrefix(base, "http://") +
		"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	// A client frame is masked.
	frame := []byte{0x81, 0x80 | byte(len(cmd)), 1, 2, 3, 4}
	for i, c := range cmd {
		frame = append(frame, c^[]byte{1, 2, 3, 4}[i%4])
	}
	_, err = conn.Write(append([]byte(req), frame...))
	require.NoError(t, err)
	require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	_, op, payload, err := readFrame(r)
	require.NoError(t, err)
	assert.Equal(t, byte(opText), op)
	var out struct {
		ID   int    `json:"id"`
		Type string `json:"type"`
	}
	require.NoError(t, json.Unmarshal(payload, &out), "%s", payload)
	assert.Equal(t, 7, out.ID)
	assert.Equal(t, "success", out.Type)
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

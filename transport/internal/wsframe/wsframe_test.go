package wsframe

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentstream/agentstream/internal/testkit/wstest"
	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestAppendFrameLengths(t *testing.T) {
	// The three length encodings and their edges.
	for _, n := range []int{0, 1, 125, 126, 127, 65535, 65536, 1 << 20} {
		payload := []byte(strings.Repeat("x", n))
		b := AppendFrame(nil, OpText, payload)
		fin, op, got, err := wstest.ReadFrame(bufio.NewReader(bytes.NewReader(b)))
		require.NoError(t, err, "length %d", n)
		assert.True(t, fin)
		assert.Equal(t, byte(OpText), op)
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
	_, err := c.Write([]byte{0x80 | OpClose, 2, 0x03, 0xe9})
	require.NoError(t, err)
	c.begin()
	assert.ErrorIs(t, c.frame(OpText, []byte(`{}`)), ErrClosed)
	require.NoError(t, c.flush(time.Second))
	// A pong is not a close.
	d := &batchConn{Conn: a}
	_, err = d.Write([]byte{0x80 | OpPong, 0})
	require.NoError(t, err)
	d.begin()
	assert.NoError(t, d.frame(OpText, []byte(`{}`)))
	require.NoError(t, d.flush(time.Second))
}

// recordingConn records each Write the library makes on the connection.
type recordingConn struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
}

func (r *recordingConn) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.writes = append(r.writes, bytes.Clone(p))
	r.mu.Unlock()
	return r.Conn.Write(p)
}

func (r *recordingConn) take() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.writes
	r.writes = nil
	return w
}

// recordingWriter hands Accept a hijacked connection that records writes.
type recordingWriter struct {
	http.ResponseWriter
	hijacked bool
	rec      *recordingConn
}

func (w *recordingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.hijacked = true
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.rec = &recordingConn{Conn: c}
	return w.rec, brw, nil
}

// accepted is the server side of a test connection.
type accepted struct {
	hijacked bool
	c        *Conn
	rec      *recordingConn
	bw       *batchWriter
}

// acceptOne serves one WebSocket on loopback and returns the server side
// and the raw client socket, past the 101, with extra sent right behind
// the handshake.
func acceptOne(t *testing.T, extra []byte) (*accepted, net.Conn, *bufio.Reader) {
	t.Helper()
	got := make(chan *accepted, 1)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &recordingWriter{ResponseWriter: w}
		bw := &batchWriter{ResponseWriter: rw}
		ws, err := websocket.Accept(bw, r, nil)
		if err != nil {
			got <- nil
			return
		}
		bw.restoreAhead()
		got <- &accepted{hijacked: rw.hijacked, c: &Conn{ws: ws, raw: bw.conn, br: bw.br, rc: rawConnOf(bw.conn.Conn), writeTimeout: time.Second, closeTimeout: CloseTimeout}, rec: rw.rec, bw: bw}
	}))
	t.Cleanup(ts.Close)
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
	const upgrade = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	_, err = conn.Write(append([]byte(upgrade), extra...))
	require.NoError(t, err)
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	a := <-got
	require.NotNil(t, a)
	require.True(t, a.hijacked, "1: Accept hijacked through the writer it was given")
	t.Cleanup(a.c.CloseNow)
	return a, conn, r
}

// requireOneFrame fails unless w is exactly one whole frame of opcode op.
func requireOneFrame(t *testing.T, w []byte, op byte) {
	t.Helper()
	br := bufio.NewReader(bytes.NewReader(w))
	_, got, _, err := wstest.ReadFrame(br)
	require.NoError(t, err)
	require.Equal(t, op, got)
	require.Zero(t, br.Buffered(), "the write is one whole frame")
}

// TestLibraryBehaviours checks each behaviour of coder/websocket that the
// package doc lists as relied on. If an upgrade of the library breaks
// one, this fails: read the package doc before changing anything here.
func TestLibraryBehaviours(t *testing.T) {
	t.Run("2 and 4: bytes read ahead of the upgrade are read as the first message", func(t *testing.T) {
		a, _, _ := acceptOne(t, wstest.ClientFrame(true, OpText, []byte("first"), true))
		require.Positive(t, a.c.br.Buffered(), "back in the reader's buffer, where waiting on the socket is not needed")
		require.NoError(t, a.c.AwaitMessage())
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		typ, data, err := a.c.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, websocket.MessageText, typ)
		require.Equal(t, "first", string(data))
	})
	t.Run("3 and 4: control frames are whole writes; control frames consumed before a message are not seen again", func(t *testing.T) {
		a, conn, r := acceptOne(t, nil)
		a.rec.take()
		// A ping inside Read is answered by the library.
		_, err := conn.Write(append(wstest.ClientFrame(true, OpPing, []byte("p1"), true), wstest.ClientFrame(true, OpText, []byte("m"), true)...))
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, data, err := a.c.ws.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, "m", string(data))
		_, op, payload, err := wstest.ReadFrame(r)
		require.NoError(t, err)
		require.Equal(t, byte(OpPong), op)
		require.Equal(t, "p1", string(payload))
		writes := a.rec.take()
		require.Len(t, writes, 1)
		requireOneFrame(t, writes[0], OpPong)
		// A ping between messages is answered here, and the library's Read
		// starts at the message after it.
		_, err = conn.Write(append(wstest.ClientFrame(true, OpPing, []byte("p2"), true), wstest.ClientFrame(true, OpText, []byte("n"), true)...))
		require.NoError(t, err)
		require.NoError(t, a.c.AwaitMessage())
		_, data, err = a.c.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, "n", string(data))
		_, op, payload, err = wstest.ReadFrame(r)
		require.NoError(t, err)
		require.Equal(t, byte(OpPong), op)
		require.Equal(t, "p2", string(payload))
		// The library's close is one write too.
		a.rec.take()
		closed := make(chan struct{})
		go func() { _ = a.c.ws.Close(websocket.StatusNormalClosure, "bye"); close(closed) }()
		_, op, payload, err = wstest.ReadFrame(r)
		require.NoError(t, err)
		require.Equal(t, byte(OpClose), op)
		_, err = conn.Write(wstest.ClientFrame(true, OpClose, payload[:2], true))
		require.NoError(t, err)
		<-closed
		writes = a.rec.take()
		require.Len(t, writes, 1)
		requireOneFrame(t, writes[0], OpClose)
	})
	t.Run("5: a message over the read limit closes with 1009; CloseNow closes the socket", func(t *testing.T) {
		a, conn, r := acceptOne(t, nil)
		a.c.ws.SetReadLimit(10) // the library's own check, without AwaitMessage's
		_, err := conn.Write(wstest.ClientFrame(true, OpText, []byte(strings.Repeat("x", 100)), true))
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _, err = a.c.Read(ctx)
		require.Error(t, err)
		_, op, payload, err := wstest.ReadFrame(r)
		require.NoError(t, err)
		require.Equal(t, byte(OpClose), op)
		require.Equal(t, []byte{0x03, 0xf1}, payload[:2], "1009")
		a.c.CloseNow()
		_, _, _, err = wstest.ReadFrame(r)
		require.ErrorIs(t, err, io.EOF)
	})
}

func TestCloseWithGivesThePeerCloseTimeout(t *testing.T) {
	defer func(d time.Duration) { CloseTimeout = d }(CloseTimeout)
	CloseTimeout = 100 * time.Millisecond
	a, _, r := acceptOne(t, nil)
	a.c.CloseWith(4429, "slow")
	_, op, payload, err := wstest.ReadFrame(r)
	require.NoError(t, err)
	require.Equal(t, byte(OpClose), op)
	require.Equal(t, fmt.Sprint(4429), fmt.Sprint(int(payload[0])<<8|int(payload[1])))
	require.ErrorIs(t, a.c.Send(OpText, []byte("late")), ErrClosed, "nothing after a close frame")
	start := time.Now()
	require.Error(t, a.c.AwaitMessage(), "the peer never answers: the read deadline ends it")
	require.Less(t, time.Since(start), 5*time.Second)
}

// FuzzAwaitMessage feeds arbitrary client bytes to the frame handling
// between messages: it must never panic, and must stop at a data frame,
// at the end of the input, or with an error.
//
//	go test ./transport/internal/wsframe -run '^$' -fuzz FuzzAwaitMessage -fuzztime 60s
func FuzzAwaitMessage(f *testing.F) {
	f.Add(wstest.ClientFrame(true, OpPing, []byte("hi"), true))
	f.Add(wstest.ClientFrame(true, OpPong, nil, true))
	f.Add(wstest.ClientFrame(true, OpClose, []byte{3, 232}, true))
	f.Add(wstest.ClientFrame(true, OpClose, []byte{3}, true))
	f.Add(wstest.ClientFrame(true, OpText, []byte("{}"), true))
	f.Add(wstest.ClientFrame(false, OpPing, nil, true))
	f.Add(append(wstest.ClientFrame(true, OpPing, nil, true), wstest.ClientFrame(true, OpText, nil, true)...))
	f.Add([]byte{0x89})
	f.Fuzz(func(t *testing.T, in []byte) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		go func() { _, _ = io.Copy(io.Discard, b) }()
		c := &Conn{raw: &batchConn{Conn: a}, br: bufio.NewReader(bytes.NewReader(in)), writeTimeout: time.Second, closeTimeout: time.Second}
		err := c.AwaitMessage()
		if err == nil {
			h, perr := c.br.Peek(1)
			require.NoError(t, perr)
			require.Zero(t, h[0]&0x08, "stopped at a data frame")
		}
	})
}

func TestInputPending(t *testing.T) {
	a, conn, _ := acceptOne(t, nil)
	require.True(t, a.c.InputPending(), "until the connection first waits")
	done := make(chan error, 1)
	go func() { done <- a.c.AwaitMessage() }()
	require.Eventually(t, func() bool { return !a.c.InputPending() }, 5*time.Second, time.Millisecond, "waiting with nothing received")
	_, err := conn.Write(wstest.ClientFrame(true, OpText, []byte("x"), true))
	require.NoError(t, err)
	require.NoError(t, <-done)
	require.True(t, a.c.InputPending(), "a message is at the head, not yet read")
}

// A frame whose header declares more than the read limit is refused with
// 1009 at once, before any of its payload arrives.
func TestOversizedFrameIsRefusedAtItsHeader(t *testing.T) {
	a, conn, r := acceptOne(t, nil)
	a.c.SetReadLimit(1 << 20)
	// A text frame declaring 2^40 bytes, masked, with no payload sent.
	hdr := []byte{0x81, 0x80 | 127, 0, 0, 1, 0, 0, 0, 0, 0, 1, 2, 3, 4}
	_, err := conn.Write(hdr)
	require.NoError(t, err)
	require.ErrorIs(t, a.c.AwaitMessage(), ErrTooBig)
	_, op, payload, err := wstest.ReadFrame(r)
	require.NoError(t, err)
	require.Equal(t, byte(OpClose), op)
	require.Equal(t, []byte{0x03, 0xf1}, payload[:2], "1009")
}

func TestCloseFramesAreChecked(t *testing.T) {
	for name, tc := range map[string]struct {
		payload []byte
		answer  uint16
	}{
		"normal":           {[]byte{0x03, 0xe8}, 1000},
		"empty":            {nil, 0},
		"application":      {[]byte{0x0f, 0xa0, 'o', 'k'}, 4000},
		"999":              {[]byte{0x03, 0xe7}, 1002},
		"1005 on the wire": {[]byte{0x03, 0xed}, 1002},
		"5000":             {[]byte{0x13, 0x88}, 1002},
		"bad reason":       {[]byte{0x03, 0xe8, 0xff, 0xfe}, 1002},
	} {
		t.Run(name, func(t *testing.T) {
			a, conn, r := acceptOne(t, nil)
			_, err := conn.Write(wstest.ClientFrame(true, OpClose, tc.payload, true))
			require.NoError(t, err)
			err = a.c.AwaitMessage()
			_, op, payload, rerr := wstest.ReadFrame(r)
			require.NoError(t, rerr)
			require.Equal(t, byte(OpClose), op)
			if tc.answer == 0 {
				require.ErrorIs(t, err, ErrPeerClosed)
				require.Empty(t, payload)
				return
			}
			require.Equal(t, tc.answer, uint16(payload[0])<<8|uint16(payload[1]))
			if tc.answer == 1002 {
				require.ErrorIs(t, err, ErrProtocol)
			} else {
				require.ErrorIs(t, err, ErrPeerClosed)
			}
		})
	}
}

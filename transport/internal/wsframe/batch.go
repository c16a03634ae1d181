package wsframe

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/agentstream/agentstream/transport/internal/pace"
)

// ErrClosed is returned for a frame written after the close frame.
var ErrClosed = errors.New("wsframe: the WebSocket is closing")

// batchConn is the hijacked connection under a WebSocket. The library
// reads frames and writes the control frames (pong, ping, close); the
// connection writes its data frames itself, into a batch that reaches the
// socket as one write: a server's frames are unmasked, so a frame is a
// header and the payload as is, and a batch of events is one syscall while
// staying one WebSocket message per event.
//
// Every write of the library is one whole control frame (its buffer is
// flushed after each frame and a control frame fits in it), so a frame the
// connection appends never lands inside one of the library's, and a close
// frame is seen going out: after it nothing more is written.
type batchConn struct {
	net.Conn
	mu     sync.Mutex
	buf    *[]byte // the open batch; nil outside one
	closed bool    // a close frame went out
	// deadline bounds every write, the library's included (timeout,
	// Accept's write timeout, for those).
	deadline pace.WriteDeadline
	timeout  time.Duration
}

// Write is the library's path: one control frame, gathered into the open
// batch if there is one.
func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return len(p), nil // nothing follows a close frame (the library may echo one)
	}
	if len(p) > 0 && p[0]&0x0f == OpClose {
		b.closed = true
	}
	if b.buf != nil {
		*b.buf = append(*b.buf, p...)
		return len(p), nil
	}
	b.arm(b.timeout)
	return b.Conn.Write(p)
}

// arm bounds the next write by timeout (see pace.WriteDeadline); a zero
// timeout leaves it as it is. The caller holds b.mu.
func (b *batchConn) arm(timeout time.Duration) {
	if timeout > 0 {
		b.deadline.Arm(b.Conn, timeout)
	}
}

// begin opens a batch.
func (b *batchConn) begin() {
	b.mu.Lock()
	if b.buf == nil {
		b.buf = pace.GetBuffer()
	}
	b.mu.Unlock()
}

// frame appends one data frame (FIN set, unmasked) to the open batch.
func (b *batchConn) frame(opcode byte, payload []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	*b.buf = AppendFrame(*b.buf, opcode, payload)
	return nil
}

// control sends a control frame now: into the open batch if there is one
// (its owner flushes it), otherwise straight to the socket within timeout.
// Nothing is sent after a close frame.
func (b *batchConn) control(opcode byte, payload []byte, timeout time.Duration) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	if opcode == OpClose {
		b.closed = true
	}
	if b.buf != nil {
		*b.buf = AppendFrame(*b.buf, opcode, payload)
		return nil
	}
	var f [2 + 125]byte
	b.arm(timeout)
	_, err := b.Conn.Write(AppendFrame(f[:0], opcode, payload))
	return err
}

// errWouldBlock: the socket would not take a write without waiting.
var errWouldBlock = errors.New("wsframe: the write would wait")

// tryControl sends an empty control frame without waiting: into the open
// batch, or straight to the socket rc when it takes the frame at once. It
// reports false, having sent nothing, when that would wait (the batch's
// lock is held by a write under way, or the socket's buffer is full): the
// caller then sends it with control on a goroutine of its own.
func (b *batchConn) tryControl(opcode byte, rc syscall.RawConn) bool {
	if !b.mu.TryLock() {
		return false
	}
	if b.closed {
		b.mu.Unlock()
		return true // nothing follows a close frame
	}
	if b.buf != nil {
		*b.buf = AppendFrame(*b.buf, opcode, nil)
		b.mu.Unlock()
		return true
	}
	f := AppendFrame(make([]byte, 0, 2), opcode, nil)
	n, err := writeNow(rc, f)
	switch {
	case err != nil && n == 0:
		b.mu.Unlock()
		return !errors.Is(err, errWouldBlock) // a failed socket: its reader finds out
	case n < len(f):
		// Part of the frame went out: the rest must follow before
		// anything else, so the lock goes with it (a sync.Mutex may be
		// unlocked by another goroutine).
		go func() {
			defer b.mu.Unlock()
			b.arm(b.timeout)
			_, _ = b.Conn.Write(f[n:])
		}()
		return true
	}
	b.mu.Unlock()
	return true
}

// AppendFrame appends a server's frame: header, then the payload.
func AppendFrame(dst []byte, opcode byte, payload []byte) []byte {
	n := len(payload)
	dst = append(dst, 0x80|opcode)
	switch {
	case n <= 125:
		dst = append(dst, byte(n))
	case n <= 0xffff:
		dst = append(dst, 126, byte(n>>8), byte(n))
	default:
		dst = append(dst, 127, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32), byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(dst, payload...)
}

// flush closes the batch and writes what it gathered, within timeout.
func (b *batchConn) flush(timeout time.Duration) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	bp := b.buf
	b.buf = nil
	if bp == nil {
		return nil
	}
	defer pace.PutBuffer(bp)
	if len(*bp) == 0 {
		return nil
	}
	b.arm(timeout)
	_, err := b.Conn.Write(*bp)
	return err
}

// bufSize is the size of the library's reader and writer buffers: a
// control frame (at most 2 + 125 bytes from a server) must fit the writer
// whole, so that it reaches batchConn in one Write.
const bufSize = 128

// batchWriter makes Accept hijack a batchConn.
type batchWriter struct {
	http.ResponseWriter
	conn *batchConn
	br   *bufio.Reader // the library's reader, which the connection peeks
	// ahead is what net/http had read past the request. Accept moves it
	// from br's buffer to the front of br's source; restoreAhead pulls it
	// back in.
	ahead int
}

// restoreAhead buffers again what Accept moved out of br's buffer, so that
// waiting on the socket (which will not signal those bytes) does not miss
// it. Call it once Accept has returned.
func (w *batchWriter) restoreAhead() {
	if w.ahead > 0 {
		_, _ = w.br.Peek(1) // from the bytes Accept put in front: no wait
	}
}

func (w *batchWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.conn = &batchConn{Conn: c}
	// Small buffers keep idle connections small: the library writes only
	// control frames (each fits), and clients send few commands; a frame
	// larger than the reader's buffer is read straight from the socket.
	// net/http's 4 KiB reader is let go. What it had read ahead (a client
	// may send its first frame right behind the handshake) is moved into
	// the new reader's buffer, where Accept's own hand-over keeps it.
	br := bufio.NewReaderSize(w.conn, bufSize)
	if n := brw.Reader.Buffered(); n > 0 {
		ahead, _ := brw.Reader.Peek(n)
		br = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(bytes.Clone(ahead)), w.conn), max(bufSize, n))
		if _, err := br.Peek(n); err != nil {
			return nil, nil, err
		}
		w.ahead = n
	}
	w.br = br
	return w.conn, bufio.NewReadWriter(br, bufio.NewWriterSize(w.conn, bufSize)), nil
}

func (w *batchWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

package ws

import (
	"bufio"
	"net"
	"net/http"
	"sync"
	"time"
)

// batchConn is the hijacked connection under a WebSocket. The library
// flushes every message with its own write; while a batch is open, those
// writes are gathered here and reach the socket as one write when the
// batch is flushed, still one WebSocket message per event. Outside a batch
// (handshake, pongs, close frames) writes go straight through.
type batchConn struct {
	net.Conn
	mu       sync.Mutex
	batching bool
	buf      []byte
}

func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.batching {
		b.buf = append(b.buf, p...)
		return len(p), nil
	}
	return b.Conn.Write(p)
}

// begin opens a batch.
func (b *batchConn) begin() {
	b.mu.Lock()
	b.batching = true
	b.mu.Unlock()
}

// flush closes the batch and writes what it gathered, within timeout.
func (b *batchConn) flush(timeout time.Duration) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.batching = false
	if len(b.buf) == 0 {
		return nil
	}
	_ = b.Conn.SetWriteDeadline(time.Now().Add(timeout))
	_, err := b.Conn.Write(b.buf)
	_ = b.Conn.SetWriteDeadline(time.Time{})
	if cap(b.buf) > 1<<20 {
		b.buf = nil // do not keep a burst's buffer for an idle connection
	} else {
		b.buf = b.buf[:0]
	}
	return err
}

// batchWriter makes Accept hijack a batchConn.
type batchWriter struct {
	http.ResponseWriter
	conn *batchConn
}

func (w *batchWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.conn = &batchConn{Conn: c}
	// The batchConn buffers anyway; a small writer keeps idle connections
	// small (the library flushes after every frame).
	return w.conn, bufio.NewReadWriter(brw.Reader, bufio.NewWriterSize(w.conn, 512)), nil
}

func (w *batchWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

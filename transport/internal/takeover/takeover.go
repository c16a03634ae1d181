// Package takeover serves an HTTP/1.1 streaming response on a connection
// taken over from net/http, in one place: the SSE transport's streams are
// written by a paced writer, one chunk of the chunked transfer coding per
// batch and one write per chunk, with no goroutine parked in the handler
// and no net/http buffering between the batch and the socket.
//
// # What it relies on in net/http
//
// Each of these is checked by a test in this package, which fails if a Go
// release changes one:
//
//  1. http.ResponseController.Hijack works on an HTTP/1.x connection
//     (TestHijackGivesTheConnection) and, after it, net/http writes
//     nothing on the connection: the response head is ours alone, and the
//     handler's headers are not sent unless we send them
//     (TestNothingWrittenAfterHijack).
//  2. The bufio.Reader that Hijack returns holds what the server read past
//     the request: a pipelined request shows as Buffered() > 0
//     (TestPipelinedRequestIsBuffered).
//  3. Hijack clears the deadlines the server set on the connection
//     (ReadTimeout, WriteTimeout): a stream outlives them
//     (TestHijackClearsDeadlines).
//  4. http.Header.Write writes the handler's headers as "Key: value" lines
//     with canonical keys, and net/http's client reads the head we write,
//     our chunks and the last chunk as a chunked body, and closes the
//     connection after it because of Connection: close
//     (TestClientReadsTheStream).
package takeover

import (
	"bytes"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/agentstream/agentstream/transport/internal/pace"
)

// ChunkRoom is the room a batch leaves in front of itself for its chunk
// header: up to 8 hex digits of size and CRLF.
const ChunkRoom = 10

// Conn is a response taken over from net/http: the head written, the body
// to come in chunks.
type Conn struct {
	conn     net.Conn
	timeout  time.Duration
	deadline pace.WriteDeadline
	sent     bool // the client had sent more than its request
}

// Hijack takes the connection of w's HTTP/1.1 response from net/http and
// writes the response head: status 200, w's headers, Transfer-Encoding:
// chunked and Connection: close (the connection serves this one
// response). Each write is given timeout. ok is false, and nothing
// touched, when net/http does not give the connection up.
func Hijack(w http.ResponseWriter, timeout time.Duration) (_ *Conn, ok bool) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, false
	}
	// A request pipelined behind this one is something the client sent
	// after its request: the stream ends at once, as it would on reading it.
	c := &Conn{conn: conn, timeout: timeout, sent: brw.Reader.Buffered() > 0}
	_ = conn.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := conn.Write(responseHead(w.Header())); err != nil {
		c.sent = true // nothing to wait for: the stream ends at once
	}
	_ = conn.SetWriteDeadline(time.Time{})
	return c, true
}

// Wait returns when the client goes, sends something (a client sends
// nothing after its request), or the writer closes the connection.
func (c *Conn) Wait() {
	if !c.sent {
		var b [1]byte
		_, _ = c.conn.Read(b[:])
	}
}

// Write sends buf[ChunkRoom:] as one chunk (nothing when it is empty),
// writing its header into the room in front, and when last the chunk that
// ends the body; one write on the connection, bounded by the timeout.
func (c *Conn) Write(buf []byte, last bool) error {
	out := chunk(buf)
	if last {
		out = append(out, "0\r\n\r\n"...)
	}
	if len(out) == 0 {
		return nil
	}
	c.deadline.Arm(c.conn, c.timeout)
	_, err := c.conn.Write(out)
	return err
}

// Close closes the connection, which ends the response.
func (c *Conn) Close() { c.conn.Close() }

// responseHead is an HTTP/1.1 response head for a chunked stream with the
// handler's headers, and Connection: close, as a taken-over connection
// serves one stream.
func responseHead(hdr http.Header) []byte {
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 200 OK\r\n")
	hdr = hdr.Clone()
	hdr.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	hdr.Set("Transfer-Encoding", "chunked")
	// The connection closes when the stream ends: a client must not send
	// its next request on it (it would be reset).
	hdr.Set("Connection", "close")
	_ = hdr.Write(&b)
	b.WriteString("\r\n")
	return b.Bytes()
}

// chunk frames buf[ChunkRoom:] as one chunk, writing its header into the
// room in front; an empty payload gives an empty slice.
func chunk(buf []byte) []byte {
	size := len(buf) - ChunkRoom
	if size == 0 {
		return buf[:0]
	}
	var hdr [ChunkRoom]byte
	h := strconv.AppendUint(hdr[:0], uint64(size), 16)
	h = append(h, '\r', '\n')
	start := ChunkRoom - len(h)
	copy(buf[start:], h)
	return append(buf[start:], '\r', '\n')
}

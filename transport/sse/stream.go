package sse

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport/internal/pace"
)

// chunkRoom is the room left in front of a batch for its chunk header:
// up to 8 hex digits of size and CRLF.
const chunkRoom = 10

// sink is where a stream's batches go: a taken-over connection, or the
// handler's ResponseWriter.
type sink interface {
	// write sends buf[chunkRoom:] (the room in front is for a chunk
	// header) and, when last, ends the response.
	write(buf []byte, last bool) error
	// end ends the stream from the writer's side: after the last batch,
	// or when a write failed.
	end()
}

// stream is one SSE stream, served the same way on either sink: a paced
// writer sends what is ready, a timer asks for heartbeats, and the
// goroutine in run owns the stream until it ends.
type stream struct {
	h       *Handler
	session *server.Session
	out     sink
	writer  *pace.Writer

	lastWrite atomic.Int64 // on the pacer's clock
	beatDue   atomic.Bool
	ending    atomic.Bool // the handler is shutting down

	tmu     sync.Mutex
	timer   *time.Timer // heartbeat
	stopped bool
}

// newStream starts the clock of a stream whose response head has just
// gone out.
func newStream(h *Handler, session *server.Session, out sink) *stream {
	s := &stream{h: h, session: session, out: out}
	s.writer = h.pacer.NewWriter(s.write, s.pending)
	s.lastWrite.Store(int64(time.Since(h.pacer.Epoch())))
	return s
}

// run serves the stream until wait returns (the client went, or the
// writer ended the stream), then releases it. It accounts for the stream
// in the handler's wait group, which the caller added to.
func (s *stream) run(wait func()) {
	defer s.h.wg.Done()
	s.h.open.Add(1)
	defer s.h.open.Add(-1)
	if s.h.opts.OnStream != nil {
		defer s.h.opts.OnStream()()
	}
	stopShutdown := context.AfterFunc(s.h.ctx, func() {
		s.ending.Store(true)
		s.writer.Kick()
	})
	s.tmu.Lock()
	s.timer = time.AfterFunc(s.h.opts.Heartbeat, s.beat)
	s.tmu.Unlock()
	s.session.SetNotify(server.SessionNotify{Ready: s.writer.Kick})
	wait()
	stopShutdown()
	s.tmu.Lock()
	s.stopped = true
	s.timer.Stop()
	s.tmu.Unlock()
	s.session.Close()
	s.out.end() // makes a write under way fail at once
	s.writer.Stop()
}

// beat asks for a heartbeat when the stream has been quiet for the
// heartbeat interval, and checks again when it next could be.
func (s *stream) beat() {
	hb := s.h.opts.Heartbeat
	quiet := time.Since(s.h.pacer.Epoch()) - time.Duration(s.lastWrite.Load())
	next := hb - quiet
	if next <= hb/20 {
		s.beatDue.Store(true)
		s.writer.Kick()
		next = hb
	}
	s.tmu.Lock()
	if !s.stopped {
		s.timer.Reset(next)
	}
	s.tmu.Unlock()
}

func (s *stream) pending() bool {
	return s.session.Pending() || s.beatDue.Load() || s.ending.Load()
}

// write sends what is ready, a batch per write. It sends the last batch
// and ends the stream when the subscription ends (a slow consumer is told
// where to resume) or the server shuts down.
func (s *stream) write() bool {
	bp := pace.GetBuffer()
	defer pace.PutBuffer(bp)
	for {
		buf := append((*bp)[:0], make([]byte, chunkRoom)...)
		buf, n, endErr := s.h.appendReady(buf, s.session)
		if s.beatDue.Swap(false) && n == 0 {
			buf = append(buf, heartbeatComment...)
		}
		last := s.ending.Load() || (n == 0 && endErr != nil)
		if last {
			buf = appendEnd(buf, endErr)
		}
		*bp = buf
		if len(buf) == chunkRoom && !last {
			return true
		}
		err := s.out.write(buf, last)
		s.lastWrite.Store(int64(time.Since(s.h.pacer.Epoch())))
		if err != nil || last {
			s.out.end()
			return false
		}
		if n > 0 && s.h.opts.OnDeliver != nil {
			s.h.opts.OnDeliver(n)
		}
		if n < s.h.opts.MaxBatch {
			return true
		}
	}
}

// handlerSink writes to the ResponseWriter of a handler that waits for
// the stream to end; net/http does the framing.
type handlerSink struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	done    chan struct{} // closed by end
	once    sync.Once
}

func (o *handlerSink) write(buf []byte, last bool) error {
	p := buf[chunkRoom:]
	if len(p) == 0 {
		return nil // the response ends when the handler returns
	}
	_ = o.rc.SetWriteDeadline(time.Now().Add(o.timeout))
	if _, err := o.w.Write(p); err != nil {
		return err
	}
	return o.rc.Flush()
}

func (o *handlerSink) end() { o.once.Do(func() { close(o.done) }) }

// connSink writes an HTTP/1.1 response taken over from net/http: a batch
// is one chunk of the chunked transfer coding, and one write.
type connSink struct {
	conn     net.Conn
	timeout  time.Duration
	deadline pace.WriteDeadline
	sent     bool // the client had sent more than its request
}

// takeOver hijacks an HTTP/1.1 stream from net/http and writes its
// response head; ok is false, and nothing touched, when the stream must
// stay on the handler goroutine.
func (h *Handler) takeOver(w http.ResponseWriter, r *http.Request) (_ *connSink, ok bool) {
	if h.opts.KeepHandler || r.ProtoMajor != 1 || r.ProtoMinor < 1 {
		return nil, false
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, false
	}
	// A request pipelined behind this one is something the client sent
	// after its request: the stream ends at once, as it would on reading it.
	out := &connSink{conn: conn, timeout: h.opts.WriteTimeout, sent: brw.Reader.Buffered() > 0}
	_ = conn.SetWriteDeadline(time.Now().Add(h.opts.WriteTimeout))
	if _, err := conn.Write(responseHead(w.Header())); err != nil {
		out.sent = true // nothing to wait for: the stream ends at once
	}
	_ = conn.SetWriteDeadline(time.Time{})
	return out, true
}

// wait returns when the client goes, sends something (a client sends
// nothing after its request), or the writer closes the connection.
func (o *connSink) wait() {
	if !o.sent {
		var b [1]byte
		_, _ = o.conn.Read(b[:])
	}
}

func (o *connSink) write(buf []byte, last bool) error {
	out := chunk(buf)
	if last {
		out = append(out, "0\r\n\r\n"...)
	}
	if len(out) == 0 {
		return nil
	}
	o.deadline.Arm(o.conn, o.timeout)
	_, err := o.conn.Write(out)
	return err
}

func (o *connSink) end() { o.conn.Close() }

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

// chunk frames buf[chunkRoom:] as one chunk, writing its header into the
// room in front; an empty payload gives an empty slice.
func chunk(buf []byte) []byte {
	size := len(buf) - chunkRoom
	if size == 0 {
		return buf[:0]
	}
	var hdr [chunkRoom]byte
	h := strconv.AppendUint(hdr[:0], uint64(size), 16)
	h = append(h, '\r', '\n')
	start := chunkRoom - len(h)
	copy(buf[start:], h)
	return append(buf[start:], '\r', '\n')
}

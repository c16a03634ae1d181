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

// takeOver hijacks an HTTP/1.1 stream from net/http and serves it from
// here on; it reports false, having touched nothing, when the stream must
// stay on the handler goroutine.
func (h *Handler) takeOver(w http.ResponseWriter, r *http.Request, sub *server.Subscription) bool {
	if h.opts.KeepHandler || r.ProtoMajor != 1 || r.ProtoMinor < 1 {
		return false
	}
	h.mu.Lock()
	if h.closing {
		h.mu.Unlock()
		return false // the handler's stream ends at once
	}
	h.wg.Add(1)
	h.mu.Unlock()
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		h.wg.Done()
		return false
	}
	// A request pipelined behind this one is something the client sent
	// after its request: the stream ends at once, as it would on reading it.
	s := &stream{h: h, conn: conn, sub: sub, sent: brw.Reader.Buffered() > 0}
	s.writer = h.pacer.NewWriter(s.write, s.pending)
	head := responseHead(w.Header())
	_ = conn.SetWriteDeadline(time.Now().Add(h.opts.WriteTimeout))
	if _, err := conn.Write(head); err != nil {
		conn.Close()
		sub.Close()
		h.wg.Done()
		return true
	}
	_ = conn.SetWriteDeadline(time.Time{})
	s.lastWrite.Store(int64(time.Since(h.pacer.Epoch())))
	go s.run()
	return true
}

// responseHead is an HTTP/1.1 response head for a chunked stream with the
// handler's headers.
func responseHead(hdr http.Header) []byte {
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 200 OK\r\n")
	hdr = hdr.Clone()
	hdr.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	hdr.Set("Transfer-Encoding", "chunked")
	_ = hdr.Write(&b)
	b.WriteString("\r\n")
	return b.Bytes()
}

// stream is a taken-over SSE stream. Its reader goroutine (run) owns it:
// the stream ends when that goroutine sees the connection end, which the
// writer causes by closing the connection after the last chunk.
type stream struct {
	h      *Handler
	conn   net.Conn
	sub    *server.Subscription
	writer *pace.Writer

	sent      bool         // the client had sent more than its request
	lastWrite atomic.Int64 // on the pacer's clock
	beatDue   atomic.Bool
	ending    atomic.Bool // the handler is shutting down

	tmu     sync.Mutex
	timer   *time.Timer // heartbeat
	stopped bool
}

func (s *stream) run() {
	defer s.h.wg.Done()
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
	s.sub.SetNotifyFunc(s.writer.Kick)
	// A client sends nothing after its request: this returns when it goes,
	// when it sends something anyway, or when the writer closes the
	// connection.
	if !s.sent {
		var b [1]byte
		_, _ = s.conn.Read(b[:])
	}
	stopShutdown()
	s.tmu.Lock()
	s.stopped = true
	s.timer.Stop()
	s.tmu.Unlock()
	s.sub.Close()
	s.conn.Close() // makes a write under way fail at once
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
	if _, ok := s.sub.Peek(); ok {
		return true
	}
	return s.sub.Done() || s.beatDue.Load() || s.ending.Load()
}

// write sends what is ready, a batch per chunk, one write per chunk. It
// writes the last chunk and closes the connection when the subscription
// ends (a slow consumer is told where to resume) or the server shuts down.
func (s *stream) write() bool {
	bp := pace.GetBuffer()
	defer pace.PutBuffer(bp)
	for {
		buf := append((*bp)[:0], make([]byte, chunkRoom)...)
		buf, n, endErr := s.h.appendReady(buf, s.sub)
		if s.beatDue.Swap(false) && n == 0 {
			buf = append(buf, heartbeatComment...)
		}
		last := s.ending.Load() || (n == 0 && endErr != nil)
		if last {
			buf = appendEnd(buf, endErr)
		}
		out := chunk(buf)
		if last {
			out = append(out, "0\r\n\r\n"...)
		}
		*bp = buf
		if len(out) == 0 {
			return true
		}
		_ = s.conn.SetWriteDeadline(time.Now().Add(s.h.opts.WriteTimeout))
		_, err := s.conn.Write(out)
		s.lastWrite.Store(int64(time.Since(s.h.pacer.Epoch())))
		if err != nil || last {
			s.conn.Close() // ends run's read
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

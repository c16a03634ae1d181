package sse

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport/internal/pace"
	"github.com/agentstream/agentstream/transport/internal/stages"
	"github.com/agentstream/agentstream/transport/internal/takeover"
	"github.com/agentstream/agentstream/transport/wire"
)

// chunkRoom is the room left in front of a batch for its chunk header.
const chunkRoom = takeover.ChunkRoom

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
	wire    *wire.Stream  // another wire's frames; nil: the protocol's
	first   atomic.Bool   // wire.First is still to be written
	beat    string        // the heartbeat comment
	every   time.Duration // how quiet a stream gets it

	lastWrite atomic.Int64 // on the pacer's clock
	beatDue   atomic.Bool
	ending    atomic.Bool // the handler is shutting down

	tmu     sync.Mutex
	timer   *time.Timer // heartbeat
	stopped bool
}

// newStream starts the clock of a stream whose response head has just
// gone out.
func newStream(h *Handler, session *server.Session, out sink, st *wire.Stream) *stream {
	s := &stream{h: h, session: session, out: out, wire: st, beat: heartbeatComment, every: h.opts.Heartbeat}
	if st != nil {
		s.first.Store(len(st.First) > 0)
		if st.Heartbeat != "" {
			s.beat = st.Heartbeat
		}
		if st.HeartbeatEvery > 0 {
			s.every = st.HeartbeatEvery
		}
	}
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
	defer s.h.opts.Observer.Opened("sse")()
	stopShutdown := context.AfterFunc(s.h.ctx, func() {
		s.ending.Store(true)
		s.writer.Kick()
	})
	s.tmu.Lock()
	s.timer = time.AfterFunc(s.every, s.heartbeat)
	s.tmu.Unlock()
	s.session.SetNotify(server.SessionNotify{Ready: s.writer.Kick})
	if s.first.Load() {
		s.writer.Kick()
	}
	wait()
	stopShutdown()
	s.tmu.Lock()
	s.stopped = true
	s.timer.Stop()
	s.tmu.Unlock()
	s.session.Close()
	s.out.end() // makes a write under way fail at once
	s.writer.Stop()
	if s.wire != nil && s.wire.Closed != nil {
		s.wire.Closed(s.ending.Load())
	}
}

// heartbeat asks for a heartbeat when the stream has been quiet for the
// heartbeat interval, and checks again when it next could be.
func (s *stream) heartbeat() {
	hb := s.every
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
	return s.session.Pending() || s.beatDue.Load() || s.ending.Load() || s.first.Load()
}

// write sends what is ready, a batch per write. It sends the last batch
// and ends the stream when the subscription ends (a slow consumer is told
// where to resume) or the server shuts down.
func (s *stream) write() bool {
	bp := pace.GetBuffer()
	defer pace.PutBuffer(bp)
	sampled := stages.Batch{Observe: s.h.opts.Observer.Stage}
	for {
		buf := append((*bp)[:0], make([]byte, chunkRoom)...)
		if s.first.Swap(false) {
			buf = append(buf, s.wire.First...)
		}
		buf, n, endErr, wireEnd := s.h.appendReady(buf, s.session, s.wire, &sampled)
		if s.beatDue.Swap(false) && len(buf) == chunkRoom {
			buf = append(buf, s.beat...)
		}
		last := wireEnd || s.ending.Load() || (n == 0 && endErr != nil)
		switch {
		case !last || wireEnd:
		case s.wire != nil:
			buf = s.wire.Frames.AppendEnd(buf, endErr)
		default:
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
		sampled.Written()
		if n > 0 {
			s.h.opts.Observer.Delivered(n)
			s.h.pacer.Delivered(n)
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

// connSink writes to a connection taken over from net/http (package
// takeover): a batch is one chunk, and one write.
type connSink struct{ *takeover.Conn }

func (o connSink) write(buf []byte, last bool) error { return o.Write(buf, last) }

func (o connSink) end() { o.Close() }

// takeOver hijacks an HTTP/1.1 stream from net/http and writes its
// response head; ok is false, and nothing touched, when the stream must
// stay on the handler goroutine.
func (h *Handler) takeOver(w http.ResponseWriter, r *http.Request) (_ connSink, ok bool) {
	if h.opts.KeepHandler || r.ProtoMajor != 1 || r.ProtoMinor < 1 {
		return connSink{}, false
	}
	c, ok := takeover.Hijack(w, h.opts.WriteTimeout)
	return connSink{c}, ok
}

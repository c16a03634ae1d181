// Package eventstream owns what the Server-Sent Events responses of the
// transports share: their headers, and, for the other wires' streams (a
// session's events turned into frames one by one), writing a frame and
// flushing it, the keep-alive comments of a quiet stream, and the end of
// every stream when the server shuts down.
package eventstream

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/agentstream/agentstream/server"
)

// SetHeaders sets the headers of an event stream: not cached, not
// buffered by a proxy.
func SetHeaders(hdr http.Header) {
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("Connection", "keep-alive")
	hdr.Set("X-Accel-Buffering", "no")
}

// Closing ends a handler's streams when the server shuts down.
type Closing struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// NewClosing returns a Closing not yet shut down.
func NewClosing() *Closing {
	ctx, cancel := context.WithCancel(context.Background())
	return &Closing{ctx: ctx, cancel: cancel}
}

// Shutdown ends every stream (Stream.Next returns ErrShutdown).
func (c *Closing) Shutdown() { c.cancel() }

// Errors Stream.Next ends with besides the session's own.
var (
	// ErrClientGone: the request's context ended (the client left).
	ErrClientGone = errors.New("eventstream: the client left")
	// ErrShutdown: the server is shutting down (Closing.Shutdown).
	ErrShutdown = errors.New("eventstream: the server is shutting down")
)

// Stream is one response's event stream, its headers written.
type Stream struct {
	w         http.ResponseWriter
	r         *http.Request
	rc        *http.ResponseController
	closing   *Closing
	ctx       context.Context // ends with the request or at shutdown
	release   func()
	heartbeat time.Duration
	keepAlive string
}

// Start writes the stream's headers (SetHeaders, then extra) and its 200,
// and sends them at once, so that a client knows the stream is open
// before its first event. A quiet stream gets the comment keepAlive (a whole frame, such as
// ":keep-alive\n\n") every heartbeat. Close the stream when done.
func Start(w http.ResponseWriter, r *http.Request, closing *Closing, heartbeat time.Duration, keepAlive string, extra http.Header) *Stream {
	SetHeaders(w.Header())
	for k, v := range extra {
		w.Header()[k] = v
	}
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush() // a client gone shows at the first write
	ctx, cancel := context.WithCancel(r.Context())
	stop := context.AfterFunc(closing.ctx, cancel)
	return &Stream{w: w, r: r, rc: rc, closing: closing, ctx: ctx,
		release: func() { stop(); cancel() }, heartbeat: heartbeat, keepAlive: keepAlive}
}

// Close releases what the stream holds (not the response).
func (s *Stream) Close() { s.release() }

// Write writes a whole frame and flushes it; false when the client is
// gone.
func (s *Stream) Write(frame string) bool {
	if _, err := io.WriteString(s.w, frame); err != nil {
		return false
	}
	return s.rc.Flush() == nil
}

// Next returns the session's next event: at once when one is queued, else
// waiting, with the keep-alive comment written whenever a heartbeat
// passes without one. It ends with ErrClientGone, ErrShutdown, or the
// session's error.
func (s *Stream) Next(ss *server.Session) (*server.Event, error) {
	for {
		if e, ok, err := ss.TryNext(); ok {
			return e, nil
		} else if err != nil {
			return nil, err
		}
		wait, cancel := context.WithTimeout(s.ctx, s.heartbeat)
		e, err := ss.Next(wait)
		cancel()
		switch {
		case err == nil:
			return e, nil
		case s.r.Context().Err() != nil:
			return nil, ErrClientGone
		case s.closing.ctx.Err() != nil:
			return nil, ErrShutdown
		case errors.Is(err, context.DeadlineExceeded):
			if !s.Write(s.keepAlive) {
				return nil, ErrClientGone
			}
		default:
			return nil, err
		}
	}
}

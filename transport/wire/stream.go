package wire

import (
	"net/http"
	"time"

	"github.com/agentstream/agentstream/server"
)

// Frames makes a wire's frames of a session's events, for Streams.Serve.
type Frames interface {
	// Append appends event e as the wire's frames (nothing for an event
	// the wire leaves out); end says the stream ends after them.
	Append(buf []byte, e *server.Event) (_ []byte, end bool)
	// AppendEnd appends what the stream says as it ends because of err:
	// the session's end (a slow consumer, an expired credential), or nil
	// when the server shuts down.
	AppendEnd(buf []byte, err error) []byte
}

// Stream is how Streams.Serve writes a wire's stream.
type Stream struct {
	Frames Frames
	// First is written right after the response head (a job stream's
	// snapshot, a token stream's start).
	First []byte
	// Heartbeat is the comment frame a quiet stream gets (": heartbeat"
	// when empty), every HeartbeatEvery (the stream handler's own
	// heartbeat when zero).
	Heartbeat      string
	HeartbeatEvery time.Duration
	// Header holds more response headers.
	Header http.Header
	// Closed, when set, is called once the stream has ended and its
	// frames are no longer made: shutdown says the server is shutting
	// down (otherwise the client went, was cut off, or the frames ended
	// the stream).
	Closed func(shutdown bool)
}

// Streams serves a wire's streams (sse.Handler).
type Streams interface {
	// Serve streams session sub's events to the response as s.Frames
	// makes frames of them, with everything the protocol's own streams
	// have: the takeover of an HTTP/1.1 connection, paced batches,
	// heartbeats, the end of a credential, the cut-off of a slow consumer,
	// shutdown, metrics. It takes sub: the stream closes it as it ends.
	// The caller has checked the request; it may return before the
	// stream ends.
	Serve(w http.ResponseWriter, r *http.Request, sub *server.Session, s Stream)
}

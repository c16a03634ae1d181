// Package sse serves a thread's events as Server-Sent Events: one filtered
// subscription per HTTP request, for `POST /threads/{id}/stream[/events]`
// (the filter is an EventStreamRequest body) and for a browser
// EventSource's `GET` on the same paths (the filter in query parameters,
// the cursor from Last-Event-ID or `?since=` / `?lastEventId=`).
//
// Frames are `id: <event_id>`, `event: <method>` and `data: <Event JSON>`;
// notices that are not part of the stream (events.missed, the initial
// values snapshot) have no id. A `: heartbeat` comment goes out when the
// stream has been quiet for the heartbeat interval. Events that are ready
// are written together in one write, at most once per
// Options.WriteInterval on a busy stream. A client that cannot keep up is
// cut off (its write deadline passes, or its queue overflows) without
// slowing anyone else, and resumes with Last-Event-ID. A stream opened
// with a credential that expires (the principal in the request's context,
// see package auth) ends then with an `event: error` frame carrying an
// unauthenticated ErrorResponse. HTTP/1.1 streams are taken over from
// net/http once validated (see Handler).
package sse

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport/internal/httpjson"
	"github.com/agentstream/agentstream/transport/internal/longlived"
	"github.com/agentstream/agentstream/transport/internal/pace"
	"github.com/agentstream/agentstream/transport/internal/stages"
	"github.com/agentstream/agentstream/transport/wire"
)

// DefaultWriteInterval is Options.WriteInterval's default.
const DefaultWriteInterval = pace.DefaultInterval

// NoPacing as Options.WriteInterval turns pacing off.
const NoPacing = pace.Off

// DefaultHeartbeat is Options.Heartbeat's default.
const DefaultHeartbeat = 5 * time.Second

// Options configure the handler. Zero fields take the defaults in their
// comments.
type Options struct {
	// Heartbeat is how long a stream may stay quiet before a heartbeat
	// comment is sent (DefaultHeartbeat, 5s).
	Heartbeat time.Duration
	// WriteTimeout bounds each write to a client (10s); a client that
	// cannot take a batch in that time is cut off.
	WriteTimeout time.Duration
	// WriteInterval is the least time between two writes of events to one
	// stream (DefaultWriteInterval): a stream that has been quiet that long
	// writes at once, a busy one sends what arrived meanwhile in one write.
	// NoPacing (any negative value): no pacing.
	WriteInterval time.Duration
	// MaxBatch is the most events written with one flush (512).
	MaxBatch int
	// MaxBody caps the request body (64 KiB): 413 past it.
	MaxBody int64
	// KeepHandler keeps every stream on its net/http handler goroutine.
	// By default an HTTP/1.1 stream is taken over from net/http once its
	// response starts (see Handler).
	KeepHandler bool
	// Observer hears the streams open and close ("sse"), the events
	// written, the sampled delivery latencies of live events (package
	// stages) and the refusals, for metrics (wire.NopObserver when nil).
	Observer wire.Observer
	// BodyTimeout bounds reading a POST stream's body (10s): 408 past it.
	BodyTimeout time.Duration
	// Decode bounds the nesting and the number of values of a POST
	// stream's body (protocol.DecodeLimits; zero fields: the defaults).
	Decode protocol.DecodeLimits
}

func (o Options) withDefaults() Options {
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.WriteInterval == 0 {
		o.WriteInterval = DefaultWriteInterval
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 512
	}
	if o.MaxBody <= 0 {
		o.MaxBody = 64 << 10
	}
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = 10 * time.Second
	}
	if o.Observer == nil {
		o.Observer = wire.NopObserver{}
	}
	return o
}

// Handler serves SSE streams of srv's threads.
//
// An HTTP/1.1 stream is taken over from net/http (hijacked) once the
// request is validated: the handler writes the response head and then
// the events as chunks of the chunked transfer coding, one chunk per
// batch. The stream then costs no net/http buffers and no handler
// goroutine: a writer runs only while events wait, and one small reader
// goroutine notices the client leaving (anything the client sends after
// its request ends the stream too). Other streams (HTTP/2, or
// Options.KeepHandler) stay on their handler goroutine with the same
// frames, batching and cut-offs.
type Handler struct {
	srv   *server.Server
	opts  Options
	pacer *pace.Pacer
	ctx   context.Context // cancelled by Shutdown
	stop  context.CancelFunc
	// decoder reads POST bodies within Options.Decode.
	decoder protocol.Decoder

	mu      sync.Mutex // orders wg.Add against Shutdown's Wait
	closing bool
	wg      sync.WaitGroup // open streams
	open    atomic.Int64   // how many
}

// New returns a handler for srv.
func New(srv *server.Server, opts Options) *Handler {
	opts = opts.withDefaults()
	ctx, stop := context.WithCancel(context.Background())
	h := &Handler{srv: srv, opts: opts, pacer: pace.New(opts.WriteInterval), ctx: ctx, stop: stop}
	h.decoder = protocol.Decoder{Limits: opts.Decode, OnLimit: func(limit string) { h.refuse("command_" + limit) }}
	return h
}

// WriteInterval is the least time between two writes of one connection
// now: Options.WriteInterval, or more while the server is behind (the
// pacing adapts to the CPU left).
func (h *Handler) WriteInterval() time.Duration { return h.pacer.Current() }

// Shutdown ends every open stream cleanly (the clients see the response
// end) and waits for them, or for ctx. Streams opened
// afterwards end at once. It is safe to call twice.
func (h *Handler) Shutdown(ctx context.Context) error {
	h.mu.Lock()
	h.closing = true
	h.mu.Unlock()
	h.stop()
	c := make(chan struct{})
	go func() { h.wg.Wait(); close(c) }()
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sse: %d streams still open: %w", h.open.Load(), ctx.Err())
	}
}

// ServeHTTP serves the stream of thread r.PathValue("id").
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	thread := r.PathValue("id")
	if err := server.ValidThreadID(thread); err != nil {
		h.refuse(string(server.LimitThreadID))
		writeError(w, http.StatusBadRequest, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "%v", err))
		return
	}
	var f channels.Filter
	var cursor *server.Cursor
	var errResp *protocol.ErrorResponse
	if r.Method == http.MethodPost {
		body, status, refusal, e := httpjson.ReadBody(w, r, h.opts.MaxBody, h.opts.BodyTimeout, "stream request")
		if e != nil {
			if refusal != "" {
				h.refuse(refusal)
			}
			writeError(w, status, e)
			return
		}
		// Validating the body grows the stack; the stream may stay on this
		// goroutine for hours.
		errResp = longlived.Shallow(func() *protocol.ErrorResponse {
			var e *protocol.ErrorResponse
			f, cursor, e = h.fromBody(body)
			return e
		})
	} else {
		f, cursor, errResp = fromQuery(r)
	}
	if errResp != nil {
		writeError(w, http.StatusBadRequest, errResp)
		return
	}
	if c, e := lastEventID(r); e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	} else if c != nil {
		cursor = c
	}
	if r.Method == http.MethodHead { // the headers a stream would have, and no stream
		setStreamHeaders(w.Header())
		w.WriteHeader(http.StatusOK)
		return
	}
	sub, _, err := h.srv.Subscribe(thread, f, cursor)
	if err != nil {
		status, e := httpjson.Refusal(err)
		writeError(w, status, e)
		return
	}
	h.serve(w, r, sub, nil)
}

// Serve streams another wire's stream (wire.Streams): session sub's
// events as st.Frames makes frames of them, with everything the
// handler's own streams have.
func (h *Handler) Serve(w http.ResponseWriter, r *http.Request, sub *server.Session, st wire.Stream) {
	for k, v := range st.Header {
		w.Header()[k] = v
	}
	h.serve(w, r, sub, &st)
}

// serve streams sub to the response: the protocol's frames, or wire's.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, sub *server.Session, st *wire.Stream) {
	if p := auth.FromContext(r.Context()); p != nil {
		sub.ExpireAt(p.Expires) // the stream ends with an error event then
	}
	setStreamHeaders(w.Header())
	h.mu.Lock()
	if h.closing { // the response ends at once
		h.mu.Unlock()
		sub.Close()
		w.WriteHeader(http.StatusOK)
		return
	}
	h.wg.Add(1)
	h.mu.Unlock()
	if out, ok := h.takeOver(w, r); ok {
		release := longlived.KeepSlot(r.Context()) // the principal's stream slot lasts as long as the stream
		go func() {
			defer release()
			newStream(h, sub, out, st).run(out.Wait)
		}()
		return
	}
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		sub.Close()
		h.wg.Done()
		return
	}
	out := &handlerSink{w: w, rc: rc, timeout: h.opts.WriteTimeout, done: make(chan struct{})}
	newStream(h, sub, out, st).run(func() {
		select {
		case <-r.Context().Done(): // the client went
		case <-out.done: // the writer ended the response
		}
	})
}

func (h *Handler) refuse(limit string) {
	h.opts.Observer.Refused(limit)
}

const heartbeatComment = ": heartbeat\n\n"

// appendReady appends up to MaxBatch ready events as frames; endErr is
// set when nothing is ready because the subscription ended.
func (h *Handler) appendReady(buf []byte, sub *server.Session, st *wire.Stream, sampled *stages.Batch) (_ []byte, n int, endErr error, wireEnd bool) {
	for n < h.opts.MaxBatch {
		e, ok, err := sub.TryNext()
		if !ok {
			return buf, n, err, false
		}
		sampled.Taken(e)
		n++
		if st == nil {
			buf = appendFrame(buf, e)
		} else if buf, wireEnd = st.Frames.Append(buf, e); wireEnd {
			return buf, n, nil, true
		}
	}
	return buf, n, nil, false
}

// appendEnd appends what a stream says as it ends because of err: a slow
// consumer is told the sequence number to resume after; a stream whose
// credential expired gets an "error" event carrying an unauthenticated
// ErrorResponse.
func appendEnd(buf []byte, err error) []byte {
	if errors.Is(err, server.ErrCredentialExpired) || errors.Is(err, server.ErrUnavailable) {
		code := protocol.ErrorCodeUnauthenticated
		if errors.Is(err, server.ErrUnavailable) {
			code = protocol.ErrorCodeUnavailable
		}
		b, _ := json.Marshal(protocol.NewError(nil, code, "%v", err))
		buf = append(buf, "event: error\ndata: "...)
		buf = append(buf, b...)
		return append(buf, "\n\n"...)
	}
	var sce *server.SlowConsumerError
	if errors.As(err, &sce) {
		buf = append(buf, ": slow consumer, resume after "...)
		buf = strconv.AppendUint(buf, sce.LastSeq, 10)
		buf = append(buf, "\n\n"...)
	}
	return buf
}

// appendFrame appends one event as an SSE frame.
func appendFrame(buf []byte, e *server.Event) []byte {
	if id := e.EventID(); id != "" {
		buf = append(buf, "id: "...)
		buf = append(buf, id...)
		buf = append(buf, '\n')
	}
	buf = append(buf, "event: "...)
	buf = append(buf, e.Method...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, e.JSON()...) // JSON from encoding/json has no raw newline
	return append(buf, "\n\n"...)
}

func (h *Handler) fromBody(body []byte) (channels.Filter, *server.Cursor, *protocol.ErrorResponse) {
	if len(bytes.TrimSpace(body)) == 0 {
		return channels.All, nil, nil
	}
	req, errResp := h.decoder.EventStreamRequest(body)
	if errResp != nil {
		return channels.Filter{}, nil, errResp
	}
	var cursor *server.Cursor
	if req.Since != nil {
		cursor = server.SeqCursor(*req.Since)
	}
	return server.FilterOf(req.Channels, req.Namespaces, req.Depth), cursor, nil
}

// fromQuery reads a GET stream's filter: channels (comma-separated or
// repeated), namespaces (each a JSON array, or segments joined by "/"),
// depth and since.
func fromQuery(r *http.Request) (channels.Filter, *server.Cursor, *protocol.ErrorResponse) {
	q := r.URL.Query()
	f := channels.Filter{Depth: channels.Unlimited}
	for _, v := range q["channels"] {
		for _, c := range strings.Split(v, ",") {
			if c = strings.TrimSpace(c); c == "" {
				continue
			}
			if !channels.Valid(c) {
				return f, nil, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "channels: %q is not a channel", c)
			}
			f.Channels = append(f.Channels, c)
		}
	}
	for _, v := range q["namespaces"] {
		var ns []string
		if strings.HasPrefix(v, "[") {
			if err := json.Unmarshal([]byte(v), &ns); err != nil {
				return f, nil, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "namespaces: %q is not a JSON array of text", v)
			}
		} else if v != "" {
			ns = strings.Split(v, "/")
		}
		f.Namespaces = append(f.Namespaces, channels.Namespace(ns))
	}
	if v := q.Get("depth"); v != "" {
		d, err := strconv.Atoi(v)
		if err != nil || d < 0 {
			return f, nil, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "depth: %q is not a non-negative integer", v)
		}
		f.Depth = d
	}
	var cursor *server.Cursor
	for _, k := range []string{"since", "lastEventId"} {
		if v := q.Get(k); v != "" {
			c, err := server.ParseCursor(v)
			if err != nil {
				return f, nil, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "%s: %v", k, err)
			}
			cursor = &c
		}
	}
	return f, cursor, nil
}

// lastEventID reads the Last-Event-ID header a reconnecting EventSource
// sends: an event id this server gave (or a bare sequence number).
func lastEventID(r *http.Request) (*server.Cursor, *protocol.ErrorResponse) {
	v := strings.TrimSpace(r.Header.Get("Last-Event-ID"))
	if v == "" {
		return nil, nil
	}
	c, err := server.ParseCursor(v)
	if err != nil {
		return nil, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "Last-Event-ID: %v", err)
	}
	return &c, nil
}

// writeError answers with an ErrorResponse body.
func writeError(w http.ResponseWriter, status int, e *protocol.ErrorResponse) {
	httpjson.Write(w, status, e)
}

// setStreamHeaders sets the headers of every event stream, the protocol's
// and the other wires': not cached, not buffered by a proxy.
func setStreamHeaders(hdr http.Header) {
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("Connection", "keep-alive")
	hdr.Set("X-Accel-Buffering", "no")
}

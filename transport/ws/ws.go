// Package ws serves a thread over WebSocket (github.com/coder/websocket):
// clients send Command objects and receive CommandResponse, ErrorResponse
// and Event objects on one connection, as JSON text frames, or as CBOR
// binary frames when they negotiate the subprotocol [CBORSubprotocol].
//
// Every command works in-band, subscriptions included. A dropped
// connection leaves its subscriptions restorable, for the server's
// reconnect grace period, by subscription.reconnect on a new connection.
// The server pings every connection and drops those that stop answering;
// a frame over the read limit closes the connection with 1009; a rejection
// after the handshake closes it with 4000 + the HTTP status. Origins are
// checked (see Options.OriginPatterns).
//
// With Options.Auth set, the handshake has been authorized by the caller
// (transport's guard, which puts the principal in the request's context);
// each command is authorized again, so a command on a thread the principal
// may no longer use gets permission_denied, and when the credential
// expires the client gets an unauthenticated ErrorResponse and the close
// code 4401. The auth.refresh command swaps in a new credential first.
//
// The library does the handshake and reads messages; the connection
// writes its own data frames, batched into one socket write, and answers
// control frames between messages (transport/internal/wsframe owns that
// code and lists what it relies on in the library). Writes are paced: a
// busy connection writes at most once per Options.WriteInterval (longer
// while the server is behind; see transport/internal/pace), and a
// subscribe holds the next write for one interval, so that subscribes sent
// together are answered with one replay, merged in sequence order.
package ws

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/internal/compact"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport/internal/idlepark"
	"github.com/agentstream/agentstream/transport/internal/longlived"
	"github.com/agentstream/agentstream/transport/internal/pace"
	"github.com/agentstream/agentstream/transport/internal/stages"
	"github.com/agentstream/agentstream/transport/internal/wsframe"
	"github.com/agentstream/agentstream/transport/wire"
	"github.com/coder/websocket"
	"github.com/fxamacker/cbor/v2"
)

// CBORSubprotocol is the WebSocket subprotocol for CBOR framing: the same
// messages as JSON, encoded as CBOR in binary frames.
const CBORSubprotocol = "agentstream.cbor"

// JSONSubprotocol names the default JSON framing, for clients that want
// to ask for it explicitly.
const JSONSubprotocol = "agentstream.json"

// DefaultWriteInterval is Options.WriteInterval's default.
const DefaultWriteInterval = pace.DefaultInterval

// The defaults of Options.CommandRate and Options.CommandBurst.
const (
	DefaultCommandRate      = 100
	DefaultCommandBurst     = 200
	DefaultCommandBytesRate = 1 << 20
)

// NoPacing as Options.WriteInterval turns pacing off.
const NoPacing = pace.Off

// Options configure the handler. Zero fields take the defaults in their
// comments.
type Options struct {
	// OriginPatterns lists the host patterns (path.Match syntax) that may
	// open a WebSocket from a browser page besides the server's own host.
	// Empty: same-origin only. "*" allows every origin.
	OriginPatterns []string
	// ReadLimit caps an incoming frame (1 MiB); a larger one closes the
	// connection with 1009.
	ReadLimit int64
	// PingInterval is how often every connection is pinged (20s); a peer
	// that sent nothing, not even the pong, by the next ping is dropped.
	PingInterval time.Duration
	// WriteTimeout bounds each write (10s); a peer that cannot take it is
	// dropped.
	WriteTimeout time.Duration
	// MaxBatch is the most events taken from a subscription at a time (256).
	MaxBatch int
	// CommandRate is how many commands a second one connection may send
	// on average (DefaultCommandRate, 100), with bursts of CommandBurst
	// (DefaultCommandBurst, 200); a command over it is answered with
	// rate_limited and not carried out.
	CommandRate  float64
	CommandBurst int
	// CommandBytesRate is how many bytes of commands a second one
	// connection may send on average (DefaultCommandBytesRate, 1 MiB), with
	// bursts of four times as much (and never less than ReadLimit): a
	// command over it is answered with rate_limited and not decoded.
	CommandBytesRate float64
	// Decode bounds the nesting and the number of values of one command
	// (protocol.DecodeLimits; zero fields: the defaults): a frame over it
	// is refused before it is decoded.
	Decode protocol.DecodeLimits
	// WriteInterval is the least time between two writes of events to one
	// connection (DefaultWriteInterval): a connection that has been quiet
	// that long writes at once, a busy one sends what arrived meanwhile in
	// one write. NoPacing (any negative value): no pacing.
	WriteInterval time.Duration
	// Observer hears the connections open and close ("websocket"), the
	// events written, the sampled delivery latencies of live events
	// (package stages), the refusals and the commands refused by
	// authentication (reason invalid_credential or expired) or
	// authorization (permission_denied), for metrics (wire.NopObserver
	// when nil).
	Observer wire.Observer
	// Auth, when set, checks auth.refresh's credentials, and commands are
	// authorized one by one (server.Authorize) as the principal the
	// request's context carries (auth.FromContext).
	Auth *auth.Authenticator
}

// CloseCredentialExpired is the close code of a connection whose
// credential expired (4000 + 401, as for a rejection after the
// handshake).
const CloseCredentialExpired websocket.StatusCode = 4000 + http.StatusUnauthorized

func (o Options) withDefaults() Options {
	if o.Observer == nil {
		o.Observer = wire.NopObserver{}
	}
	if o.ReadLimit <= 0 {
		o.ReadLimit = 1 << 20
	}
	if o.PingInterval <= 0 {
		o.PingInterval = 20 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 256
	}
	if o.CommandRate <= 0 {
		o.CommandRate = DefaultCommandRate
	}
	if o.CommandBurst <= 0 {
		o.CommandBurst = DefaultCommandBurst
	}
	if o.CommandBytesRate <= 0 {
		o.CommandBytesRate = DefaultCommandBytesRate
	}
	if o.WriteInterval == 0 {
		o.WriteInterval = DefaultWriteInterval
	}
	return o
}

// Handler upgrades requests to thread WebSockets.
type Handler struct {
	srv     *server.Server
	opts    Options
	pacer   *pace.Pacer
	decoder protocol.Decoder

	mu      sync.Mutex
	closing bool
	conns   map[*connection]struct{} // open connections, for pings and Shutdown
	connsHW compact.Tracker          // their high-water mark, to give the map's memory back
	pinger  *time.Timer              // armed while connections are open
	wg      sync.WaitGroup           // open connections (each Done as it ends)
	idle    idlepark.Poller          // waits for the connections parked between messages
}

// New returns a handler for srv.
func New(srv *server.Server, opts Options) *Handler {
	opts = opts.withDefaults()
	h := &Handler{srv: srv, opts: opts, pacer: pace.New(opts.WriteInterval), conns: map[*connection]struct{}{}}
	h.decoder = protocol.Decoder{Limits: opts.Decode, OnLimit: func(limit string) { h.refuse("command_" + limit) }}
	return h
}

// WriteInterval is the least time between two writes of one connection
// now: Options.WriteInterval, or more while the server is behind (the
// pacing adapts to the CPU left).
func (h *Handler) WriteInterval() time.Duration { return h.pacer.Current() }

// Shutdown closes every connection with 1001 (going away) and waits for
// their goroutines, or for ctx.
func (h *Handler) Shutdown(ctx context.Context) error {
	h.mu.Lock()
	h.closing = true
	if h.pinger != nil {
		h.pinger.Stop()
	}
	for c := range h.conns {
		go c.conn.CloseWith(websocket.StatusGoingAway, "server shutting down")
	}
	h.mu.Unlock()
	c := make(chan struct{})
	go func() { h.wg.Wait(); close(c) }()
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		h.mu.Lock()
		n := len(h.conns)
		h.mu.Unlock()
		return fmt.Errorf("websocket: %d connections still open (peers that do not answer the close): %w", n, ctx.Err())
	}
}

// ServeHTTP upgrades the request and serves thread r.PathValue("id"). It
// returns once the connection is set up; the connection runs on a
// goroutine of its own, so net/http's per-request state (its buffers, the
// request, the handler chain's stack) is released while it stays open.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	thread := r.PathValue("id")
	if err := server.ValidThreadID(thread); err != nil {
		h.refuse(string(server.LimitThreadID))
		b, _ := json.Marshal(protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "%v", err))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write(b)
		return
	}
	release := longlived.KeepSlot(r.Context()) // the principal's stream slot lasts as long as the connection
	conn, err := wsframe.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols:   []string{CBORSubprotocol, JSONSubprotocol},
		OriginPatterns: h.opts.OriginPatterns,
	}, h.opts.WriteTimeout)
	if err != nil {
		release()
		return // Accept has answered (403 for a bad origin, 426 ...)
	}
	h.mu.Lock()
	if h.closing {
		h.mu.Unlock()
		release()
		// As for the open connections: the close frame, then the peer
		// has CloseTimeout to answer.
		conn.CloseWith(websocket.StatusGoingAway, "server shutting down")
		conn.Drain()
		conn.CloseNow()
		return
	}
	conn.SetReadLimit(h.opts.ReadLimit)
	c := &connection{h: h, conn: conn, cbor: conn.Subprotocol() == CBORSubprotocol, session: h.srv.NewSession(thread), principal: auth.FromContext(r.Context()), release: release}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	conn.SetParking(&h.idle, c.serve)
	if c.principal != nil {
		c.session.ExpireAt(c.principal.Expires)
	}
	c.writer = h.pacer.NewWriter(c.writeReady, c.session.Pending)
	c.writer.SetHoldWhile(conn.InputPending) // subscribes sent together, read slowly, still go together
	c.session.SetNotify(server.SessionNotify{Ready: c.writer.Kick, Subscribed: c.subscribed, RunEnded: c.runEnded})
	h.conns[c] = struct{}{}
	h.connsHW.Grew(len(h.conns))
	if h.pinger == nil {
		h.pinger = time.AfterFunc(h.opts.PingInterval, h.ping)
	} else if len(h.conns) == 1 {
		h.pinger.Reset(h.opts.PingInterval)
	}
	h.wg.Add(1)
	h.mu.Unlock()
	c.onEnd = h.opts.Observer.Opened("websocket")
	go c.serve()
}

// ping pings every open connection and drops those that sent nothing
// since the previous ping. One timer serves all connections, so an idle
// connection keeps none.
func (h *Handler) ping() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing || len(h.conns) == 0 {
		return
	}
	for c := range h.conns {
		if !c.conn.Ping() {
			go c.conn.CloseNow()
		}
	}
	h.pinger.Reset(h.opts.PingInterval)
}

// connection is one WebSocket: a reader goroutine while it has input
// (it answers control frames; between messages the connection is parked
// on the handler's poller with no goroutine), a short-lived one per
// command, and a writer of its session's events that runs only while
// events wait, paced by the handler's pacer; the handler's timer pings it.
// The session (server.Session) merges the connection's subscriptions into
// one stream.
type connection struct {
	h       *Handler
	conn    *wsframe.Conn
	cbor    bool
	session *server.Session
	ctx     context.Context
	cancel  context.CancelFunc
	release func() // the principal's stream slot
	onEnd   func() // what Options.Observer.Opened returned
	writer  *pace.Writer
	wmu     sync.Mutex // serialises batches: a response waits for the events being written

	tokens   float64   // the command bucket (see allow); owned by the reader
	bytes    float64   // the bytes bucket (see allow); owned by the reader
	bucketAt time.Time // when they were last filled

	principal *auth.Principal // who the connection acts as (auth on); owned by the reader

	// subscribedAt is when a subscription was last added, on the pacer's
	// clock (time since its Epoch, at least 1; 0: never): a run's end
	// within pace.RunEndHold of it is held as a replay's is (runEnded).
	subscribedAt atomic.Int64
	// startedAt is when the connection last answered a run.start or
	// input.respond, on the pacer's clock (0: never); see started.
	startedAt atomic.Int64
}

// subscribed holds the next write when a subscription is added, so that
// subscribes sent together are answered with one merged stream; longer
// when what it queued holds the end of a run, which a client may act on
// (the SDK closes its projections) before its other subscribes are read.
func (c *connection) subscribed(runEnded bool) {
	c.subscribedAt.Store(c.clock())
	if runEnded {
		c.writer.HoldRunEnd()
	} else {
		c.writer.Hold()
	}
}

// runEnded is told of a live event that ends a run: within
// pace.RunEndHold of the last subscribe it is held as a replay's end is
// (the client's other subscribes, sent with that one, may not have been
// read yet, and their replays hold what came before the end); otherwise
// it is written as any event.
func (c *connection) runEnded() {
	now := c.clock()
	if at := c.startedAt.Load(); at != 0 && time.Duration(now-at) < pace.StartedHold {
		c.writer.HoldFor(time.Duration(at-now) + pace.StartedHold) // started()
		return
	}
	if at := c.subscribedAt.Load(); at != 0 && time.Duration(now-at) < pace.RunEndHold {
		c.writer.HoldRunEnd()
		return
	}
	c.writer.Kick()
}

// serve reads and carries out the connection's commands until it ends,
// or until nothing is left to read: the connection is then parked, with
// no goroutine, and serve runs again on a new one when the socket is
// readable or the connection is being closed.
func (c *connection) serve() {
	var err error
	for err = c.conn.AwaitMessage(); err == nil && c.message(); err = c.conn.AwaitMessage() {
	}
	if errors.Is(err, wsframe.ErrParked) {
		return
	}
	if errors.Is(err, wsframe.ErrTooBig) || errors.Is(err, wsframe.ErrProtocol) {
		c.h.refuse("websocket_frame")
		c.conn.Drain()
	}
	c.end()
}

// end closes the connection and lets its session and its slots go.
func (c *connection) end() {
	c.cancel()
	// A write under way finishes first (bounded by the write timeout): a
	// close frame sent while a batch was open is in that batch.
	c.writer.Stop()
	c.conn.CloseNow()
	c.session.Detach()
	c.release()
	if c.onEnd != nil {
		c.onEnd()
	}
	h := c.h
	h.mu.Lock()
	delete(h.conns, c)
	h.conns = compact.Shrink(h.conns, &h.connsHW)
	h.mu.Unlock()
	h.wg.Done()
}

// message has the library read the message whose first frame is at the
// head of the input, then carries out the command. A connection that
// waits with a goroutine of its own between messages (one that cannot be
// parked) does it on a short-lived goroutine, so that its long-lived one
// keeps a small stack; a parked connection's reader ends when it parks,
// and its stack with it. It reports false when the connection must end.
func (c *connection) message() bool {
	if c.conn.Parks() {
		return c.readCommand()
	}
	return longlived.Shallow(c.readCommand)
}

func (c *connection) readCommand() bool {
	typ, data, err := c.conn.Read(context.Background())
	if err != nil {
		return false // closed by the library (1009 for a frame too big, 1002 ...), or the socket failed
	}
	return c.command(typ, data)
}

// writeReady writes every ready event in batches; it reports false when the
// connection must end (a write failed, or a subscriber fell too far behind).
func (c *connection) writeReady() bool {
	sampled := stages.Batch{Observe: c.h.opts.Observer.Stage}
	for {
		n := 0
		c.wmu.Lock() // a batch is one write: responses wait for it
		c.conn.Begin()
		for n < c.h.opts.MaxBatch {
			e, ok, err := c.session.TryNext()
			if !ok {
				if errors.Is(err, server.ErrUnavailable) {
					_ = c.conn.Flush()
					c.wmu.Unlock()
					c.sendError(protocol.NewError(nil, protocol.ErrorCodeUnavailable, "%v", err))
					c.conn.CloseWith(4000+http.StatusServiceUnavailable, "unavailable; reconnect later")
					return false
				}
				if errors.Is(err, server.ErrCredentialExpired) {
					c.h.authRefuse("expired")
					_ = c.conn.Flush()
					c.wmu.Unlock()
					c.sendError(protocol.NewError(nil, protocol.ErrorCodeUnauthenticated, "%v", err))
					c.conn.CloseWith(CloseCredentialExpired, "credential expired")
					return false
				}
				var sce *server.SlowConsumerError
				if errors.As(err, &sce) {
					// Tell the client why its events stopped; it can
					// resubscribe (the SDK dedupes by event_id).
					_ = c.conn.Flush()
					c.wmu.Unlock()
					c.conn.CloseWith(4000+http.StatusTooManyRequests, sce.Error())
					return false
				}
				break
			}
			sampled.Taken(e)
			op, b := byte(wsframe.OpText), e.JSON()
			if c.cbor {
				var cerr error
				if b, cerr = e.CBOR(); cerr != nil {
					continue
				}
				op = wsframe.OpBinary
			}
			if err := c.conn.Frame(op, b); err != nil {
				_ = c.conn.Flush()
				c.wmu.Unlock()
				return false
			}
			n++
		}
		err := c.conn.Flush()
		c.wmu.Unlock()
		if err != nil {
			c.conn.CloseNow() // a peer that cannot take a batch in time is dropped
			return false
		}
		sampled.Written()
		if n > 0 {
			c.h.opts.Observer.Delivered(n)
			c.h.pacer.Delivered(n)
		}
		if n < c.h.opts.MaxBatch {
			return true
		}
	}
}

// allow takes a token from the connection's command bucket, which fills
// at CommandRate up to CommandBurst, and n from its bytes bucket, which
// fills at CommandBytesRate up to bytesBurst; it names the limit a frame
// is over, or returns "". Commands are read one at a time, so only the
// connection's reader calls it.
func (c *connection) allow(now time.Time, n int) string {
	o := c.h.opts
	if c.bucketAt.IsZero() {
		c.tokens, c.bytes = float64(o.CommandBurst), c.bytesBurst()
	} else {
		dt := now.Sub(c.bucketAt).Seconds()
		c.tokens = min(float64(o.CommandBurst), c.tokens+dt*o.CommandRate)
		c.bytes = min(c.bytesBurst(), c.bytes+dt*o.CommandBytesRate)
	}
	c.bucketAt = now
	if c.tokens < 1 {
		return "command_rate"
	}
	c.tokens--
	if c.bytes < float64(n) {
		return "command_bytes_rate"
	}
	c.bytes -= float64(n)
	return ""
}

// bytesBurst is the most bytes of commands one connection may send at
// once: four seconds' worth, and never less than one frame of the most
// the connection reads.
func (c *connection) bytesBurst() float64 {
	return max(4*c.h.opts.CommandBytesRate, float64(c.h.opts.ReadLimit))
}

func (h *Handler) refuse(limit string) {
	h.opts.Observer.Refused(limit)
}

func (c *connection) command(typ websocket.MessageType, data []byte) bool {
	if typ == websocket.MessageText && !utf8.Valid(data) {
		// RFC 6455 section 8.1: a text message must be UTF-8.
		c.h.refuse("utf8")
		c.conn.CloseWith(websocket.StatusInvalidFramePayloadData, "a text message must be UTF-8")
		return false
	}
	// Every frame, valid or not, is paid for before anything is decoded.
	if limit := c.allow(time.Now(), len(data)); limit != "" {
		c.h.refuse(limit)
		id := protocol.PeekID(data, typ == websocket.MessageBinary)
		if limit == "command_bytes_rate" {
			return c.send(protocol.NewError(id, protocol.ErrorCodeRateLimited, "more than %g bytes of commands a second on this connection (bursts of %g); wait and retry", c.h.opts.CommandBytesRate, c.bytesBurst()))
		}
		return c.send(protocol.NewError(id, protocol.ErrorCodeRateLimited, "more than %g commands a second on this connection (bursts of %d); wait and retry", c.h.opts.CommandRate, c.h.opts.CommandBurst))
	}
	cmd, errResp := c.decode(typ, data)
	if errResp != nil {
		return c.send(errResp)
	}
	if c.h.opts.Auth != nil {
		id := cmd.Value.GetID()
		if r, ok := cmd.Value.(*protocol.ClientCommandAuthRefresh); ok {
			return c.send(c.refresh(id, r.Params.Token))
		}
		if err := c.h.srv.Authorize(c.principal, c.session.Thread(), true); err != nil {
			c.h.authRefuse("permission_denied")
			return c.send(protocol.NewError(&id, protocol.ErrorCodePermissionDenied, "%v", err))
		}
	}
	ctx := c.ctx
	if c.principal != nil {
		ctx = auth.NewContext(ctx, c.principal) // for the principal's quotas
	}
	starts := false
	switch cmd.Value.(type) {
	case *protocol.ClientCommandRunStart, *protocol.ClientCommandInputRespond:
		starts = true
		c.startedAt.Store(c.clock()) // a run that ends while this is carried out is held
	}
	resp, err := c.session.Do(ctx, cmd)
	if err != nil {
		id := cmd.Value.GetID()
		return c.send(protocol.ErrorResponseOf(&id, err))
	}
	ok := c.send(resp)
	if starts {
		c.started()
	}
	return ok
}

// started is told that a run.start or input.respond was answered. The
// official SDK sends the subscribes of the projections it opens for a run
// (thread.values, its messages) only once it has read that answer, while
// it already counts the run's end, read on an earlier subscription,
// against them: a run end written before those subscribes arrive ends
// them empty (thread.values resolves to undefined; on a loaded machine
// the client may take tens of milliseconds to send them). So a run end
// held now, or coming within pace.StartedHold of this answer, is held
// until StartedHold after it.
func (c *connection) started() {
	c.startedAt.Store(c.clock())
	c.writer.ExtendHold(pace.StartedHold)
}

// clock is now on the pacer's clock (time since its Epoch), at least 1:
// what subscribedAt and startedAt hold.
func (c *connection) clock() int64 {
	return max(int64(time.Since(c.h.pacer.Epoch())), 1)
}

// refresh is auth.refresh: a valid credential whose principal may use the
// thread replaces the connection's, and the connection then lasts until it
// expires.
func (c *connection) refresh(id uint64, token string) any {
	p, err := c.h.opts.Auth.Check(token)
	if err != nil {
		reason := "invalid_credential"
		if errors.Is(err, auth.ErrExpired) {
			reason = "expired"
		}
		c.h.authRefuse(reason)
		return protocol.NewError(&id, protocol.ErrorCodeUnauthenticated, "params.token: %v", err)
	}
	if err := c.h.srv.Authorize(p, c.session.Thread(), true); err != nil {
		c.h.authRefuse("permission_denied")
		return protocol.NewError(&id, protocol.ErrorCodePermissionDenied, "%v", err)
	}
	if !c.session.ExpireAt(p.Expires) {
		return protocol.NewError(&id, protocol.ErrorCodeUnauthenticated, "the connection's credential has already expired")
	}
	c.principal = p
	res := protocol.AuthRefreshResult{Subject: p.Subject}
	if !p.Expires.IsZero() {
		at := protocol.JsUint(p.Expires.Unix())
		res.ExpiresAt = &at
	}
	return &protocol.CommandResponse{ID: id, Result: res}
}

func (h *Handler) authRefuse(reason string) {
	h.opts.Observer.AuthRefused(reason)
}

// sendError sends an ErrorResponse, as send does.
func (c *connection) sendError(e *protocol.ErrorResponse) { _ = c.send(e) }

func (c *connection) decode(typ websocket.MessageType, data []byte) (*protocol.ClientCommand, *protocol.ErrorResponse) {
	if typ == websocket.MessageBinary {
		if !c.cbor {
			return nil, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "binary frames need the %s subprotocol", CBORSubprotocol)
		}
		return c.h.decoder.CommandCBOR(data)
	}
	return c.h.decoder.Command(data)
}

// send writes one response or error as a frame, now, within the write
// timeout.
func (c *connection) send(v any) bool {
	var b []byte
	var err error
	op := byte(wsframe.OpText)
	if c.cbor {
		op = wsframe.OpBinary
		b, err = cbor.Marshal(v)
	} else {
		b, err = json.Marshal(v)
	}
	if err != nil {
		return false
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.conn.Send(op, b) == nil
}

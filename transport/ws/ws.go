// Package ws serves a thread over WebSocket (github.com/coder/websocket):
// clients send Command objects and receive CommandResponse, ErrorResponse
// and Event objects on one connection, as JSON text frames, or as CBOR
// binary frames when they negotiate the subprotocol [CBORSubprotocol].
//
// Every command works in-band, subscriptions included. A dropped
// connection leaves its subscriptions restorable, for the server's
// reconnect grace period, by subscription.reconnect on a new connection.
// The server pings idle connections; a frame over the read limit closes
// the connection with 1009; a rejection after the handshake closes it with
// 4000 + the HTTP status. Origins are checked (see Options.OriginPatterns).
package ws

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"encoding/json"
	"github.com/agentstream/agentstream/codegen/cddlrt"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/coder/websocket"
	"github.com/fxamacker/cbor/v2"
)

// CBORSubprotocol is the WebSocket subprotocol for CBOR framing: the same
// messages as JSON, encoded as CBOR in binary frames.
const CBORSubprotocol = "agentstream.cbor"

// JSONSubprotocol names the default JSON framing, for clients that want
// to ask for it explicitly.
const JSONSubprotocol = "agentstream.json"

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
	// PingInterval is how often an idle connection is pinged (20s); a peer
	// that does not answer within it is dropped.
	PingInterval time.Duration
	// WriteTimeout bounds each write (10s); a peer that cannot take it is
	// dropped.
	WriteTimeout time.Duration
	// MaxBatch is the most events taken from a subscription at a time (256).
	MaxBatch int
	// OnConn, when set, is called as a connection opens, and the function
	// it returns as it closes (for metrics).
	OnConn func() (done func())
	// OnDeliver, when set, counts the events written.
	OnDeliver func(n int)
}

func (o Options) withDefaults() Options {
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
	return o
}

// Handler upgrades requests to thread WebSockets.
type Handler struct {
	srv     *server.Server
	opts    Options
	ctx     context.Context // cancelled by Shutdown
	stop    context.CancelFunc
	mu      sync.Mutex // orders wg.Add against Shutdown's Wait
	closing bool
	wg      sync.WaitGroup // open connections
}

// New returns a handler for srv.
func New(srv *server.Server, opts Options) *Handler {
	ctx, stop := context.WithCancel(context.Background())
	return &Handler{srv: srv, opts: opts.withDefaults(), ctx: ctx, stop: stop}
}

// Shutdown closes every connection with 1001 (going away) and waits for
// their goroutines, or for ctx.
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
		return ctx.Err()
	}
}

// ServeHTTP upgrades the request and serves thread r.PathValue("id").
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	bw := &batchWriter{ResponseWriter: w}
	conn, err := websocket.Accept(bw, r, &websocket.AcceptOptions{
		Subprotocols:   []string{CBORSubprotocol, JSONSubprotocol},
		OriginPatterns: h.opts.OriginPatterns,
	})
	if err != nil {
		return // Accept has answered (403 for a bad origin, 426 ...)
	}
	h.mu.Lock()
	if h.closing {
		h.mu.Unlock()
		conn.Close(websocket.StatusGoingAway, "server shutting down")
		return
	}
	h.wg.Add(1)
	h.mu.Unlock()
	defer h.wg.Done()
	thread := r.PathValue("id")
	if thread == "" {
		conn.Close(4000+http.StatusBadRequest, "the path needs a thread id")
		return
	}
	conn.SetReadLimit(h.opts.ReadLimit)
	if h.opts.OnConn != nil {
		defer h.opts.OnConn()()
	}
	c := &connection{h: h, conn: conn, raw: bw.conn, cbor: conn.Subprotocol() == CBORSubprotocol, session: h.srv.NewSession(thread)}
	c.serve(r.Context())
}

// connection is one WebSocket: a reader of commands, one writer of events
// for all its subscriptions, and a pinger, all stopped when it ends.
//
// The writer sends the events of every subscription of the connection in
// sequence order, each once: when a subscription is added, its replay goes
// out before newer events of the others (so a client never sees a run end
// before the replayed events of that run), and an event two subscriptions
// match is sent once (clients route events by filter).
type connection struct {
	h       *Handler
	conn    *websocket.Conn
	raw     *batchConn // gathers a batch of events into one write
	cbor    bool
	session *server.Session
	ctx     context.Context
	wg      sync.WaitGroup
	wmu     sync.Mutex // serialises frames

	smu  sync.Mutex
	subs map[*server.Subscription]bool

	// A writer goroutine runs only while there are events to write.
	kmu      sync.Mutex
	writing  bool
	closing  bool
	lastSent uint64 // owned by the running writer
}

func (c *connection) serve(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
	c.ctx = ctx
	c.subs = map[*server.Subscription]bool{}
	stopPing := c.keepalive(ctx, cancel)
	stopShutdown := context.AfterFunc(c.h.ctx, func() {
		c.conn.Close(websocket.StatusGoingAway, "server shutting down")
		cancel()
	})
	defer func() {
		stopShutdown()
		stopPing()
		c.kmu.Lock()
		c.closing = true
		c.kmu.Unlock()
		cancel()
		c.wg.Wait()
		c.session.Detach()
	}()
	for {
		typ, data, err := c.conn.Read(ctx)
		if err != nil {
			return // the peer went, a frame was too big (closed with 1009), or shutdown
		}
		if !c.send(ctx, c.command(ctx, typ, data)) {
			return
		}
	}
}

// kick starts a writer unless one is running or the connection is ending.
// Subscriptions call it (on the publisher's goroutine) when events wait.
func (c *connection) kick() {
	c.kmu.Lock()
	if c.writing || c.closing {
		c.kmu.Unlock()
		return
	}
	c.writing = true
	c.wg.Add(1)
	c.kmu.Unlock()
	go c.drain()
}

// drain writes until nothing is ready, then stops, re-checking for events
// that arrived while it was stopping.
func (c *connection) drain() {
	defer c.wg.Done()
	for {
		ok := c.writeReady(c.ctx)
		c.kmu.Lock()
		c.writing = false
		c.kmu.Unlock()
		if !ok || !c.pending() {
			return
		}
		c.kmu.Lock()
		if c.writing || c.closing {
			c.kmu.Unlock()
			return
		}
		c.writing = true
		c.kmu.Unlock()
	}
}

// pending reports whether any subscription has an event or has ended.
func (c *connection) pending() bool {
	c.smu.Lock()
	defer c.smu.Unlock()
	for s := range c.subs {
		if _, ok := s.Peek(); ok || s.Done() {
			return true
		}
	}
	return false
}

// next takes the event with the lowest sequence number among the
// subscriptions' heads (notices first), dropping subscriptions that ended.
func (c *connection) next() (*server.Event, error) {
	c.smu.Lock()
	defer c.smu.Unlock()
	var best *server.Subscription
	var bestSeq uint64
	for s := range c.subs {
		seq, ok := s.Peek()
		if !ok {
			if s.Done() {
				if _, _, err := s.TryNext(); err != nil {
					delete(c.subs, s)
					var sce *server.SlowConsumerError
					if errors.As(err, &sce) {
						return nil, err
					}
				}
			}
			continue
		}
		if best == nil || seq < bestSeq {
			best, bestSeq = s, seq
		}
	}
	if best == nil {
		return nil, nil
	}
	e, _, _ := best.TryNext()
	return e, nil
}

// writeReady writes every ready event in batches; it reports false when the
// connection must end (a write failed, or a subscriber fell too far behind).
func (c *connection) writeReady(ctx context.Context) bool {
	for {
		n := 0
		c.wmu.Lock() // a batch is one write: responses wait for it
		c.raw.begin()
		for n < c.h.opts.MaxBatch {
			e, err := c.next()
			if err != nil {
				var sce *server.SlowConsumerError
				if errors.As(err, &sce) {
					// Tell the client why its events stopped; it can
					// resubscribe (the SDK dedupes by event_id).
					_ = c.raw.flush(c.h.opts.WriteTimeout)
					c.wmu.Unlock()
					c.conn.Close(4000+http.StatusTooManyRequests, sce.Error())
					return false
				}
			}
			if e == nil {
				break
			}
			if e.Seq != 0 && e.Seq == c.lastSent {
				continue // the same event through another subscription
			}
			c.lastSent = e.Seq
			typ, b := websocket.MessageText, e.JSON()
			if c.cbor {
				var cerr error
				if b, cerr = e.CBOR(); cerr != nil {
					continue
				}
				typ = websocket.MessageBinary
			}
			if err := c.conn.Write(ctx, typ, b); err != nil {
				_ = c.raw.flush(c.h.opts.WriteTimeout)
				c.wmu.Unlock()
				return false
			}
			n++
		}
		err := c.raw.flush(c.h.opts.WriteTimeout)
		c.wmu.Unlock()
		if err != nil {
			c.conn.CloseNow() // a peer that cannot take a batch in time is dropped
			return false
		}
		if c.h.opts.OnDeliver != nil && n > 0 {
			c.h.opts.OnDeliver(n)
		}
		if n < c.h.opts.MaxBatch {
			return true
		}
	}
}

// command decodes and carries out one command, on a goroutine of its own:
// decoding and validating grow a stack that the connection's long-lived
// reader would otherwise keep while idle.
func (c *connection) command(ctx context.Context, typ websocket.MessageType, data []byte) any {
	out := make(chan any, 1) // the one result; buffered so the worker never waits
	go func() {
		cmd, errResp := c.decode(typ, data)
		if errResp != nil {
			out <- errResp
			return
		}
		resp, errResp := c.session.Do(ctx, cmd, func(s *server.SessionSub) {
			c.smu.Lock()
			c.subs[s.Sub] = true
			c.smu.Unlock()
			s.Sub.SetNotifyFunc(c.kick)
		})
		if errResp != nil {
			out <- errResp
			return
		}
		out <- resp
	}()
	return <-out
}

func (c *connection) decode(typ websocket.MessageType, data []byte) (*protocol.ClientCommand, *protocol.ErrorResponse) {
	if typ == websocket.MessageBinary {
		if !c.cbor {
			return nil, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "binary frames need the %s subprotocol", CBORSubprotocol)
		}
		// CBOR commands are checked by the same schema, through JSON.
		var v any
		if err := cddlrt.CBORDecMode.Unmarshal(data, &v); err != nil {
			return nil, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "malformed CBOR: %v", err)
		}
		j, err := json.Marshal(v)
		if err != nil {
			return nil, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "CBOR without a JSON equivalent: %v", err)
		}
		data = j
	}
	return protocol.DecodeCommand(data)
}

// send writes one message (response, error or event) as a frame.
func (c *connection) send(ctx context.Context, v any) bool {
	var b []byte
	var err error
	typ := websocket.MessageText
	if c.cbor {
		typ = websocket.MessageBinary
		b, err = cbor.Marshal(v)
	} else {
		b, err = json.Marshal(v)
	}
	if err != nil {
		return false
	}
	return c.write(ctx, typ, b)
}

func (c *connection) write(ctx context.Context, typ websocket.MessageType, b []byte) bool {
	wctx, cancel := context.WithTimeout(ctx, c.h.opts.WriteTimeout)
	defer cancel()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.conn.Write(wctx, typ, b) == nil
}

// keepalive pings the peer every PingInterval and drops it when it stops
// answering. It uses a timer rather than a goroutine of its own, which
// keeps idle connections small; it returns the function that stops it.
func (c *connection) keepalive(ctx context.Context, cancel context.CancelFunc) (stop func()) {
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	t = time.AfterFunc(c.h.opts.PingInterval, func() {
		pctx, pcancel := context.WithTimeout(ctx, c.h.opts.PingInterval)
		err := c.conn.Ping(pctx)
		pcancel()
		if err != nil {
			cancel()
			return
		}
		mu.Lock()
		if !stopped {
			t.Reset(c.h.opts.PingInterval)
		}
		mu.Unlock()
	})
	return func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
		t.Stop()
	}
}

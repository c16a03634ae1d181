package wsframe

import (
	"bufio"
	"context"
	"net/http"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentstream/agentstream/transport/internal/idlepark"
	"github.com/coder/websocket"
)

// WebSocket opcodes (RFC 6455 section 5.2).
const (
	OpText   = 0x1
	OpBinary = 0x2
	OpClose  = 0x8
	OpPing   = 0x9
	OpPong   = 0xa
)

// Conn is an accepted WebSocket: the library's connection for reading
// messages, and this package's batch writer and control-frame handling.
// Begin, Frame and Flush must not be called concurrently with each other
// (the caller serialises its batches); everything else is safe from any
// goroutine.
type Conn struct {
	ws           *websocket.Conn
	raw          *batchConn       // gathers a batch of frames into one write
	br           *bufio.Reader    // the library's reader, peeked between messages
	rc           syscall.RawConn  // the socket, waited on between messages (nil: wait in br)
	park         *idlepark.Socket // parks the socket between messages (nil: wait on a goroutine)
	resumed      bool             // the reader was resumed from parking; owned by the reader
	writeTimeout time.Duration
	closeTimeout time.Duration

	alive     atomic.Bool // the peer sent something since the last ping
	pinged    atomic.Bool // a ping went out
	idle      atomic.Bool // AwaitMessage has read everything received and waits
	readLimit atomic.Int64
}

// Accept upgrades the request as websocket.Accept does, with the small
// buffers and the batching connection this package needs. On an error,
// Accept has answered the request (403 for a bad origin, 426 ...).
// writeTimeout bounds each write of the connection.
func Accept(w http.ResponseWriter, r *http.Request, opts *websocket.AcceptOptions, writeTimeout time.Duration) (*Conn, error) {
	bw := &batchWriter{ResponseWriter: w}
	ws, err := websocket.Accept(bw, r, opts)
	if err != nil {
		return nil, err
	}
	bw.restoreAhead()
	bw.conn.mu.Lock()
	bw.conn.timeout = writeTimeout
	bw.conn.mu.Unlock()
	return &Conn{ws: ws, raw: bw.conn, br: bw.br, rc: rawConnOf(bw.conn.Conn), writeTimeout: writeTimeout, closeTimeout: CloseTimeout}, nil
}

// SetParking lets AwaitMessage park the connection on p while nothing is
// received, with no goroutine of its own (it returns ErrParked); resume
// runs, on a new goroutine, once the socket is readable or the connection
// is being closed, and must call AwaitMessage again. Call it before the
// first AwaitMessage.
func (c *Conn) SetParking(p *idlepark.Poller, resume func()) {
	if c.rc != nil && idlepark.Supported {
		c.park = p.Socket(c.rc, func() {
			c.resumed = true
			resume()
		})
	}
}

// Parks reports whether AwaitMessage parks the connection between
// messages (SetParking was called, on a platform that parks).
func (c *Conn) Parks() bool { return c.park != nil }

// Subprotocol is the subprotocol the handshake chose.
func (c *Conn) Subprotocol() string { return c.ws.Subprotocol() }

// SetReadLimit caps a message; a larger one closes the connection with
// 1009.
func (c *Conn) SetReadLimit(n int64) {
	c.readLimit.Store(n)
	c.ws.SetReadLimit(n)
}

// Read reads the message whose first frame AwaitMessage found, through the
// library.
func (c *Conn) Read(ctx context.Context) (websocket.MessageType, []byte, error) {
	return c.ws.Read(ctx)
}

// Close runs the closing handshake through the library, waiting for the
// peer's answer (up to 5 s): for a connection refused right after it
// opened, before AwaitMessage ever runs.
func (c *Conn) Close(code websocket.StatusCode, reason string) error {
	c.park.Wake(true)
	return c.ws.Close(code, reason)
}

// CloseNow closes the connection without a closing handshake.
func (c *Conn) CloseNow() {
	c.park.Wake(true) // before the socket closes: its reader must see the end
	_ = c.ws.CloseNow()
}

// Begin opens a batch: frames appended until Flush go out in one write.
func (c *Conn) Begin() { c.raw.begin() }

// Frame appends one data frame (FIN set, unmasked) to the open batch. It
// returns ErrClosed once a close frame went out.
func (c *Conn) Frame(opcode byte, payload []byte) error { return c.raw.frame(opcode, payload) }

// Flush writes the open batch, within the write timeout, and closes it.
func (c *Conn) Flush() error { return c.raw.flush(c.writeTimeout) }

// Send writes one data frame now, as a batch of its own.
func (c *Conn) Send(opcode byte, payload []byte) error {
	c.Begin()
	if err := c.Frame(opcode, payload); err != nil {
		_ = c.Flush()
		return err
	}
	return c.Flush()
}

// InputPending reports whether the peer sent something the connection has
// not finished with: a message being read or carried out, bytes buffered,
// or bytes waiting on the socket. It is safe from any goroutine and never
// blocks.
func (c *Conn) InputPending() bool {
	return !c.idle.Load() || socketReadable(c.rc)
}

// Ping sends a ping, unless the peer sent nothing (not even the pong)
// since the previous one: Ping then reports false, and the caller drops
// the connection. Ping never blocks: a ping the socket does not take at
// once is written on a goroutine of its own (an idle connection's is
// not: a server pinging many idle connections starts no goroutine each).
func (c *Conn) Ping() bool {
	if c.pinged.Load() && !c.alive.Load() {
		return false
	}
	c.alive.Store(false)
	c.pinged.Store(true)
	if !c.raw.tryControl(OpPing, c.rc) {
		go func() { _ = c.raw.control(OpPing, nil, c.writeTimeout) }()
	}
	return true
}

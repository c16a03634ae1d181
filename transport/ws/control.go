package ws

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"time"

	"github.com/coder/websocket"
)

// The connection's long-lived goroutine does not wait inside the library:
// a read parked in the library's frame reader needs a 4 KiB stack, more
// than the rest of an idle connection's state. It waits for the socket to
// become readable (parked by the runtime's poller, on a 2 KiB stack), then
// peeks at the next frame's header. A data frame is left where
// it is for the library to read, as a whole message, on a short-lived
// goroutine; the control frames between messages (pings, pongs, the
// peer's close) are answered here. The library still handles control
// frames that arrive inside a fragmented message.

// closeTimeout is how long a peer has to answer a close frame (a variable
// for tests).
var closeTimeout = 5 * time.Second

var (
	errProtocol   = errors.New("a control frame breaks RFC 6455")
	errPeerClosed = errors.New("the peer closed the WebSocket")
)

// awaitMessage returns once a data frame is at the head of the input,
// answering the control frames before it. It returns an error when the
// connection must end: the peer closed it, broke the protocol (answered
// with 1002), or the socket failed or passed its read deadline.
func (c *connection) awaitMessage() error {
	for {
		if c.br.Buffered() == 0 && c.rc != nil {
			if err := waitReadable(c.rc); err != nil {
				return err
			}
		}
		h, err := c.br.Peek(2)
		if err != nil {
			return err
		}
		op := h[0] & 0x0f
		if op&0x8 == 0 {
			c.alive.Store(true)
			return nil // data or continuation: the library's to read (and to reject, if it must)
		}
		fin, rsv, masked, n := h[0]&0x80 != 0, h[0]&0x70, h[1]&0x80 != 0, int(h[1]&0x7f)
		if !fin || rsv != 0 || !masked || n > 125 || op > opPong || (op == opClose && n == 1) {
			c.closeWith(websocket.StatusProtocolError, "malformed control frame")
			return errProtocol
		}
		if _, err := c.br.Discard(2); err != nil {
			return err
		}
		f := make([]byte, 4+n) // mask key and payload
		if _, err := io.ReadFull(c.br, f); err != nil {
			return err
		}
		payload := f[4:]
		for i := range payload {
			payload[i] ^= f[i%4]
		}
		c.alive.Store(true)
		switch op {
		case opPing:
			if err := c.raw.control(opPong, payload, c.h.opts.WriteTimeout); err != nil && !errors.Is(err, errClosed) {
				return err
			}
		case opClose:
			// Answer with the peer's status, unless this side closed first
			// (then this is the answer, and control sends nothing).
			_ = c.raw.control(opClose, payload[:min(2, len(payload))], c.h.opts.WriteTimeout)
			return errPeerClosed
		}
	}
}

// closeWith starts the closing handshake: the close frame goes out now,
// and the connection ends when the peer answers or, at the latest, after
// closeTimeout. It is safe from any goroutine and more than once.
func (c *connection) closeWith(code websocket.StatusCode, reason string) {
	p := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(reason)), uint16(code))
	p = append(p, reason[:min(len(reason), 123)]...)
	if c.raw.control(opClose, p, c.h.opts.WriteTimeout) != nil {
		c.conn.CloseNow()
		return
	}
	_ = c.raw.SetReadDeadline(time.Now().Add(closeTimeout))
}

// message has the library read the message whose first frame is at the
// head of the input, then carries out the command, on a goroutine of its
// own: reading, decoding, validating and encoding grow a stack that the
// connection's long-lived goroutine would otherwise keep while idle. It
// reports false when the connection must end.
func (c *connection) message() bool {
	out := make(chan bool, 1) // buffered so the worker never waits
	go func() {
		typ, data, err := c.conn.Read(context.Background())
		if err != nil {
			out <- false // closed by the library (1009 for a frame too big, 1002 ...), or the socket failed
			return
		}
		out <- c.command(typ, data)
	}()
	return <-out
}

// ping is the handler's pinger for one connection, every PingInterval: a
// connection that sent nothing, not even a pong, since the previous ping
// is dropped. It runs under the handler's lock.
func (c *connection) ping() {
	if c.pinged && !c.alive.Load() {
		go c.conn.CloseNow()
		return
	}
	c.alive.Store(false)
	c.pinged = true
	go func() { _ = c.raw.control(opPing, nil, c.h.opts.WriteTimeout) }()
}

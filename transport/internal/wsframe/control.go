package wsframe

import (
	"encoding/binary"
	"errors"
	"io"
	"time"

	"github.com/coder/websocket"
)

// A connection's long-lived goroutine does not wait inside the library:
// a read parked in the library's frame reader needs a 4 KiB stack, more
// than the rest of an idle connection's state. It waits for the socket to
// become readable (parked by the runtime's poller, on a 2 KiB stack), then
// peeks at the next frame's header. A data frame is left where
// it is for the library to read, as a whole message, on a short-lived
// goroutine; the control frames between messages (pings, pongs, the
// peer's close) are answered here. The library still handles control
// frames that arrive inside a fragmented message.

// CloseTimeout is how long a peer has to answer a close frame (a variable
// for tests).
var CloseTimeout = 5 * time.Second

var (
	// ErrProtocol ends a connection whose peer sent a malformed control
	// frame; it was answered with 1002.
	ErrProtocol = errors.New("wsframe: a control frame breaks RFC 6455")
	// ErrPeerClosed ends a connection whose peer sent a close frame; it was
	// answered.
	ErrPeerClosed = errors.New("wsframe: the peer closed the WebSocket")
)

// AwaitMessage returns once a data frame is at the head of the input,
// answering the control frames before it. It returns an error when the
// connection must end: the peer closed it, broke the protocol (answered
// with 1002), or the socket failed or passed its read deadline.
func (c *Conn) AwaitMessage() error {
	for {
		if c.br.Buffered() == 0 {
			// Everything received so far is read: the connection waits.
			c.idle.Store(true)
			if c.rc != nil {
				if err := waitReadable(c.rc); err != nil {
					return err
				}
			}
		}
		h, err := c.br.Peek(2)
		if err != nil {
			return err
		}
		op := h[0] & 0x0f
		if op&0x8 == 0 {
			c.idle.Store(false) // until the connection waits again
			c.alive.Store(true)
			return nil // data or continuation: the library's to read (and to reject, if it must)
		}
		fin, rsv, masked, n := h[0]&0x80 != 0, h[0]&0x70, h[1]&0x80 != 0, int(h[1]&0x7f)
		if !fin || rsv != 0 || !masked || n > 125 || op > OpPong || (op == OpClose && n == 1) {
			c.CloseWith(websocket.StatusProtocolError, "malformed control frame")
			return ErrProtocol
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
		case OpPing:
			if err := c.raw.control(OpPong, payload, c.writeTimeout); err != nil && !errors.Is(err, ErrClosed) {
				return err
			}
		case OpClose:
			// Answer with the peer's status, unless this side closed first
			// (then this is the answer, and control sends nothing).
			_ = c.raw.control(OpClose, payload[:min(2, len(payload))], c.writeTimeout)
			return ErrPeerClosed
		}
	}
}

// CloseWith starts the closing handshake: the close frame goes out now,
// and the connection ends when the peer answers or, at the latest, after
// CloseTimeout. It is safe from any goroutine and more than once.
func (c *Conn) CloseWith(code websocket.StatusCode, reason string) {
	p := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(reason)), uint16(code))
	p = append(p, reason[:min(len(reason), 123)]...)
	if c.raw.control(OpClose, p, c.writeTimeout) != nil {
		c.CloseNow()
		return
	}
	_ = c.raw.SetReadDeadline(time.Now().Add(CloseTimeout))
}

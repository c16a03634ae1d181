package wsframe

import (
	"encoding/binary"
	"errors"
	"io"
	"time"
	"unicode/utf8"

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
// for tests; a connection reads it when it is accepted).
var CloseTimeout = 5 * time.Second

var (
	// ErrProtocol ends a connection whose peer sent a malformed control
	// frame; it was answered with 1002.
	ErrProtocol = errors.New("wsframe: a control frame breaks RFC 6455")
	// ErrPeerClosed ends a connection whose peer sent a close frame; it was
	// answered.
	ErrPeerClosed = errors.New("wsframe: the peer closed the WebSocket")
	// ErrTooBig ends a connection whose peer declared a frame over the
	// read limit; it was answered with 1009.
	ErrTooBig = errors.New("wsframe: a frame over the read limit")
	// ErrParked does not end the connection: AwaitMessage parked it (see
	// SetParking), and the caller's goroutine returns; the resume function
	// calls AwaitMessage again on a goroutine of its own.
	ErrParked = errors.New("wsframe: parked until the socket is readable")
)

// AwaitMessage returns once a data frame is at the head of the input,
// answering the control frames before it. It returns an error when the
// connection must end: the peer closed it, broke the protocol (answered
// with 1002), or the socket failed or passed its read deadline.
func (c *Conn) AwaitMessage() error {
	for {
		if c.br.Buffered() == 0 {
			// Everything received so far is read: the connection waits,
			// parked without a goroutine when it can be.
			c.idle.Store(true)
			if c.resumed {
				c.resumed = false // readable: read it (a parked socket is resumed once it is)
			} else if c.park.Park() {
				return ErrParked
			}
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
			// The library drops a connection whose client sent an unmasked
			// frame without saying why; RFC 6455 section 5.1 allows a 1002.
			if h[1]&0x80 == 0 {
				c.CloseWith(websocket.StatusProtocolError, "unmasked frame from a client")
				return ErrProtocol
			}
			// A frame declaring more than the read limit is refused now,
			// before any of its payload is waited for.
			if n, err := c.declaredLength(h[1] & 0x7f); err != nil {
				return err
			} else if limit := c.readLimit.Load(); limit > 0 && n > uint64(limit) {
				c.CloseWith(websocket.StatusMessageTooBig, "message too big")
				return ErrTooBig
			}
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
			if !validClose(payload) {
				c.CloseWith(websocket.StatusProtocolError, "invalid close code or reason")
				return ErrProtocol
			}
			// Answer with the peer's status, unless this side closed first
			// (then this is the answer, and control sends nothing).
			_ = c.raw.control(OpClose, payload[:min(2, len(payload))], c.writeTimeout)
			return ErrPeerClosed
		}
	}
}

// Drain reads and drops what the peer still sends after this side started
// the closing handshake for a fault (ErrTooBig, ErrProtocol), until the
// peer closes or CloseWith's deadline passes: closing a socket with unread
// input resets it, and the peer would lose the close frame that says why.
func (c *Conn) Drain() {
	_, _ = io.Copy(io.Discard, c.br)
}

// declaredLength reads the payload length a data frame's header declares,
// from its 7-bit length field n and the extended length after it.
func (c *Conn) declaredLength(n byte) (uint64, error) {
	switch n {
	case 126:
		h, err := c.br.Peek(4)
		if err != nil {
			return 0, err
		}
		return uint64(binary.BigEndian.Uint16(h[2:])), nil
	case 127:
		h, err := c.br.Peek(10)
		if err != nil {
			return 0, err
		}
		return binary.BigEndian.Uint64(h[2:]), nil
	}
	return uint64(n), nil
}

// validClose reports whether a close frame's payload is one RFC 6455
// allows: empty, or a status code a peer may send (1000-1003, 1007-1014,
// 3000-4999) followed by a UTF-8 reason.
func validClose(p []byte) bool {
	if len(p) == 0 {
		return true
	}
	if len(p) < 2 || !utf8.Valid(p[2:]) {
		return false
	}
	code := binary.BigEndian.Uint16(p)
	return code >= 1000 && code <= 1003 || code >= 1007 && code <= 1014 || code >= 3000 && code <= 4999
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
	_ = c.raw.SetReadDeadline(time.Now().Add(c.closeTimeout))
	c.park.Wake(true) // a parked reader waits for the answer, or the deadline, itself
}

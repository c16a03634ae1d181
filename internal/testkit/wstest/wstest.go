// Package wstest holds test helpers that speak WebSocket frames by hand,
// straight from RFC 6455 section 5.2 and independently of the code under
// test: a decoder of server frames and an encoder of client frames.
package wstest

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"testing"
)

// ReadFrame decodes one server frame (unmasked). A frame with reserved
// bits or a mask, which a server must not send, is io.ErrUnexpectedEOF.
func ReadFrame(r *bufio.Reader) (fin bool, opcode byte, payload []byte, err error) {
	var h [2]byte
	if _, err = io.ReadFull(r, h[:]); err != nil {
		return
	}
	fin, opcode = h[0]&0x80 != 0, h[0]&0x0f
	if h[0]&0x70 != 0 || h[1]&0x80 != 0 {
		return fin, opcode, nil, io.ErrUnexpectedEOF
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err = io.ReadFull(r, b[:]); err != nil {
			return
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err = io.ReadFull(r, b[:]); err != nil {
			return
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	payload = make([]byte, n)
	_, err = io.ReadFull(r, payload)
	return
}

// ClientFrame encodes a client frame, masked unless mask is false (a
// client must mask: false makes a bad frame on purpose).
func ClientFrame(fin bool, opcode byte, payload []byte, mask bool) []byte {
	b0 := opcode
	if fin {
		b0 |= 0x80
	}
	var m byte
	if mask {
		m = 0x80
	}
	var f []byte
	switch n := len(payload); {
	case n <= 125:
		f = []byte{b0, m | byte(n)}
	case n <= 0xffff:
		f = binary.BigEndian.AppendUint16([]byte{b0, m | 126}, uint16(n))
	default:
		f = binary.BigEndian.AppendUint64([]byte{b0, m | 127}, uint64(n))
	}
	if !mask {
		return append(f, payload...)
	}
	key := [4]byte{1, 2, 3, 4}
	f = append(f, key[:]...)
	for i, c := range payload {
		f = append(f, c^key[i%4])
	}
	return f
}

// LoopbackPair is a connected loopback TCP pair: the accepting end and
// the dialling one, both closed when the test ends.
func LoopbackPair(t testing.TB) (accepted, dialled net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		got <- c
	}()
	dialled, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if accepted = <-got; accepted == nil {
		t.Fatal("no connection accepted")
	}
	t.Cleanup(func() { accepted.Close(); dialled.Close() })
	return accepted, dialled
}

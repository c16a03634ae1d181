//go:build unix

package wsframe

import (
	"net"
	"syscall"
)

// readableFunc makes a raw read wait until the socket has a byte to read
// (or its end, or an error) without taking anything from it: only "would
// block" waits; anything else is left for the real read to meet.
func readableFunc(fd uintptr) bool {
	var b [1]byte
	_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return err != syscall.EAGAIN && err != syscall.EWOULDBLOCK
}

// rawConnOf returns the socket's raw connection, for waiting without a
// read, or nil when it has none.
func rawConnOf(c net.Conn) syscall.RawConn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// waitReadable waits until the socket has something to read, parked by
// the runtime's poller with a shallow stack. It returns the socket's error
// if it is closed or passes its read deadline.
func waitReadable(rc syscall.RawConn) error {
	return rc.Read(readableFunc)
}

// socketReadable reports, without waiting and without taking the read
// lock a waiting reader holds, whether the socket has bytes to read.
func socketReadable(rc syscall.RawConn) bool {
	if rc == nil {
		return false
	}
	readable := false
	_ = rc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		readable = err == nil && n > 0
	})
	return readable
}

// writeNow writes p to the socket without waiting: what the socket's
// buffer takes at once. It returns errWouldBlock when it takes nothing.
func writeNow(rc syscall.RawConn, p []byte) (int, error) {
	if rc == nil {
		return 0, errWouldBlock
	}
	var n int
	var werr error
	// Control, not Write: Write refuses once the last write's deadline
	// has passed, as it has on an idle connection. The caller serialises
	// the connection's writes.
	if err := rc.Control(func(fd uintptr) {
		n, werr = syscall.Write(int(fd), p)
	}); err != nil {
		return 0, err
	}
	if werr == syscall.EAGAIN || werr == syscall.EWOULDBLOCK {
		return 0, errWouldBlock
	}
	return max(n, 0), werr
}

//go:build !unix

package wsframe

import (
	"net"
	"syscall"
)

// rawConnOf returns nil: without MSG_PEEK the connection waits in its
// buffered reader instead.
func rawConnOf(net.Conn) syscall.RawConn { return nil }

func waitReadable(syscall.RawConn) error { return nil }

// socketReadable reports false: without MSG_PEEK only the connection's
// own state tells.
func socketReadable(syscall.RawConn) bool { return false }

// writeNow returns errWouldBlock: the caller writes on a goroutine.
func writeNow(syscall.RawConn, []byte) (int, error) { return 0, errWouldBlock }

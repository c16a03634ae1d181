package wsframe

import (
	"errors"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/agentstream/agentstream/internal/testkit/wstest"
	"github.com/stretchr/testify/require"
)

func readExactly(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	b := make([]byte, n)
	_, err := c.Read(b)
	require.NoError(t, err)
	return b
}

func nothingToRead(t *testing.T, c net.Conn) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(100*time.Millisecond)))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "nothing on the wire: %v", err)
}

// TestPingWithoutWaiting: a ping goes straight to an idle socket, into an
// open batch, and is refused (for the caller to send on a goroutine) when
// a write holds the connection or the socket's buffer is full.
func TestPingWithoutWaiting(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("writes without waiting need a unix socket")
	}
	srv, cli := wstest.LoopbackPair(t)
	rc := rawConnOf(srv)
	b := &batchConn{Conn: srv, timeout: time.Second}

	require.True(t, b.tryControl(OpPing, rc), "an idle socket takes it at once")
	require.Equal(t, []byte{0x80 | OpPing, 0}, readExactly(t, cli, 2))

	// The last write's deadline has passed, as it has on a connection idle
	// for longer than the write timeout.
	require.NoError(t, srv.SetWriteDeadline(time.Now().Add(-time.Second)))
	require.True(t, b.tryControl(OpPing, rc))
	require.Equal(t, []byte{0x80 | OpPing, 0}, readExactly(t, cli, 2), "sent all the same")

	b.begin()
	require.True(t, b.tryControl(OpPing, rc), "into the open batch")
	nothingToRead(t, cli)
	require.NoError(t, b.flush(time.Second))
	require.Equal(t, []byte{0x80 | OpPing, 0}, readExactly(t, cli, 2))

	b.mu.Lock() // a write under way
	require.False(t, b.tryControl(OpPing, rc))
	b.mu.Unlock()

	// Fill the socket: the peer reads nothing.
	require.NoError(t, srv.(*net.TCPConn).SetWriteBuffer(4096))
	chunk := make([]byte, 64<<10)
	for {
		_, err := writeNow(rc, chunk)
		if errors.Is(err, errWouldBlock) {
			break
		}
		require.NoError(t, err)
	}
	require.False(t, b.tryControl(OpPing, rc), "a full socket: sent nothing, the caller goes on a goroutine")

	b.mu.Lock()
	b.closed = true // a close frame went out
	b.mu.Unlock()
	require.True(t, b.tryControl(OpPing, rc), "after a close frame there is nothing to send")
}

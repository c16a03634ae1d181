package idlepark

import (
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentstream/agentstream/internal/testkit/wstest"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func rawOf(t *testing.T, c net.Conn) syscall.RawConn {
	rc, err := c.(syscall.Conn).SyscallConn()
	require.NoError(t, err)
	return rc
}

// counter is a resume function that counts its calls and signals each.
type counter struct {
	n  atomic.Int32
	ch chan struct{}
}

func newCounter() *counter { return &counter{ch: make(chan struct{}, 16)} }

func (c *counter) resume() {
	c.n.Add(1)
	c.ch <- struct{}{}
}

func (c *counter) await(t *testing.T, what string) {
	t.Helper()
	select {
	case <-c.ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("not resumed: %s", what)
	}
}

func (c *counter) none(t *testing.T, what string) {
	t.Helper()
	select {
	case <-c.ch:
		t.Fatalf("resumed, but should not be: %s", what)
	case <-time.After(100 * time.Millisecond):
	}
}

func requireNoLoop(t *testing.T, p *Poller) {
	t.Helper()
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.loop == nil
	}, 5*time.Second, 5*time.Millisecond, "the waiter ends when nothing is parked")
}

// parkable is a loopback connection whose server end is a Socket of p,
// resumed through c (Linux only: the test is skipped elsewhere).
func parkable(t *testing.T, p *Poller) (srv, cli net.Conn, c *counter, s *Socket) {
	t.Helper()
	if !Supported {
		t.Skip("idlepark parks only on Linux (epoll)")
	}
	srv, cli = wstest.LoopbackPair(t)
	c = newCounter()
	return srv, cli, c, p.Socket(rawOf(t, srv), c.resume)
}

func TestParkedSocketResumesOnInput(t *testing.T) {
	var p Poller
	srv, cli, c, s := parkable(t, &p)
	require.True(t, s.Park())
	require.False(t, s.Park(), "already parked")
	require.Equal(t, 1, p.Parked())
	c.none(t, "nothing was sent")

	_, err := cli.Write([]byte("x"))
	require.NoError(t, err)
	c.await(t, "the peer wrote")
	require.Equal(t, 0, p.Parked())
	require.False(t, s.Wake(false), "resumed already: Wake finds nothing parked")
	c.none(t, "resumed once")

	// Parked again with the byte unread: level-triggered, so at once.
	require.True(t, s.Park())
	c.await(t, "input still unread")
	buf := make([]byte, 1)
	_, err = srv.Read(buf)
	require.NoError(t, err)

	// Parked again, then the peer hangs up.
	require.True(t, s.Park())
	c.none(t, "read all")
	require.NoError(t, cli.Close())
	c.await(t, "the peer closed")
	require.EqualValues(t, 3, c.n.Load())
	requireNoLoop(t, &p)
}

func TestWakeResumesOnceAndFinalWakeStopsParking(t *testing.T) {
	var p Poller
	srv, cli, c, s := parkable(t, &p)
	require.True(t, s.Park())
	require.True(t, s.Wake(false))
	c.await(t, "woken")
	// The registration Wake left armed fires on this input; it answers an
	// old Park and is dropped.
	_, err := cli.Write([]byte("x"))
	require.NoError(t, err)
	c.none(t, "an event of a Park already answered")

	require.True(t, s.Park()) // readable: resumes at once
	c.await(t, "readable")
	_, err = srv.Read(make([]byte, 1))
	require.NoError(t, err)

	require.True(t, s.Park())
	require.True(t, s.Wake(true))
	c.await(t, "woken for closing")
	require.False(t, s.Park(), "a socket being closed is not parked again")
	require.False(t, s.Wake(true))
	require.EqualValues(t, 3, c.n.Load())
	requireNoLoop(t, &p)
}

func TestClosedSocketIsNotParked(t *testing.T) {
	var p Poller
	srv, _ := wstest.LoopbackPair(t)
	rc := rawOf(t, srv)
	require.NoError(t, srv.Close())
	c := newCounter()
	require.False(t, p.Socket(rc, c.resume).Park())
	require.False(t, (*Socket)(nil).Park())
	require.False(t, p.Socket(nil, c.resume).Park())
	requireNoLoop(t, &p)
}

// TestManySocketsEachResumeOnce: sockets parked and resumed in every
// order, the waiter started again after it ended, and each socket resumed
// once per Park.
func TestManySocketsEachResumeOnce(t *testing.T) {
	if !Supported {
		t.Skip("idlepark parks only on Linux (epoll)")
	}
	var p Poller
	const n = 200
	srvs, clis, counters, socks := make([]net.Conn, n), make([]net.Conn, n), make([]*counter, n), make([]*Socket, n)
	for i := range n {
		srvs[i], clis[i] = wstest.LoopbackPair(t)
		counters[i] = newCounter()
		socks[i] = p.Socket(rawOf(t, srvs[i]), counters[i].resume)
	}
	for round := range 3 {
		for i := range n {
			require.True(t, socks[i].Park())
		}
		require.Equal(t, n, p.Parked())
		for i := range n {
			if i%2 == 0 {
				_, err := clis[i].Write([]byte{byte(round)})
				require.NoError(t, err)
			} else {
				require.True(t, socks[i].Wake(false))
			}
		}
		for i := range n {
			counters[i].await(t, "each socket once")
			if i%2 == 0 {
				_, err := srvs[i].Read(make([]byte, 1))
				require.NoError(t, err)
			}
		}
		requireNoLoop(t, &p)
	}
	for i := range n {
		require.EqualValues(t, 3, counters[i].n.Load())
	}
	p.mu.Lock()
	started := p.started
	p.mu.Unlock()
	require.Equal(t, 3, started, "a waiter per round: it ends when nothing is parked")
}

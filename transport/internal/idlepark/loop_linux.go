package idlepark

import (
	"runtime"
	"syscall"
)

// Supported: this platform parks sockets (epoll).
const Supported = true

// loop is the waiter: an epoll instance, and a pipe that tells it to end.
type loop struct {
	epfd   int
	rd, wr int // the pipe: a byte on it ends the waiter
}

const stopMark = -1 // the pipe's event carries this descriptor

func startLoop(p *Poller) (*loop, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_NONBLOCK|syscall.O_CLOEXEC); err != nil {
		_ = syscall.Close(epfd)
		return nil, err
	}
	l := &loop{epfd: epfd, rd: fds[0], wr: fds[1]}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: stopMark}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, l.rd, &ev); err != nil {
		l.close()
		return nil, err
	}
	go l.run(p)
	return l, nil
}

// arm registers fd for one readiness event (readable, the peer's hang-up,
// an error), answering the Park numbered gen. A registration left from an
// earlier Park is re-armed.
func (l *loop) arm(fd int32, gen uint32) error {
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: fd, Pad: int32(gen)}
	err := syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_MOD, int(fd), &ev)
	if err == syscall.ENOENT {
		err = syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev)
	}
	return err
}

// stop ends the waiter; it closes its descriptors as it goes.
func (l *loop) stop() { _, _ = syscall.Write(l.wr, []byte{0}) }

func (l *loop) close() {
	_ = syscall.Close(l.rd)
	_ = syscall.Close(l.wr)
	_ = syscall.Close(l.epfd)
}

func (l *loop) run(p *Poller) {
	defer l.close()
	events := make([]syscall.EpollEvent, 64)
	var ready []readiness
	for {
		n, err := syscall.EpollWait(l.epfd, events, -1)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			p.fail(l) // cannot happen with a valid epfd: resume everything rather than strand it
			return
		}
		stopping := false
		ready = ready[:0]
		for _, ev := range events[:n] {
			if ev.Fd == stopMark {
				stopping = true
				continue
			}
			ready = append(ready, readiness{fd: ev.Fd, gen: uint32(ev.Pad)})
		}
		p.fire(l, ready)
		if stopping {
			return
		}
		// Let the goroutines just started run before starting more: a
		// burst of readiness (every connection's pong) then needs a few
		// goroutines at a time, not one per connection, and the runtime
		// keeps a stack for as many goroutines as ever ran at once.
		runtime.Gosched()
	}
}

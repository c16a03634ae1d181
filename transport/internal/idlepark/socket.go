package idlepark

import (
	"sync"
	"syscall"
)

// Poller parks sockets; the zero value is ready to use. It may serve any
// number of sockets.
type Poller struct {
	mu      sync.Mutex
	loop    *loop             // the running waiter, nil while nothing is parked
	parked  map[int32]*Socket // by file descriptor: the sockets the waiter resumes
	started int               // waiters started so far (for tests)
}

// Socket is one connection's socket as the Poller sees it. Its methods are
// safe from any goroutine.
type Socket struct {
	p      *Poller
	rc     syscall.RawConn
	resume func()
	fd     int32  // set by the first Park
	gen    uint32 // which Park a readiness event answers
	armed  bool   // parked: in p.parked, resume not yet started
	done   bool   // Wake(true) ran: never parked again
}

// Socket makes rc parkable; resume is what runs, on a new goroutine, when
// a parked socket is resumed.
func (p *Poller) Socket(rc syscall.RawConn, resume func()) *Socket {
	return &Socket{p: p, rc: rc, resume: resume}
}

// Park parks the socket: it reports true when resume will run (once the
// socket is readable, hung up or failed, or Wake is called), and false
// when the socket cannot be parked (Wake(true) ran, it is closed, or this
// platform has no epoll); the caller then waits for it itself. The caller
// must not touch the socket's input after a true Park until resume runs.
func (s *Socket) Park() bool {
	if s == nil || s.rc == nil {
		return false
	}
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.done || s.armed {
		return false
	}
	if p.loop == nil {
		l, err := startLoop(p)
		if err != nil {
			return false
		}
		p.loop = l
		p.started++
		if p.parked == nil {
			p.parked = map[int32]*Socket{}
		}
	}
	s.gen++
	ok := false
	if err := s.rc.Control(func(fd uintptr) {
		s.fd = int32(fd)
		ok = p.loop.arm(s.fd, s.gen) == nil
	}); err != nil || !ok {
		p.stopIfIdleLocked()
		return false
	}
	if old := p.parked[s.fd]; old != nil {
		// Another socket was parked under this descriptor: it was closed
		// without Wake and the kernel dropped its registration. Resume it
		// (its reader finds it closed) rather than strand it.
		old.armed = false
		go old.resume()
	}
	s.armed = true
	p.parked[s.fd] = s
	return true
}

// Wake resumes the socket now if it is parked (resume runs on a new
// goroutine) and reports whether it was. With final, the socket is never
// parked again: its owner is closing it, and its reader must wait for the
// peer's answer or the deadline itself. Call it before the socket is
// closed.
func (s *Socket) Wake(final bool) bool {
	if s == nil {
		return false
	}
	p := s.p
	p.mu.Lock()
	if final {
		s.done = true
	}
	if !s.armed {
		p.mu.Unlock()
		return false
	}
	s.armed = false
	delete(p.parked, s.fd)
	// The registration stays armed in epoll: an event for it later finds
	// another generation, or nothing, and is dropped; the kernel removes
	// it when the socket closes.
	p.stopIfIdleLocked()
	p.mu.Unlock()
	go s.resume()
	return true
}

// Parked is how many sockets are parked now.
func (p *Poller) Parked() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.parked)
}

// stopIfIdleLocked asks the waiter to end when nothing is parked; the next
// Park starts another.
func (p *Poller) stopIfIdleLocked() {
	if p.loop != nil && len(p.parked) == 0 {
		p.loop.stop()
		p.loop = nil
	}
}

// fire resumes the sockets whose registrations (fd, generation) became
// ready, on the waiter's goroutine.
func (p *Poller) fire(l *loop, ready []readiness) {
	var resume []*Socket
	p.mu.Lock()
	for _, r := range ready {
		s := p.parked[r.fd]
		if s == nil || s.gen != r.gen || p.loop != l {
			continue // resumed by Wake already, or parked again since
		}
		s.armed = false
		delete(p.parked, r.fd)
		resume = append(resume, s)
	}
	p.stopIfIdleLocked()
	p.mu.Unlock()
	for _, s := range resume {
		go s.resume()
	}
}

// readiness is one epoll event: the socket and the Park it answers.
type readiness struct {
	fd  int32
	gen uint32
}

// fail resumes every socket parked on a waiter that cannot wait any more.
func (p *Poller) fail(l *loop) {
	p.mu.Lock()
	if p.loop != l {
		p.mu.Unlock()
		return
	}
	p.loop = nil
	var resume []*Socket
	for fd, s := range p.parked {
		s.armed = false
		delete(p.parked, fd)
		resume = append(resume, s)
	}
	p.mu.Unlock()
	for _, s := range resume {
		go s.resume()
	}
}

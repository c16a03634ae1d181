package aiosync

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel's AIO ABI (linux/aio_abi.h).
const (
	cmdFsync  = 2 // IOCB_CMD_FSYNC
	cmdFdsync = 3 // IOCB_CMD_FDSYNC
	flagResfd = 1 // IOCB_FLAG_RESFD: announce the completion on aio_resfd
)

// iocb is struct iocb (64 bytes; the key and flags words are in
// little-endian order, as on every architecture Go runs Linux on but
// big-endian s390x, ppc64 and mips, which New refuses).
type iocb struct {
	data     uint64
	key      uint32
	rwFlags  int32
	opcode   uint16
	reqprio  int16
	fildes   uint32
	buf      uint64
	nbytes   uint64
	offset   int64
	reserved uint64
	flags    uint32
	resfd    uint32
}

// ioEvent is struct io_event.
type ioEvent struct {
	data, obj uint64
	res, res2 int64
}

var _ [64]byte = [unsafe.Sizeof(iocb{})]byte{}
var _ [32]byte = [unsafe.Sizeof(ioEvent{})]byte{}

// Syncer submits syncs to one AIO context, at most its depth at once, and
// wakes their callers as they complete. Its methods are safe for
// concurrent use.
type Syncer struct {
	ctx   uint64   // aio_context_t
	event *os.File // eventfd, watched by the network poller
	efd   uint32   // its descriptor (os.File.Fd would make it blocking)
	slots chan struct{}

	mu      sync.Mutex
	next    uint64
	waiting map[uint64]chan error
	stopped bool // closed, or the reaper could not go on: no more AIO

	closeOnce sync.Once
	closeErr  error

	async, blocked atomic.Uint64 // syncs made through AIO; made as blocking calls (refused, or after Close)
	done           chan struct{}
}

// DefaultDepth is how many syncs a Syncer has in flight at most.
const DefaultDepth = 64

// New opens an AIO context for depth syncs at once and starts the
// goroutine that reaps their completions (Close stops it). It fails where
// the kernel has no AIO for this process (too old, or its aio-max-nr
// reached); the caller then syncs as before.
func New(depth int) (*Syncer, error) {
	if depth <= 0 {
		depth = DefaultDepth
	}
	var probe uint16 = 1
	if *(*byte)(unsafe.Pointer(&probe)) != 1 {
		return nil, errors.New("aiosync: big-endian machine")
	}
	var ctx uint64
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, uintptr(depth), uintptr(unsafe.Pointer(&ctx)), 0); e != 0 {
		return nil, fmt.Errorf("aiosync: io_setup: %w", e)
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Syscall(unix.SYS_IO_DESTROY, uintptr(ctx), 0, 0)
		return nil, fmt.Errorf("aiosync: eventfd: %w", err)
	}
	s := &Syncer{
		ctx:     ctx,
		event:   os.NewFile(uintptr(efd), "aiosync-eventfd"), // non-blocking: the poller watches it
		efd:     uint32(efd),
		slots:   make(chan struct{}, depth),
		waiting: map[uint64]chan error{},
		done:    make(chan struct{}),
	}
	go s.reap(depth)
	return s, nil
}

// Counts reports how many syncs went through AIO and how many were made
// as blocking calls instead (the kernel refused the operation for that
// file, or the Syncer was closed); none for a nil Syncer.
func (s *Syncer) Counts() (async, blocking uint64) {
	if s == nil {
		return 0, 0
	}
	return s.async.Load(), s.blocked.Load()
}

// Sync makes the file fd's data durable (fdatasync when dataOnly, else
// fsync), parking the calling goroutine while the kernel works.
func (s *Syncer) Sync(fd uintptr, dataOnly bool) error {
	s.slots <- struct{}{}
	defer func() { <-s.slots }()
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return s.blocking(fd, dataOnly)
	}
	s.next++
	id := s.next
	ch := make(chan error, 1)
	s.waiting[id] = ch
	s.mu.Unlock()

	cb := &iocb{data: id, opcode: cmdFsync, fildes: uint32(fd), flags: flagResfd, resfd: s.efd}
	if dataOnly {
		cb.opcode = cmdFdsync
	}
	list := [1]*iocb{cb}
	n, _, e := unix.Syscall(unix.SYS_IO_SUBMIT, uintptr(s.ctx), 1, uintptr(unsafe.Pointer(&list[0])))
	runtime.KeepAlive(cb)
	if e != 0 || n != 1 {
		s.mu.Lock()
		delete(s.waiting, id)
		s.mu.Unlock()
		// No AIO fsync for this file (before Linux 4.18, or a file
		// system without it), or a bad descriptor: the blocking call
		// gives the answer a plain sync would.
		return s.blocking(fd, dataOnly)
	}
	err := <-ch
	s.async.Add(1)
	return err
}

func (s *Syncer) blocking(fd uintptr, dataOnly bool) error {
	s.blocked.Add(1)
	if dataOnly {
		return unix.Fdatasync(int(fd))
	}
	return unix.Fsync(int(fd))
}

// reap waits on the eventfd (in the network poller) and hands each
// completion to the goroutine waiting for it, until Close.
func (s *Syncer) reap(depth int) {
	defer close(s.done)
	events := make([]ioEvent, depth)
	var buf [8]byte
	var zero unix.Timespec
	for {
		if _, err := s.event.Read(buf[:]); err != nil {
			s.abandon(err)
			return // closed (or broken: later syncs are blocking calls)
		}
		for {
			n, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, uintptr(s.ctx), 0, uintptr(len(events)),
				uintptr(unsafe.Pointer(&events[0])), uintptr(unsafe.Pointer(&zero)), 0)
			if e == unix.EINTR {
				continue
			}
			if e != 0 || n == 0 {
				break
			}
			s.mu.Lock()
			for _, ev := range events[:n] {
				ch := s.waiting[ev.data]
				delete(s.waiting, ev.data)
				if ch == nil {
					continue
				}
				var err error
				if ev.res < 0 {
					err = unix.Errno(-ev.res)
				}
				ch <- err
			}
			s.mu.Unlock()
			if int(n) < len(events) {
				break
			}
		}
	}
}

// abandon stops taking syncs once the reaper cannot go on, and answers
// the ones still waiting with err (after Close there are none: Close
// waits for them first).
func (s *Syncer) abandon(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	for id, ch := range s.waiting {
		delete(s.waiting, id)
		ch <- fmt.Errorf("aiosync: completions lost: %w", err)
	}
}

// Close (of a nil Syncer too) waits for the syncs in flight, then releases the AIO context and
// stops the reaping goroutine. Syncs called after Close are blocking
// calls.
func (s *Syncer) Close() error {
	if s == nil {
		return nil
	}
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.stopped = true
		s.mu.Unlock()
		for range cap(s.slots) { // every slot back: nothing in flight
			s.slots <- struct{}{}
		}
		err := s.event.Close()
		if errors.Is(err, os.ErrClosed) {
			err = nil // closed already
		}
		<-s.done
		if _, _, e := unix.Syscall(unix.SYS_IO_DESTROY, uintptr(s.ctx), 0, 0); e != 0 && err == nil {
			err = fmt.Errorf("aiosync: io_destroy: %w", e)
		}
		for range cap(s.slots) {
			<-s.slots
		}
		s.closeErr = err
	})
	return s.closeErr
}

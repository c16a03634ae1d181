package server

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/agentstream/agentstream/channels"
)

// ErrClosed is returned by a closed subscription's Next once its queued
// events are read.
var ErrClosed = errors.New("server: subscription closed")

// SlowConsumerError ends a subscription whose queue overflowed: it read too
// slowly to keep up. LastSeq is the last event it read, so subscribing
// again with that cursor loses nothing that is still buffered.
type SlowConsumerError struct {
	LastSeq   uint64
	QueueSize int
}

func (e *SlowConsumerError) Error() string {
	return fmt.Sprintf("server: slow consumer: more than %d bytes queued; resume after seq %d", e.QueueSize, e.LastSeq)
}

// Subscription receives a thread's events that match its filter, in
// sequence order: first the replay of buffered events after its cursor,
// then live events, with no gap and no duplicate between the two.
//
// Publishing never waits for a subscription: live events go into a queue
// bounded by bytes, and a subscription whose queue overflows is ended with
// a [SlowConsumerError]. A Subscription is read by one goroutine at a time.
type Subscription struct {
	id       uint64
	filter   channels.Filter
	thread   *thread
	maxBytes int

	mu         sync.Mutex
	pre        []*Event // notices, snapshot and replay, read before the queue
	queue      []*Event // circular
	qhead, qn  int
	qbytes     int
	lastQueued uint64 // the newest seq queued: an event is queued at most once
	lastRead   uint64 // the newest seq read
	closed     bool
	err        error
	// notify wakes the reader; its one slot is enough because the reader
	// drains everything queued each time it wakes.
	notify chan struct{}
	// notifyFn, when set, is called instead (see SetNotifyFunc).
	notifyFn func()
}

func newSubscription(id uint64, t *thread, f channels.Filter, maxBytes int) *Subscription {
	return &Subscription{id: id, thread: t, filter: f, maxBytes: maxBytes, notify: make(chan struct{}, 1)}
}

// Filter is what the subscription selects.
func (s *Subscription) Filter() channels.Filter { return s.filter }

// ThreadID is the thread the subscription observes.
func (s *Subscription) ThreadID() string { return s.thread.id }

// LastSeq is the sequence number of the last event read (0 before any).
func (s *Subscription) LastSeq() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastRead
}

// enqueue queues a live event. It runs under the thread's lock and never
// blocks; it reports false when the subscription had to be ended.
func (s *Subscription) enqueue(e *Event) bool {
	s.mu.Lock()
	if s.closed || e.Seq <= s.lastQueued {
		s.mu.Unlock()
		return !s.closed
	}
	if s.qbytes+e.Size() > s.maxBytes && s.qn > 0 {
		s.closed = true
		s.err = &SlowConsumerError{LastSeq: s.lastQueued, QueueSize: s.maxBytes}
		notify, fn := s.notify, s.notifyFn
		s.mu.Unlock()
		signal(notify, fn)
		return false
	}
	if s.qn == len(s.queue) {
		s.growQueue()
	}
	s.queue[(s.qhead+s.qn)%len(s.queue)] = e
	s.qn++
	s.qbytes += e.Size()
	s.lastQueued = e.Seq
	notify, fn := s.notify, s.notifyFn
	s.mu.Unlock()
	signal(notify, fn)
	return true
}

func signal(ch chan struct{}, fn func()) {
	if fn != nil {
		fn()
		return
	}
	wake(ch)
}

func (s *Subscription) growQueue() {
	size := 2 * len(s.queue)
	if size < 64 {
		size = 64
	}
	q := make([]*Event, size)
	for i := 0; i < s.qn; i++ {
		q[i] = s.queue[(s.qhead+i)%len(s.queue)]
	}
	s.queue, s.qhead = q, 0
}

// wake signals a notify channel without blocking: one pending signal is
// enough, since a woken reader drains everything.
func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (s *Subscription) wake() {
	s.mu.Lock()
	ch, fn := s.notify, s.notifyFn
	s.mu.Unlock()
	signal(ch, fn)
}

// SetNotifyFunc makes the subscription call fn, instead of signalling a
// channel, whenever events may be waiting or it ends: a transport can then
// start a writer only when there is something to write, rather than keep a
// goroutine per connection. fn runs on the publisher's goroutine and must
// not block. It is called once right away.
func (s *Subscription) SetNotifyFunc(fn func()) {
	s.mu.Lock()
	s.notifyFn = fn
	s.mu.Unlock()
	fn()
}

// SetNotify makes the subscription signal ch instead of its own channel,
// so that one reader can wait on several subscriptions; ch should have a
// buffer of one. The reader is signalled once right away.
func (s *Subscription) SetNotify(ch chan struct{}) {
	s.mu.Lock()
	s.notify = ch
	s.mu.Unlock()
	wake(ch)
}

// Peek returns the sequence number of the next event without reading it
// (0 for a notice); ok is false when nothing is queued.
func (s *Subscription) Peek() (seq uint64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pre) > 0 {
		return s.pre[0].Seq, true
	}
	if s.qn > 0 {
		return s.queue[s.qhead].Seq, true
	}
	return 0, false
}

// Next returns the next event, waiting for one. It returns ctx.Err() when
// ctx ends, and once the subscription is closed and drained, ErrClosed or
// the reason it was ended (such as a *SlowConsumerError).
func (s *Subscription) Next(ctx context.Context) (*Event, error) {
	for {
		if e, ok, err := s.TryNext(); ok || err != nil {
			return e, err
		}
		select {
		case <-s.Ready():
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// TryNext returns the next event without waiting: ok is false when none is
// queued (err then says whether the subscription has ended).
func (s *Subscription) TryNext() (e *Event, ok bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pre) > 0 {
		e = s.pre[0]
		s.pre[0] = nil
		s.pre = s.pre[1:]
		if e.Seq > s.lastRead {
			s.lastRead = e.Seq
		}
		return e, true, nil
	}
	if s.qn > 0 {
		e = s.queue[s.qhead]
		s.queue[s.qhead] = nil
		s.qhead = (s.qhead + 1) % len(s.queue)
		s.qn--
		s.qbytes -= e.Size()
		s.lastRead = e.Seq
		return e, true, nil
	}
	if s.closed {
		return nil, false, s.err
	}
	return nil, false, nil
}

// NextBatch appends every event that is ready to buf, waiting for at least
// one; transports use it to write many events with one write.
func (s *Subscription) NextBatch(ctx context.Context, buf []*Event, max int) ([]*Event, error) {
	for {
		n := len(buf)
		for len(buf)-n < max {
			e, ok, err := s.TryNext()
			if !ok {
				if len(buf) > n {
					return buf, nil
				}
				if err != nil {
					return buf, err
				}
				break
			}
			buf = append(buf, e)
		}
		if len(buf) > n {
			return buf, nil
		}
		select {
		case <-s.Ready():
		case <-ctx.Done():
			return buf, ctx.Err()
		}
	}
}

// Ready is signalled when events may be waiting (or the subscription
// ended): a reader that found nothing with TryNext waits on it.
func (s *Subscription) Ready() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.notify
}

// Close ends the subscription; events still queued can be read, then Next
// returns ErrClosed. Closing twice is harmless.
func (s *Subscription) Close() {
	s.thread.unsubscribe(s)
	s.end(ErrClosed)
}

// end marks the subscription over with err, unless it already is.
func (s *Subscription) end(err error) {
	s.mu.Lock()
	if !s.closed {
		s.closed, s.err = true, err
	}
	s.mu.Unlock()
	s.wake()
}

// Done reports whether the subscription has ended (its queue may still
// hold events).
func (s *Subscription) Done() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

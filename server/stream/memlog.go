package stream

import (
	"context"
	"sync"

	"github.com/agentstream/agentstream/internal/compact"
	"github.com/agentstream/agentstream/internal/ring"
)

// EventOverhead is what a buffered event costs in memory beyond its
// encoded JSON: a MemoryLog keeps only the JSON and the sequence number (a
// 32-byte slot) and rebuilds the Event when it replays it, so a buffered
// event holds no pointer the collector has to follow but its JSON's, and
// costs its JSON rounded up to the allocator's size class plus its slot
// (TestBufferedEventCost measures it). The total buffer budget counts each
// event as its JSON plus this.
const EventOverhead = 64

// MemoryLog is the in-memory EventLog: a ring buffer per thread, capped
// per thread by count and bytes, and all together by a total budget that
// drops the buffers of the threads that published least recently first.
// It keeps each event's JSON only; After rebuilds the events it replays
// with DecodeEvent, so their Payload is nil but for lifecycle events (see
// Event.Payload and WithPayload).
type MemoryLog struct {
	maxEvents, maxBytes int
	mu                  sync.Mutex
	threads             map[string]*logThread
	hw                  compact.Tracker
	// The total budget: used is the cost of everything held, the list runs
	// from the thread that appended last (hot) to the coldest.
	total, used int64
	hot, cold   *logThread
	trimmed     uint64 // events dropped to stay within the budget
	undecodable uint64 // buffered events DecodeEvent refused (a bug if ever more than 0)
}

// logThread is one thread's buffer and its place in the hot-to-cold list.
// Its ring changes with both the log's mu and its own held, and is read
// with either: After reads it with the thread's alone, a part at a time,
// so that a replay neither holds up other threads' appends nor sees its
// own thread's change under it.
type logThread struct {
	id             string
	mu             sync.Mutex
	buf            *ring.Buffer[stored]
	hotter, colder *logThread
}

// stored is an event as a MemoryLog keeps it.
type stored struct {
	seq  uint64
	json []byte
}

// Sequence implements ring.Item.
func (s stored) Sequence() uint64 { return s.seq }

// Size implements ring.Item.
func (s stored) Size() int { return len(s.json) }

// cost is what the thread's buffer counts against the total budget.
func (t *logThread) cost() int64 {
	return int64(t.buf.Bytes()) + int64(t.buf.Len())*EventOverhead
}

var _ EventLog = (*MemoryLog)(nil)

// NewMemoryLog returns a log keeping at most maxEvents events and
// maxBytes bytes (encoded JSON) per thread, with no total budget.
func NewMemoryLog(maxEvents, maxBytes int) *MemoryLog {
	return &MemoryLog{maxEvents: maxEvents, maxBytes: maxBytes, threads: map[string]*logThread{}}
}

// SetTotalBytes sets the budget of all the threads' buffers together
// (0: none), each event counting its JSON plus EventOverhead. When an
// append passes it, the buffers of the threads that appended least
// recently are dropped whole (a subscriber resuming from them gets the
// events.missed notice); when only the appending thread is left, its
// oldest events go.
//
// Lowered below what the buffers hold, it drops the coldest threads'
// buffers at once, all but the hottest thread's (whose oldest events go
// at its next append).
func (l *MemoryLog) SetTotalBytes(n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total = n
	l.dropColdest()
}

// dropColdest drops whole buffers, the coldest first, until all are within
// the total budget or only the hottest thread's is left, and reports
// whether they are over it still. The caller holds l.mu.
func (l *MemoryLog) dropColdest() bool {
	over := func() bool { return l.total > 0 && l.used > l.total }
	for over() && l.cold != l.hot {
		l.trimmed += uint64(l.cold.buf.Len())
		l.drop(l.cold)
	}
	return over()
}

// TotalBytes is the budget SetTotalBytes set.
func (l *MemoryLog) TotalBytes() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// Used is what the buffers count against the total budget now.
func (l *MemoryLog) Used() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.used
}

// Trimmed is how many events the total budget has dropped.
func (l *MemoryLog) Trimmed() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.trimmed
}

func (l *MemoryLog) buf(thread string) *logThread {
	t := l.threads[thread]
	if t == nil {
		t = &logThread{id: thread, buf: ring.New[stored](l.maxEvents, l.maxBytes)}
		l.threads[thread] = t
		l.hw.Grew(len(l.threads))
	}
	return t
}

// unlink takes t out of the hot-to-cold list.
func (l *MemoryLog) unlink(t *logThread) {
	if t.hotter != nil {
		t.hotter.colder = t.colder
	} else if l.hot == t {
		l.hot = t.colder
	}
	if t.colder != nil {
		t.colder.hotter = t.hotter
	} else if l.cold == t {
		l.cold = t.hotter
	}
	t.hotter, t.colder = nil, nil
}

// drop forgets a thread's buffer. Its ring is not touched: a reader that
// took it before goes on reading it.
func (l *MemoryLog) drop(t *logThread) {
	l.unlink(t)
	l.used -= t.cost()
	delete(l.threads, t.id)
	l.threads = compact.Shrink(l.threads, &l.hw)
}

// Append implements EventLog; it never fails.
func (l *MemoryLog) Append(_ context.Context, thread string, e *Event) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.buf(thread)
	before := t.cost()
	t.mu.Lock()
	t.buf.Push(stored{seq: e.Seq, json: e.json})
	t.mu.Unlock()
	l.used += t.cost() - before
	if l.hot != t { // to the hot end
		l.unlink(t)
		t.colder = l.hot
		if l.hot != nil {
			l.hot.hotter = t
		}
		l.hot = t
		if l.cold == nil {
			l.cold = t
		}
	}
	// Only the appending thread (the hottest) may be left over the budget:
	// its oldest events go, the newest stays.
	for l.dropColdest() && t.buf.Len() > 1 {
		before := t.cost()
		t.mu.Lock()
		t.buf.PopOldest()
		t.mu.Unlock()
		l.used -= before - t.cost()
		l.trimmed++
	}
	return nil
}

// After implements EventLog; it never fails.
func (l *MemoryLog) After(_ context.Context, thread string, seq uint64, fn func(*Event) bool) error {
	l.mu.Lock()
	t := l.threads[thread]
	l.mu.Unlock()
	if t == nil {
		return nil
	}
	// The ring is read a part at a time under its thread's lock (a
	// buffer dropped meanwhile is still read: nothing changes it once
	// dropped), and its events rebuilt and handed on without it. They are
	// made several at a time, one allocation for up to replaySlab,
	// starting small so that a short replay (a reconnect) makes few.
	var part [replaySlab]stored
	var slab []Event
	size := 2
	for {
		n := 0
		t.mu.Lock()
		t.buf.After(seq, func(s stored) bool {
			part[n] = s
			n++
			return n < len(part)
		})
		t.mu.Unlock()
		for _, s := range part[:n] {
			if len(slab) == 0 {
				size = min(2*size, replaySlab)
				slab = make([]Event, size)
			}
			e := &slab[0]
			if err := e.decode(s.json); err != nil {
				slab[0] = Event{}
				// It was encoded here (TestEncodeEventJSONMatchesTheGeneratedTypes
				// and FuzzDecodeRouting hold the two together): count it
				// rather than fail the replay.
				l.mu.Lock()
				l.undecodable++
				l.mu.Unlock()
				continue
			}
			slab = slab[1:]
			if !fn(e) {
				return nil
			}
		}
		if n < len(part) {
			return nil
		}
		seq = part[n-1].seq
		clear(part[:])
	}
}

// AfterHeld is After for a log that keeps the thread's older events in a
// store of its own (Redis, the disk): it stops, and reports trimmed, when
// the buffer no longer holds the event after the last one given, because
// appends let go of it since the caller looked at Oldest: the caller
// reads those from its store, and the buffer again after them. A hole
// the buffer had before its oldest moved past it is passed on.
func (l *MemoryLog) AfterHeld(ctx context.Context, thread string, seq uint64, fn func(*Event) bool) (trimmed bool, err error) {
	err = l.After(ctx, thread, seq, func(e *Event) bool {
		if e.Seq > seq+1 && l.oldest(thread) > seq+1 {
			trimmed = true
			return false
		}
		seq = e.Seq
		return fn(e)
	})
	return trimmed, err
}

// replaySlab is how many replayed events MemoryLog.After allocates at
// once: a slab stays in memory until the last of its events is
// delivered, so it is kept small.
const replaySlab = 32

// Undecodable is how many buffered events After could not rebuild and
// skipped; anything but 0 is a bug.
func (l *MemoryLog) Undecodable() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.undecodable
}

// Oldest implements EventLog; it never fails.
func (l *MemoryLog) Oldest(_ context.Context, thread string) (uint64, error) {
	return l.oldest(thread), nil
}

func (l *MemoryLog) oldest(thread string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t := l.threads[thread]; t != nil {
		return t.buf.Oldest()
	}
	return 0
}

// Len implements EventLog.
func (l *MemoryLog) Len(_ context.Context, thread string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t := l.threads[thread]; t != nil {
		return t.buf.Len()
	}
	return 0
}

// Release implements EventLog.
func (l *MemoryLog) Release(_ context.Context, thread string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t := l.threads[thread]; t != nil {
		l.drop(t)
	}
}

package server

import (
	"crypto/rand"
	"encoding/hex"
	"maps"
	"sync"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/internal/compact"
	"github.com/agentstream/agentstream/internal/ring"
)

// StateStore keeps what outlives a thread's event buffer: its current
// values, its checkpoints and its owner (with authentication on, the
// principal that first used it). Implementations are safe for concurrent
// use.
// The in-memory one is [NewMemoryState]; a Redis one lets several server
// processes share threads.
type StateStore interface {
	// Exists reports whether the thread has any state or checkpoint.
	Exists(thread string) bool
	// Values returns the thread's current values; ok is false when it has
	// none. The map must not be modified.
	Values(thread string) (values map[string]any, ok bool)
	// SetValues replaces the thread's values.
	SetValues(thread string, values map[string]any)
	// AddCheckpoint records a checkpoint.
	AddCheckpoint(thread string, cp CheckpointRecord)
	// Checkpoints lists the thread's checkpoints, newest first.
	Checkpoints(thread string) []CheckpointRecord
	// Checkpoint finds one checkpoint by id.
	Checkpoint(thread, id string) (CheckpointRecord, bool)
	// Owner returns the principal that owns the thread; ok is false when
	// nobody does yet.
	Owner(thread string) (owner string, ok bool)
	// ClaimOwner makes principal the thread's owner unless it has one,
	// atomically, and returns the owner it has then.
	ClaimOwner(thread, principal string) (owner string)
	// Delete forgets the thread's values, checkpoints and owner (the
	// server forgets threads idle for Config.ThreadTTL).
	Delete(thread string)
}

// CheckpointRecord is a saved checkpoint: its envelope and the values it
// captured.
type CheckpointRecord struct {
	ID        string
	ParentID  string
	Step      int64
	Source    string // input, loop, update or fork
	Namespace channels.Namespace
	Node      string
	Time      time.Time
	Values    map[string]any
	Metadata  map[string]any
}

// EventLog keeps each thread's recent events for replay, in sequence
// order, within its caps. The server calls it with the thread's lock held,
// so calls for one thread never overlap; a shared log (Redis streams) lets
// a node replay what another published. The in-memory one is
// [NewMemoryLog].
type EventLog interface {
	// Append adds an event (its Seq above every other of the thread's).
	Append(thread string, e *Event)
	// After calls fn for each event of the thread after seq, oldest first,
	// until fn returns false.
	After(thread string, seq uint64, fn func(*Event) bool)
	// Oldest is the sequence number of the oldest event kept, 0 for none.
	Oldest(thread string) uint64
	// Len is how many events the thread has kept.
	Len(thread string) int
	// Release drops the thread's events (the thread went idle).
	Release(thread string)
}

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
type logThread struct {
	id             string
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
// took it before (under the thread's lock) goes on reading it.
func (l *MemoryLog) drop(t *logThread) {
	l.unlink(t)
	l.used -= t.cost()
	delete(l.threads, t.id)
	l.threads = compact.Shrink(l.threads, &l.hw)
}

// Append implements EventLog.
func (l *MemoryLog) Append(thread string, e *Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.buf(thread)
	before := t.cost()
	t.buf.Push(stored{seq: e.Seq, json: e.json})
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
	// Only the appending thread (the hottest) may be left over the budget
	// (its caller holds its lock, so its ring may change): its oldest
	// events go, the newest stays.
	for l.dropColdest() && t.buf.Len() > 1 {
		before := t.cost()
		t.buf.PopOldest()
		l.used -= before - t.cost()
		l.trimmed++
	}
}

// After implements EventLog.
func (l *MemoryLog) After(thread string, seq uint64, fn func(*Event) bool) {
	l.mu.Lock()
	t := l.threads[thread]
	l.mu.Unlock()
	if t == nil {
		return
	}
	// The thread's lock keeps its ring from changing meanwhile. The events
	// are made several at a time, one allocation for up to replaySlab,
	// starting small so that a short replay (a reconnect) makes few.
	var slab []Event
	size := 2
	t.buf.After(seq, func(s stored) bool {
		if len(slab) == 0 {
			size = min(2*size, replaySlab)
			slab = make([]Event, size)
		}
		e := &slab[0]
		if err := e.decode(s.json); err != nil {
			slab[0] = Event{}
			// It was encoded here (TestEncodeEventJSONMatchesTheGeneratedTypes
			// and FuzzDecodeRouting hold the two together): count it rather
			// than fail the replay.
			l.mu.Lock()
			l.undecodable++
			l.mu.Unlock()
			return true
		}
		slab = slab[1:]
		return fn(e)
	})
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

// Oldest implements EventLog.
func (l *MemoryLog) Oldest(thread string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t := l.threads[thread]; t != nil {
		return t.buf.Oldest()
	}
	return 0
}

// Len implements EventLog.
func (l *MemoryLog) Len(thread string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t := l.threads[thread]; t != nil {
		return t.buf.Len()
	}
	return 0
}

// Release implements EventLog.
func (l *MemoryLog) Release(thread string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t := l.threads[thread]; t != nil {
		l.drop(t)
	}
}

// MemoryState is the in-memory StateStore.
type MemoryState struct {
	// MaxCheckpoints, when more than 0, caps the checkpoints kept per
	// thread: the oldest go first. Set it before use.
	MaxCheckpoints int

	mu      sync.Mutex
	threads map[string]*memThread
	hw      compact.Tracker
}

type memThread struct {
	owner       string
	values      map[string]any
	checkpoints []CheckpointRecord // oldest first
}

var _ StateStore = (*MemoryState)(nil)

// NewMemoryState returns an empty in-memory store.
func NewMemoryState() *MemoryState { return &MemoryState{threads: map[string]*memThread{}} }

func (m *MemoryState) get(thread string) *memThread {
	t := m.threads[thread]
	if t == nil {
		t = &memThread{}
		m.threads[thread] = t
		m.hw.Grew(len(m.threads))
	}
	return t
}

// Exists implements StateStore.
func (m *MemoryState) Exists(thread string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.threads[thread]
	return ok
}

// Values implements StateStore.
func (m *MemoryState) Values(thread string) (map[string]any, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.threads[thread]
	if t == nil || t.values == nil {
		return nil, false
	}
	return t.values, true
}

// SetValues implements StateStore.
func (m *MemoryState) SetValues(thread string, values map[string]any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.get(thread).values = maps.Clone(values)
}

// AddCheckpoint implements StateStore.
func (m *MemoryState) AddCheckpoint(thread string, cp CheckpointRecord) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.get(thread)
	t.checkpoints = append(t.checkpoints, cp)
	if n := m.MaxCheckpoints; n > 0 && len(t.checkpoints) > n {
		drop := len(t.checkpoints) - n
		clear(t.checkpoints[:drop]) // let their values go
		t.checkpoints = t.checkpoints[drop:]
	}
}

// Owner implements StateStore.
func (m *MemoryState) Owner(thread string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t := m.threads[thread]; t != nil && t.owner != "" {
		return t.owner, true
	}
	return "", false
}

// ClaimOwner implements StateStore.
func (m *MemoryState) ClaimOwner(thread, principal string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.get(thread)
	if t.owner == "" {
		t.owner = principal
	}
	return t.owner
}

// Delete implements StateStore.
func (m *MemoryState) Delete(thread string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.threads, thread)
	m.threads = compact.Shrink(m.threads, &m.hw)
}

// Checkpoints implements StateStore.
func (m *MemoryState) Checkpoints(thread string) []CheckpointRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.threads[thread]
	if t == nil {
		return nil
	}
	out := make([]CheckpointRecord, len(t.checkpoints))
	for i, cp := range t.checkpoints {
		out[len(out)-1-i] = cp
	}
	return out
}

// Checkpoint implements StateStore.
func (m *MemoryState) Checkpoint(thread, id string) (CheckpointRecord, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t := m.threads[thread]; t != nil {
		for _, cp := range t.checkpoints {
			if cp.ID == id {
				return cp, true
			}
		}
	}
	return CheckpointRecord{}, false
}

func randomID(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// DurableLog is an EventLog that outlives the process (a Redis stream):
// a thread the server creates again (after a restart, or on another node)
// continues its stream, with the same epoch and the next sequence number,
// so cursors handed out before stay valid.
type DurableLog interface {
	EventLog
	// Head returns the epoch and the last sequence number the log holds
	// for the thread ("" and 0 when it holds nothing), or why the store
	// could not say.
	Head(thread string) (epoch string, seq uint64, err error)
	// Cache keeps an event another node published (and wrote) for local
	// replays, without writing it again.
	Cache(thread string, e *Event)
	// Stored calls fn for the events the store itself holds after seq
	// (what other nodes wrote included), oldest first, until fn returns
	// false; an error says the store could not be read to the end.
	Stored(thread string, seq uint64, fn func(*Event) bool) error
}

// Watcher follows threads for a node of a cluster (see Config.Watcher).
// Watch and Unwatch must not block on the network for long: the server
// calls them with its lock held.
type Watcher interface {
	Watch(thread string)
	Unwatch(thread string)
}

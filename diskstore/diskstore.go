package diskstore

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/agentstream/agentstream/server"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Options configure a store.
type Options struct {
	// Dir holds the store (created when missing).
	Dir string
	// BufferEvents and BufferBytes cap the in-memory replay buffer of each
	// thread, the hot cache in front of the disk (DefaultBufferEvents and
	// the server's DefaultBufferBytes when zero): older replays read the
	// disk.
	BufferEvents, BufferBytes int
	// CommitEvery is the longest an event waits before its group commit
	// (DefaultCommitEvery).
	CommitEvery time.Duration
	// MaxPending caps the events appended and not yet on disk; past it an
	// append waits for the disk, up to QueueWait, then fails
	// (DefaultMaxPending).
	MaxPending int
	// QueueWait bounds that wait (DefaultQueueWait).
	QueueWait time.Duration
	// MinFree is the free space, in bytes, below which the store takes no
	// more events (DefaultMinFree): they are refused with ErrDiskFull and
	// Ready says why, before the disk is full (a store that fails a write
	// midway cannot be trusted), until space returns.
	MinFree uint64
	// FreeSpace reports the free space of Dir (statfs; tests replace it).
	FreeSpace func() (uint64, error)
	// MaxEvents keeps at most this many of each thread's events, the
	// oldest dropped first (DefaultMaxEvents; negative: no cap).
	MaxEvents int64
	// MaxAge drops events older than this (0: kept as long as their
	// thread).
	MaxAge time.Duration
	// Now is the clock of MaxAge (time.Now; tests replace it).
	Now func() time.Time
}

// Defaults of Options.
const (
	DefaultCommitEvery = 2 * time.Millisecond
	DefaultMaxPending  = 65536
	DefaultQueueWait   = 2 * time.Second
	DefaultMinFree     = 256 << 20
	// DefaultBufferEvents is the hot cache of a thread on disk: what a
	// reconnect usually asks for (a replay of the last moments); the rest
	// of its history is a disk read away.
	DefaultBufferEvents = 128
	// DefaultMaxEvents is each thread's history on disk: a million events.
	DefaultMaxEvents = 1_000_000
)

// ErrDiskFull refuses an event while the store's disk has less free
// space than Options.MinFree.
var ErrDiskFull = errors.New("diskstore: the disk is nearly full (--data-min-free); the event was not kept")

// ErrBehind refuses an append while the disk is that far behind.
var ErrBehind = errors.New("diskstore: the disk is behind (--data-dir); the event was not kept")

// Engine keeps threads in one Pebble store: a server.Engine.
type Engine struct {
	closeOnce sync.Once
	db        *pebble.DB
	opts      Options
	log       *Log
	state     *State
}

// Open opens (or creates) the store under opts.Dir.
func Open(opts Options) (*Engine, error) {
	if opts.Dir == "" {
		return nil, errors.New("diskstore: no directory")
	}
	if opts.BufferEvents <= 0 {
		opts.BufferEvents = DefaultBufferEvents
	}
	if opts.BufferBytes <= 0 {
		opts.BufferBytes = server.DefaultBufferBytes
	}
	if opts.CommitEvery <= 0 {
		opts.CommitEvery = DefaultCommitEvery
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = DefaultMaxPending
	}
	if opts.QueueWait <= 0 {
		opts.QueueWait = DefaultQueueWait
	}
	if opts.MinFree == 0 {
		opts.MinFree = DefaultMinFree
	}
	if opts.MaxEvents == 0 {
		opts.MaxEvents = DefaultMaxEvents
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.FreeSpace == nil {
		dir := opts.Dir
		opts.FreeSpace = func() (uint64, error) {
			var st syscall.Statfs_t
			if err := syscall.Statfs(dir, &st); err != nil {
				return 0, err
			}
			return st.Bavail * uint64(st.Bsize), nil
		}
	}
	if err := os.MkdirAll(opts.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("diskstore: %w", err)
	}
	// A store another process holds is refused before Pebble opens it
	// (its refusal leaves a goroutine of its own behind).
	if err := notHeld(opts.Dir); err != nil {
		return nil, err
	}
	// The plain file system: Pebble's default wraps it in a slow-disk
	// monitor whose goroutine can outlive Close.
	db, err := pebble.Open(opts.Dir, &pebble.Options{Logger: quiet{}, FS: vfs.Default})
	if err != nil {
		return nil, fmt.Errorf("diskstore: opening %s: %w", opts.Dir, err)
	}
	// A store not closed cleanly (a crash, kill -9, power lost) may have
	// lost the last events it was told of: every thread goes on in a new
	// epoch, so that no id names two events (a client that saw an id it
	// lost gets the reset notice).
	_, closer, err := db.Get(cleanKey)
	crashed := errors.Is(err, pebble.ErrNotFound)
	if err == nil {
		closer.Close()
	} else if !crashed {
		db.Close()
		return nil, fmt.Errorf("diskstore: reading %s: %w", opts.Dir, err)
	}
	if err := db.Delete(cleanKey, pebble.Sync); err != nil {
		db.Close()
		return nil, fmt.Errorf("diskstore: %s: %w", opts.Dir, err)
	}
	e := &Engine{db: db, opts: opts}
	e.log = newLog(db, opts)
	e.log.checkSpace()
	e.log.crashed = crashed
	e.log.renewed = map[string]bool{}
	e.state = &State{db: db}
	return e, nil
}

// cleanKey marks a store closed cleanly (Close writes it, Open removes it).
var cleanKey = []byte("m/clean")

// Ready reports why the store takes no events now (its disk nearly
// full, a write that failed), for /readyz; nil when it does.
func (e *Engine) Ready(context.Context) error {
	e.log.mu.Lock()
	defer e.log.mu.Unlock()
	return errors.Join(e.log.full, e.log.err)
}

// Crashed reports whether the store was not closed cleanly before this
// Open: its threads go on in new epochs.
func (e *Engine) Crashed() bool { return e.log.crashed }

// ErrInUse refuses a store another process has open.
var ErrInUse = errors.New("diskstore: the store is in use by another process")

// notHeld reports ErrInUse when another process holds dir's lock (the
// LOCK file Pebble flocks).
func notHeld(dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("diskstore: %w", err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fmt.Errorf("%w: %s", ErrInUse, dir)
	}
	return syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}

// quiet drops Pebble's informational log lines (its errors still reach
// the calls that fail).
type quiet struct{}

func (quiet) Infof(string, ...any)  {}
func (quiet) Errorf(string, ...any) {}
func (quiet) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("diskstore: pebble: "+format, args...))
}

// Stores implements server.Engine.
func (e *Engine) Stores() server.EngineStores {
	return server.EngineStores{Log: e.log, State: e.state}
}

// Start implements server.Engine: the store needs nothing of the server.
func (e *Engine) Start(server.EngineHost) error { return nil }

// Close writes what is pending, marks the store closed cleanly, and
// closes it.
func (e *Engine) Close() error {
	var err error
	e.closeOnce.Do(func() {
		e.log.close()
		err = e.log.Err()
		if err == nil {
			err = e.db.Set(cleanKey, nil, pebble.Sync)
		}
		err = errors.Join(err, e.db.Close())
	})
	return err
}

// Keys: "e/" THREAD 0x00 SEQ(8, big endian) -> the event's JSON;
// "h/" THREAD -> the thread's head (its last event's id);
// "s/" THREAD 0x00 "v" -> values (JSON), "o" -> owner,
// "c" SEQ(8) -> a checkpoint (JSON).
func eventKey(thread string, seq uint64) []byte {
	k := make([]byte, 0, 3+len(thread)+8)
	k = append(append(append(k, 'e', '/'), thread...), 0)
	return binary.BigEndian.AppendUint64(k, seq)
}

func headKey(thread string) []byte { return append([]byte("h/"), thread...) }

// Log is the event log: the in-memory buffer in front, the disk behind
// it (server.DurableLog).
type Log struct {
	db   *pebble.DB
	mem  *server.MemoryLog
	opts Options

	flushing sync.Mutex // one flush at a time
	mu       sync.Mutex
	pending  []*pendingEvent
	room     *sync.Cond // signalled when pending shrinks
	wake     chan struct{}
	err      error // the last write's failure (the disk full, read-only)
	stop     chan struct{}
	done     chan struct{}

	crashed   bool              // the store was not closed cleanly before
	renewed   map[string]bool   // threads given a new epoch since (guarded by mu)
	full      error             // why the store takes no events now (guarded by mu)
	checked   time.Time         // the free space's last check (the writer's)
	touched   map[string]uint64 // threads written since the last retention pass: their last seq (guarded by mu)
	unwritten map[string]int    // a thread's events appended and not yet committed (guarded by mu)
	floor     map[string]uint64 // the oldest seq the retention policy keeps of a thread (guarded by mu)
	aged      time.Time         // the last pass over every thread for MaxAge (the writer's)
}

type pendingEvent struct {
	thread string
	seq    uint64
	id     string
	json   []byte
}

func newLog(db *pebble.DB, opts Options) *Log {
	l := &Log{db: db, mem: server.NewMemoryLog(opts.BufferEvents, opts.BufferBytes), opts: opts, touched: map[string]uint64{}, floor: map[string]uint64{}, unwritten: map[string]int{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	l.room = sync.NewCond(&l.mu)
	go l.writer()
	return l
}

// writer commits what is pending, a group at a time, each synced: an
// event waits CommitEvery at most.
func (l *Log) writer() {
	defer close(l.done)
	tick := time.NewTicker(l.opts.CommitEvery)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			l.flush()
			return
		case <-tick.C:
			if time.Since(l.checked) >= time.Second {
				l.checked = time.Now()
				l.checkSpace()
				l.retain()
			}
		case <-l.wake:
		}
		l.flush()
	}
}

// flush writes the pending events in one synced batch; flushes run one at
// a time, so that one that returns has seen every event appended before
// it on disk.
func (l *Log) flush() {
	l.flushing.Lock()
	defer l.flushing.Unlock()
	l.mu.Lock()
	batch := l.pending
	l.pending = nil
	l.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	b := l.db.NewBatch()
	heads := map[string]string{}
	for _, p := range batch {
		_ = b.Set(eventKey(p.thread, p.seq), p.json, nil)
		heads[p.thread] = p.id
	}
	for t, id := range heads {
		_ = b.Set(headKey(t), []byte(id), nil)
	}
	err := b.Commit(pebble.Sync)
	_ = b.Close()
	l.mu.Lock()
	for _, p := range batch {
		if err == nil {
			l.touched[p.thread] = p.seq
		}
		if l.unwritten[p.thread]--; l.unwritten[p.thread] <= 0 {
			delete(l.unwritten, p.thread)
		}
	}
	l.err = err
	l.room.Broadcast()
	l.mu.Unlock()
}

// retain applies the retention policy: each thread written since the
// last pass keeps its last MaxEvents events; every minute, every thread
// drops its events older than MaxAge. A replay from before what is kept
// gets the missed-events notice.
func (l *Log) retain() {
	l.mu.Lock()
	touched := l.touched
	l.touched = map[string]uint64{}
	l.mu.Unlock()
	if l.opts.MaxEvents > 0 {
		for thread, last := range touched {
			if last > uint64(l.opts.MaxEvents) {
				l.drop(thread, last-uint64(l.opts.MaxEvents)+1)
			}
		}
	}
	if l.opts.MaxAge <= 0 {
		return
	}
	cutoff := uint64(l.opts.Now().Add(-l.opts.MaxAge).UnixMilli())
	for thread := range touched {
		l.dropOlder(thread, cutoff)
	}
	if !l.aged.IsZero() && time.Since(l.aged) < time.Minute {
		return
	}
	// Every minute, the threads nobody writes too.
	l.aged = time.Now()
	heads, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte("h/"), UpperBound: []byte("h0")})
	if err != nil {
		return
	}
	var threads []string
	for heads.First(); heads.Valid(); heads.Next() {
		threads = append(threads, string(heads.Key()[2:]))
	}
	_ = heads.Close()
	for _, thread := range threads {
		l.dropOlder(thread, cutoff)
	}
}

// dropOlder drops the thread's events older than cutoff (Unix ms): those
// before the first one young enough.
func (l *Log) dropOlder(thread string, cutoff uint64) {
	var keep uint64
	_ = l.disk(thread, 0, 0, func(e *server.Event) bool {
		if timestampOf(e.JSON()) >= cutoff {
			keep = e.Seq
			return false
		}
		keep = e.Seq + 1
		return true
	})
	if keep > 0 {
		l.drop(thread, keep)
	}
}

// drop forgets the thread's events below seq keep, on disk and for
// replays from the buffer.
func (l *Log) drop(thread string, keep uint64) {
	if err := l.db.DeleteRange(eventKey(thread, 0), eventKey(thread, keep), pebble.NoSync); err != nil {
		return
	}
	l.mu.Lock()
	if keep > l.floor[thread] {
		l.floor[thread] = keep
	}
	l.mu.Unlock()
}

// timestampOf reads an event's params.timestamp (Unix ms).
func timestampOf(b []byte) uint64 {
	var ev struct {
		Params struct {
			Timestamp uint64 `json:"timestamp"`
		} `json:"params"`
	}
	_ = json.Unmarshal(b, &ev)
	return ev.Params.Timestamp
}

// checkSpace reads the free space: below MinFree the store takes no
// more events, above it again it does.
func (l *Log) checkSpace() {
	free, err := l.opts.FreeSpace()
	var full error
	switch {
	case err != nil:
		full = fmt.Errorf("%w: %v", ErrDiskFull, err)
	case free < l.opts.MinFree:
		full = fmt.Errorf("%w: %d bytes free under %s", ErrDiskFull, free, l.opts.Dir)
	}
	l.mu.Lock()
	l.full = full
	l.mu.Unlock()
}

func (l *Log) close() {
	close(l.stop)
	<-l.done
}

// Err is the last write's failure, nil once a write succeeds again.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Append implements server.EventLog: the event is in the buffer at once
// and on disk within CommitEvery.
func (l *Log) Append(ctx context.Context, thread string, e *server.Event) error {
	l.mu.Lock()
	if l.full != nil {
		err := l.full
		l.mu.Unlock()
		return err
	}
	if len(l.pending) >= l.opts.MaxPending {
		deadline := time.Now().Add(l.opts.QueueWait)
		timer := time.AfterFunc(l.opts.QueueWait, func() { l.mu.Lock(); l.room.Broadcast(); l.mu.Unlock() })
		for len(l.pending) >= l.opts.MaxPending && time.Now().Before(deadline) {
			l.room.Wait()
		}
		timer.Stop()
		if len(l.pending) >= l.opts.MaxPending {
			err := l.err
			l.mu.Unlock()
			if err != nil {
				return fmt.Errorf("%w: %v", ErrBehind, err)
			}
			return ErrBehind
		}
	}
	l.pending = append(l.pending, &pendingEvent{thread: thread, seq: e.Seq, id: e.EventID(), json: e.JSON()})
	l.unwritten[thread]++
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return l.mem.Append(ctx, thread, e)
}

// After implements server.EventLog: the events after seq, from the disk
// up to what the buffer holds, then from the buffer.
func (l *Log) After(ctx context.Context, thread string, seq uint64, fn func(*server.Event) bool) error {
	l.mu.Lock()
	if floor := l.floor[thread]; seq+1 < floor {
		seq = floor - 1 // dropped by the retention policy, from the buffer too
	}
	l.mu.Unlock()
	oldest, _ := l.mem.Oldest(ctx, thread)
	if oldest == 0 || seq+1 < oldest {
		// Older than the buffer: read the disk (what is pending is in the
		// buffer, which ends the disk's part).
		l.flushWait(thread)
		upTo := oldest // exclusive; 0: read everything on disk
		more := true
		err := l.disk(thread, seq, upTo, func(e *server.Event) bool {
			more = fn(e)
			seq = e.Seq
			return more
		})
		if err != nil || !more {
			return err
		}
	}
	return l.mem.After(ctx, thread, seq, fn)
}

// flushWait returns once every event of thread appended so far is on
// disk (a replay from the disk then sees everything the buffer no longer
// holds): when some are not, it waits for a commit under way and writes
// what is pending. A thread with nothing unwritten costs no commit (a new
// thread's Head, most replays).
func (l *Log) flushWait(thread string) {
	l.mu.Lock()
	n := l.unwritten[thread]
	l.mu.Unlock()
	if n > 0 {
		l.flush()
	}
}

// disk reads the thread's events after seq and below upTo (0: all).
func (l *Log) disk(thread string, seq, upTo uint64, fn func(*server.Event) bool) error {
	hi := eventKey(thread, ^uint64(0))
	if upTo > 0 {
		hi = eventKey(thread, upTo)
	}
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: eventKey(thread, seq+1), UpperBound: hi})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		e, err := server.DecodeEvent(append([]byte(nil), it.Value()...))
		if err != nil {
			return fmt.Errorf("diskstore: thread %s: %w", thread, err)
		}
		if !fn(e) {
			return nil
		}
	}
	return it.Error()
}

// Oldest implements server.EventLog: the oldest event on disk (or in the
// buffer, before its first commit).
func (l *Log) Oldest(ctx context.Context, thread string) (uint64, error) {
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: eventKey(thread, 0), UpperBound: eventKey(thread, ^uint64(0))})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	if it.First() {
		k := it.Key()
		return binary.BigEndian.Uint64(k[len(k)-8:]), nil
	}
	o, err := l.mem.Oldest(ctx, thread)
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(o, l.floor[thread]), err
}

// Len implements server.EventLog: what the buffer holds.
func (l *Log) Len(thread string) int { return l.mem.Len(thread) }

// Release implements server.EventLog: the buffer lets the thread go; the
// disk keeps it.
func (l *Log) Release(thread string) { l.mem.Release(thread) }

// Head implements server.DurableLog: the thread's last event's epoch and
// seq.
func (l *Log) Head(ctx context.Context, thread string) (string, uint64, error) {
	l.flushWait(thread)
	v, closer, err := l.db.Get(headKey(thread))
	if errors.Is(err, pebble.ErrNotFound) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, err
	}
	defer closer.Close()
	c, err := server.ParseCursor(string(v))
	if err != nil {
		return "", 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.crashed && !l.renewed[thread] {
		// The first time after a crash: a new epoch, kept, from which the
		// thread's stream goes on.
		l.renewed[thread] = true
		c.Epoch = server.NewEpoch()
		if err := l.db.Set(headKey(thread), []byte(c.String()), pebble.Sync); err != nil {
			return "", 0, err
		}
	}
	return c.Epoch, c.Seq, nil
}

// Cache implements server.DurableLog (for a cluster's other nodes: this
// store has one node).
func (l *Log) Cache(thread string, e *server.Event) {
	_ = l.mem.Append(context.Background(), thread, e)
}

// Stored implements server.DurableLog: what the disk holds after seq.
func (l *Log) Stored(ctx context.Context, thread string, seq uint64, fn func(*server.Event) bool) error {
	l.flushWait(thread)
	return l.disk(thread, seq, 0, fn)
}

// State keeps values, checkpoints and owners (server.StateStore). Values
// and checkpoints are written without waiting for the disk (the next group
// commit of events syncs them, as the events around them); an owner's
// claim is synced.
type State struct {
	db *pebble.DB
	mu sync.Mutex // ClaimOwner's read and write as one
}

func stateKey(thread, what string) []byte {
	return append(append(append([]byte("s/"), thread...), 0), what...)
}

func (s *State) get(key []byte) ([]byte, bool, error) {
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer closer.Close()
	return append([]byte(nil), v...), true, nil
}

// Exists implements server.StateStore.
func (s *State) Exists(_ context.Context, thread string) (bool, error) {
	prefix := stateKey(thread, "")
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: append(append([]byte(nil), prefix...), 0xff)})
	if err != nil {
		return false, err
	}
	defer it.Close()
	if it.First() {
		return true, nil
	}
	_, ok, err := s.get(headKey(thread))
	return ok, err
}

// Values implements server.StateStore.
func (s *State) Values(_ context.Context, thread string) (map[string]any, bool, error) {
	b, ok, err := s.get(stateKey(thread, "v"))
	if err != nil || !ok {
		return nil, false, err
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, false, err
	}
	return v, true, nil
}

// SetValues implements server.StateStore.
func (s *State) SetValues(_ context.Context, thread string, values map[string]any) error {
	b, err := json.Marshal(values)
	if err != nil {
		return err
	}
	return s.db.Set(stateKey(thread, "v"), b, pebble.NoSync) // synced with the next group commit
}

// AddCheckpoint implements server.StateStore.
func (s *State) AddCheckpoint(_ context.Context, thread string, cp server.CheckpointRecord) error {
	b, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := uint64(0)
	if list, err := s.checkpoints(thread); err == nil && len(list) > 0 {
		n = list[0].n + 1
	}
	return s.db.Set(binary.BigEndian.AppendUint64(stateKey(thread, "c"), n), b, pebble.NoSync)
}

type numbered struct {
	n  uint64
	cp server.CheckpointRecord
}

// checkpoints lists the thread's checkpoints, newest first.
func (s *State) checkpoints(thread string) ([]numbered, error) {
	prefix := stateKey(thread, "c")
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: append(append([]byte(nil), prefix...), 0xff)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []numbered
	for it.Last(); it.Valid(); it.Prev() {
		k := it.Key()
		var cp server.CheckpointRecord
		if err := json.Unmarshal(it.Value(), &cp); err != nil {
			return nil, err
		}
		out = append(out, numbered{binary.BigEndian.Uint64(k[len(k)-8:]), cp})
	}
	return out, it.Error()
}

// Checkpoints implements server.StateStore.
func (s *State) Checkpoints(_ context.Context, thread string) ([]server.CheckpointRecord, error) {
	list, err := s.checkpoints(thread)
	out := make([]server.CheckpointRecord, len(list))
	for i, n := range list {
		out[i] = n.cp
	}
	return out, err
}

// Checkpoint implements server.StateStore.
func (s *State) Checkpoint(_ context.Context, thread, id string) (server.CheckpointRecord, bool, error) {
	list, err := s.checkpoints(thread)
	for _, n := range list {
		if n.cp.ID == id {
			return n.cp, true, nil
		}
	}
	return server.CheckpointRecord{}, false, err
}

// Owner implements server.StateStore.
func (s *State) Owner(_ context.Context, thread string) (string, bool, error) {
	b, ok, err := s.get(stateKey(thread, "o"))
	return string(b), ok, err
}

// ClaimOwner implements server.StateStore.
func (s *State) ClaimOwner(_ context.Context, thread, principal string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok, err := s.get(stateKey(thread, "o"))
	if err != nil {
		return "", err
	}
	if ok {
		return string(b), nil
	}
	return principal, s.db.Set(stateKey(thread, "o"), []byte(principal), pebble.Sync)
}

// Delete implements server.StateStore: the thread's state, and its
// events, go.
func (s *State) Delete(_ context.Context, thread string) error {
	b := s.db.NewBatch()
	defer b.Close()
	for _, prefix := range [][]byte{stateKey(thread, ""), append(append([]byte("e/"), thread...), 0)} {
		if err := b.DeleteRange(prefix, append(append([]byte(nil), prefix...), 0xff), nil); err != nil {
			return err
		}
	}
	_ = b.Delete(headKey(thread), nil)
	return b.Commit(pebble.Sync)
}

// Stats is what a store holds.
type Stats struct {
	Threads, Events uint64
	Bytes           uint64 // on disk
}

// Stats counts the store's threads and events and its bytes on disk.
func (e *Engine) Stats() (Stats, error) {
	var st Stats
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte("e/"), UpperBound: []byte("e0")})
	if err != nil {
		return st, err
	}
	for it.First(); it.Valid(); it.Next() {
		st.Events++
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return st, err
	}
	hi, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte("h/"), UpperBound: []byte("h0")})
	if err != nil {
		return st, err
	}
	for hi.First(); hi.Valid(); hi.Next() {
		st.Threads++
	}
	if err := errors.Join(hi.Error(), hi.Close()); err != nil {
		return st, err
	}
	st.Bytes = e.db.Metrics().DiskSpaceUsage()
	return st, nil
}

// Compact rewrites the whole store, dropping what deletes left behind.
func (e *Engine) Compact(ctx context.Context) error {
	return e.db.Compact(ctx, []byte{0}, []byte{0xff}, true)
}

// Export writes the thread's events as NDJSON, each without its seq and
// event_id: a producer's batch (POST /threads/{id}/events) that another
// server imports as it would any producer's events.
func (e *Engine) Export(thread string, w io.Writer) (n int, err error) {
	err = e.log.disk(thread, 0, 0, func(ev *server.Event) bool {
		var m map[string]any
		if err = json.Unmarshal(ev.JSON(), &m); err != nil {
			return false
		}
		delete(m, "seq")
		delete(m, "event_id")
		var b []byte
		if b, err = json.Marshal(m); err != nil {
			return false
		}
		if _, err = w.Write(append(b, '\n')); err != nil {
			return false
		}
		n++
		return true
	})
	return n, err
}

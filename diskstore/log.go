package diskstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/diskstore/internal/commitlog"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/stream"
	"github.com/cockroachdb/pebble/v2"
)

// Log is the event log: the in-memory buffer in front, the disk behind
// it (server.DurableLog). An event is in the buffer at once, in the
// commit log within CommitEvery (synced), and in its thread's chunks
// once FoldEvents of them (or FoldBytes, or FoldAge) are committed; until
// then the log keeps it in memory as its thread's tail, so that a replay
// never waits for the disk.
type Log struct {
	db    *pebble.DB
	wal   *commitlog.Log // the group commits, the writer's (or l.flushing's)
	mem   *server.MemoryLog
	opts  Options
	codec *codec

	flushing sync.Mutex // one flush (or retention pass, or delete) at a time
	mu       sync.Mutex
	pending  []pendingEvent // appended, not yet committed, in order
	inflight int            // events the writer is committing (out of pending meanwhile)
	tails    map[string]*tail
	due      map[string]bool // threads whose tails are to be folded at the next commit
	room     *sync.Cond      // signalled when pending shrinks
	wake     chan struct{}
	err      error // the last write's failure (the disk full, read-only)
	full     error // why the store takes no events now
	// treeFull is why the tree takes no writes now (its disk has less
	// than MinTreeFree), read afresh at most every treeCheckEvery.
	treeFull    error
	treeChecked time.Time
	stop        chan struct{}
	done        chan struct{}

	// gen counts the batches the writer took (flush); synced is the last
	// of them on disk, and every event appended before it was taken with
	// it (a failed batch's events go into the next). syncedCh is closed
	// when synced moves (WaitSynced), and replaced.
	gen, synced uint64
	syncedCh    chan struct{}

	// runs are the threads whose root run opened (true) or ended (false)
	// since the last commit: their runKey marks, written with it.
	runs map[string]bool
	// marks are the producers' last batches (by markKey) that events
	// appended since the last commit changed, written with it; writing
	// are those the writer is committing (producers.go).
	marks, writing map[string]*server.LastBatch
	producers      map[string]int // a thread's producers in the tree, counted at most (pruneProducers)

	repaired string // what Options.Repair passed (Engine.Repaired)

	closing bool              // foldAll: every due thread folds at once
	crashed bool              // the store was not closed cleanly before
	renewed map[string]bool   // threads given a new epoch since
	touched []*tail           // tails committed to since the last retention pass
	round   uint64            // the retention passes so far
	free    [][]record        // emptied tails' slices, for new tails
	floor   map[string]uint64 // the oldest seq the retention policy keeps of a thread (loaded lazily)
	bytes   map[string]int64  // a thread's chunks' bytes
	total   int64             // all the chunks' bytes

	// unsynced: the tree has writes made without a sync (values,
	// checkpoints) that the next commit syncs.
	unsynced atomic.Bool

	// fast: the process has no CPU to spare (Options.Busy, asked once a
	// second): chunks are S2, not zstd.
	fast atomic.Bool
	// fastFrom and fastEnd bound the part of the index (the chunks in the
	// order they were written) that may hold S2 chunks not rewritten as
	// zstd yet (fastFrom nil: none). A store opens with the whole index
	// (a store closed or killed while busy left some); each busy commit
	// extends it (l.flushing held).
	fastFrom, fastEnd []byte

	// Counters (Stats).
	written, commits, failures, refusedFull, refusedBehind, chunksWritten, fastChunks, dropped, prunedProducers atomic.Uint64

	// The writer's own.
	commit  uint64 // the last group commit's number
	checked time.Time
	aged    time.Time
	buf     []byte
	enc     []byte         // a compressed value, before the batch copies it
	spare   []pendingEvent // the pending slice of the last commit, for the next
}

// pendingEvent is an event appended and not yet committed.
type pendingEvent struct {
	thread string
	seq    uint64
	json   []byte
	tail   *tail  // the thread's: a tail with events not yet committed stays in tails
	by     []byte // the producer's batch it is of (server.ProducedBy), or nil
}

// record is what the log keeps of an event not yet in a chunk: its seq,
// id and JSON (which the buffer shares), not the decoded event.
type record struct {
	seq    uint64
	id     string
	json   []byte
	commit uint64 // the group commit that holds it; 0 until then
}

// tail is a thread's events not yet in a chunk, in seq order (the
// committed ones first).
type tail struct {
	thread    string
	events    []record
	committed int       // how many of events are committed
	bytes     int       // their JSON's size
	since     time.Time // when the oldest was appended
	last      uint64    // the last committed seq
	round     uint64    // the retention pass it was last listed in touched for
}

func newLog(db *pebble.DB, wal *commitlog.Log, opts Options, crashed bool) (*Log, error) {
	c, err := newCodec()
	if err != nil {
		return nil, err
	}
	l := &Log{db: db, wal: wal, mem: server.NewMemoryLog(opts.BufferEvents, opts.BufferBytes), opts: opts, codec: c,
		tails: map[string]*tail{}, due: map[string]bool{}, renewed: map[string]bool{}, runs: map[string]bool{},
		marks: map[string]*server.LastBatch{}, producers: map[string]int{},
		floor: map[string]uint64{}, bytes: map[string]int64{}, crashed: crashed,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), syncedCh: make(chan struct{})}
	l.room = sync.NewCond(&l.mu)
	l.fastFrom, l.fastEnd = wholeIndex() // walked once, when there is CPU to spare
	if err := l.recover(); err != nil {
		c.close()
		return nil, err
	}
	if err := l.countBytes(); err != nil {
		c.close()
		return nil, err
	}
	l.checkSpace()
	go l.writer()
	return l, nil
}

// recover folds what the commit log still holds (a store not closed
// cleanly) into its threads' chunks: the events after each thread's last
// chunk, but for those of a thread deleted since. A store an earlier
// version left has its commits in the tree ("w/"), read first.
func (l *Log) recover() error {
	folded := map[string]uint64{}
	foldedSeq := func(thread string) (uint64, error) {
		if s, ok := folded[thread]; ok {
			return s, nil
		}
		id, ok, err := l.get(headKey(thread))
		if err != nil || !ok {
			folded[thread] = 0
			return 0, err
		}
		c, err := server.ParseCursor(string(id))
		if err != nil {
			return 0, err
		}
		folded[thread] = c.Seq
		return c.Seq, nil
	}
	deleted := map[string]uint64{}
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte("x/"), UpperBound: []byte("x0")})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		deleted[string(it.Key()[2:])] = binary.BigEndian.Uint64(it.Value())
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return err
	}
	threads := map[string][]record{}
	runs := map[string]bool{} // the root runs the commits open or end
	// The producers' batches the commits hold: each mark follows its
	// event, and counts only when that event was folded here.
	marks := map[string]*server.LastBatch{}
	var prev *record
	commit := func(n uint64, value []byte) error {
		raw, err := l.codec.decodeValue(value)
		if err != nil {
			return fmt.Errorf("diskstore: commit %d: %w", n, err)
		}
		err = readCommit(raw, func(thread string, seq uint64, json []byte) error {
			if seq == 0 { // the batch of the event before
				if prev == nil {
					return nil
				}
				by, err := stream.DecodeProducedBy(json)
				if err != nil {
					return err
				}
				k := markKey(thread, by.Producer)
				lb := marks[k]
				if lb == nil {
					lb = &server.LastBatch{}
					if old, ok, err := l.lastBatch(thread, by.Producer); err == nil && ok && by.Index > 0 {
						*lb = *old
					}
					marks[k] = lb
				}
				lb.Add(by, prev.seq, prev.id, l.opts.Now())
				prev = nil
				return nil
			}
			prev = nil
			if d, ok := deleted[thread]; ok && n <= d {
				return nil
			}
			last, err := foldedSeq(thread)
			if err != nil || seq <= last {
				return err
			}
			e, err := server.DecodeEvent(json)
			if err != nil {
				return err
			}
			if open, ok := rootRun(e); ok {
				runs[thread] = open
			}
			folded[thread] = seq
			threads[thread] = append(threads[thread], record{seq: seq, id: e.EventID(), json: json})
			prev = &threads[thread][len(threads[thread])-1]
			return nil
		})
		if err != nil {
			return fmt.Errorf("diskstore: commit %d: %w", n, err)
		}
		return nil
	}
	it, err = l.db.NewIter(&pebble.IterOptions{LowerBound: []byte("w/"), UpperBound: []byte("w0")})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		if err := commit(binary.BigEndian.Uint64(it.Key()[2:]), it.Value()); err != nil {
			_ = it.Close()
			return err
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return err
	}
	if err := l.wal.Replay(commit, l.opts.Repair); err != nil {
		var damage *commitlog.DamageError
		if !errors.As(err, &damage) {
			return err
		}
		if !l.opts.Repair {
			return fmt.Errorf("%w: %v", ErrDamaged, err)
		}
		l.repaired = damage.Error()
	}
	b := l.db.NewBatch()
	defer b.Close()
	now := uint64(l.opts.Now().UnixMilli())
	for thread, evs := range threads {
		for len(evs) > 0 {
			n := min(len(evs), l.opts.FoldEvents)
			l.writeChunk(b, thread, evs[:n], now, false)
			evs = evs[n:]
		}
	}
	markRuns(b, runs)
	l.writeMarks(b, marks)
	_ = b.DeleteRange([]byte("w/"), []byte("w0"), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	// The commits are in chunks, durably: the log goes, then the marks
	// of deleted threads, which a crash between the two still needs.
	if err := l.wal.Clear(); err != nil {
		return err
	}
	return l.db.DeleteRange([]byte("x/"), []byte("x0"), pebble.Sync)
}

// addBytes counts d more bytes of the thread's chunks (fewer when
// negative), in the thread's figure and the store's. l.mu held.
func (l *Log) addBytes(thread string, d int64) {
	l.bytes[thread] += d
	l.total += d
}

// countBytes reads the chunks' sizes from their index.
func (l *Log) countBytes() error {
	from, to := wholeIndex()
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: from, UpperBound: to})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		thread, _, ok := parseIndexKey(it.Key())
		size, n := binary.Uvarint(it.Value())
		if !ok || n <= 0 {
			continue
		}
		l.addBytes(thread, int64(size))
	}
	return errors.Join(it.Error(), it.Close())
}

// writeChunk puts a chunk of the thread's events (consecutive, in order)
// into b, with its index entry and the thread's folded head: S2 when
// fast (the process busy), else zstd.
func (l *Log) writeChunk(b *pebble.Batch, thread string, evs []record, now uint64, fast bool) int {
	first, last := evs[0], evs[len(evs)-1]
	h := chunkHead{Written: now, Count: uint64(len(evs)), Last: last.seq,
		Oldest: timestampOf(first.json), Newest: timestampOf(last.json)}
	raw := l.buf[:0]
	for _, e := range evs {
		raw = binary.AppendUvarint(raw, uint64(len(e.json)))
		raw = append(raw, e.json...)
	}
	l.buf = raw
	v := l.codec.encode(h.append(l.enc[:0]), raw, fast) // the batch copies it
	l.enc = v
	_ = b.Set(chunkKey(thread, first.seq), v, nil)
	_ = b.Set(indexKey(now, thread, first.seq), binary.AppendUvarint(nil, uint64(len(v))), nil)
	_ = b.Set(headKey(thread), []byte(last.id), nil)
	return len(v)
}

// writer commits what is pending, a group at a time, each synced: an
// event waits CommitEvery at most (less when MaxPending/4 wait).
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
				l.fast.Store(l.opts.Busy())
				l.checkSpace()
				l.retain()
				if !l.fast.Load() {
					l.recompressSome()
				}
			}
		case <-l.wake:
		}
		l.flush()
	}
}

// foldsPerCommit is the least number of threads folded with one group
// commit when more are due; a commit folds a quarter of those due when
// that is more. Threads at the same rate come due together, and a
// saturated server commits less often (80 times a second at 5,000
// threads on one core, not every CommitEvery): a fixed cap let the due
// threads' tails outgrow their slices by seconds of events, held in
// memory beyond the buffer. The writer yields between two chunks, so a
// large fold does not hold deliveries on one core.
const foldsPerCommit = 16

// fold is a thread's committed events to write as a chunk.
type fold struct {
	thread string
	tail   *tail
	events []record
}

// flush writes the pending events as one group commit, with the chunks
// of the threads due, in one synced batch. A batch that fails is tried
// again at the next commit (Append refuses once MaxPending wait).
func (l *Log) flush() {
	l.flushing.Lock()
	defer l.flushing.Unlock()
	l.mu.Lock()
	batch := l.pending
	l.pending = l.spare[:0] // the slices swap: no growth per commit
	l.spare = nil
	l.inflight = len(batch)
	l.gen++
	gen := l.gen
	var folds []fold
	limit := max(foldsPerCommit, len(l.due)/4)
	for thread := range l.due {
		if l.full != nil {
			break // the tree takes no writes while the disk is nearly full
		}
		if len(folds) == limit && !l.closing {
			break // the rest at the next commits: threads that came due together do not stall one
		}
		delete(l.due, thread)
		if t := l.tails[thread]; t != nil && t.committed > 0 {
			folds = append(folds, fold{thread, t, t.events[:t.committed:t.committed]})
		}
	}
	var runs map[string]bool // taken whole: Append fills a new one meanwhile
	if len(l.runs) > 0 {
		runs, l.runs = l.runs, map[string]bool{}
	}
	var marks map[string]*server.LastBatch // the same
	if len(l.marks) > 0 {
		marks, l.marks = l.marks, map[string]*server.LastBatch{}
		l.writing = marks
	}
	floors := make([]uint64, len(folds))
	for i, f := range folds {
		floors[i] = l.floor[f.thread] // loaded: a tail's thread had its floor read by Append
	}
	writable := l.writable() == nil
	treeErr := l.treeSpace()
	l.mu.Unlock()
	// Values and checkpoints written to the tree without a sync since the
	// last commit are synced with this one.
	unsynced := l.unsynced.Swap(false)
	if len(batch) == 0 && len(folds) == 0 && len(runs) == 0 && len(marks) == 0 && (!unsynced || !writable) {
		if unsynced {
			l.unsynced.Store(true)
		}
		l.mu.Lock()
		l.markSynced(gen) // nothing was waiting: what came before is on disk
		l.mu.Unlock()
		return
	}
	n := l.commit
	var werr, ferr error
	if len(batch) > 0 {
		n++
		raw := l.buf[:0]
		for _, p := range batch {
			raw = commitRecord(raw, p.thread, p.seq, p.json)
			if p.by != nil {
				raw = commitRecord(raw, p.thread, 0, p.by)
			}
		}
		l.buf = raw
		l.enc = l.codec.encodeCommit(l.enc[:0], raw)
		werr = l.wal.Append(n, l.enc)
	}
	sizes := make([]int, len(folds))
	chunks, fast, now := 0, l.fast.Load(), uint64(l.opts.Now().UnixMilli())
	var markThreads map[string]int
	if werr == nil && treeErr != nil && (len(folds) > 0 || len(runs) > 0 || len(marks) > 0 || unsynced) {
		// No room for the tree's write: the batch's events are in the
		// commit log; the rest waits for space (kept for the next commit).
		ferr = treeErr
	} else if werr == nil && (len(folds) > 0 || len(runs) > 0 || len(marks) > 0) {
		// The folds' events are in the commit log already, which keeps
		// them until the tree is synced (retain): no sync here. The
		// marks of open runs go with them: a crash that loses the batch
		// finds their events in the commit log (recover).
		b := l.db.NewBatch()
		markRuns(b, runs)
		markThreads = l.writeMarks(b, marks)
		for i, f := range folds {
			evs := f.events
			for len(evs) > 0 && evs[0].seq < floors[i] { // dropped by the retention policy already
				evs = evs[1:]
			}
			if len(evs) > 0 {
				for len(evs) > 0 {
					n := min(len(evs), l.opts.FoldEvents)
					sizes[i] += l.writeChunk(b, f.thread, evs[:n], now, fast)
					chunks++
					evs = evs[n:]
					runtime.Gosched() // deliveries run between two chunks
				}
			} else {
				_ = b.Set(headKey(f.thread), []byte(f.events[len(f.events)-1].id), nil)
			}
		}
		ferr = b.Commit(pebble.NoSync)
		_ = b.Close()
	}
	if unsynced {
		if werr == nil && ferr == nil && treeErr == nil {
			ferr = l.db.LogData(nil, pebble.Sync)
		}
		if werr != nil || ferr != nil {
			l.unsynced.Store(true)
		}
	}
	var prune map[string]int // the threads whose producers may pass the cap
	l.mu.Lock()
	defer func() {
		l.mu.Unlock()
		if prune != nil {
			l.pruneProducers(prune)
		}
	}()
	l.inflight = 0
	l.err = errors.Join(werr, ferr)
	if l.err != nil {
		l.failures.Add(1)
		for _, f := range folds {
			l.due[f.thread] = true // tried again at the next commit
		}
	}
	l.writing = nil
	if werr != nil || ferr != nil {
		for thread, open := range runs {
			if _, newer := l.runs[thread]; !newer {
				l.runs[thread] = open // written with the next commit
			}
		}
		for k, lb := range marks {
			if _, newer := l.marks[k]; !newer {
				l.marks[k] = lb
			}
		}
	} else if len(markThreads) > 0 {
		prune = markThreads
	}
	if werr != nil {
		l.pending = append(batch, l.pending...)
		l.spare = nil
		return
	}
	l.commit = n
	l.markSynced(gen)
	if len(batch) > 0 {
		l.commits.Add(1)
	}
	l.written.Add(uint64(len(batch)))
	for _, p := range batch {
		t := p.tail
		if t.round != l.round+1 {
			t.round = l.round + 1
			l.touched = append(l.touched, t)
		}
		t.last = p.seq
		if t.committed < len(t.events) {
			t.events[t.committed].commit = n
			t.committed++
			if t.committed >= l.opts.FoldEvents || t.bytes >= l.opts.FoldBytes {
				l.due[p.thread] = true
			}
		}
	}
	clear(batch)
	l.spare = batch[:0]
	l.room.Broadcast()
	if ferr != nil {
		return
	}
	if fast && chunks > 0 {
		l.fastChunks.Add(uint64(chunks)) // before the chunks: never more fast chunks than chunks
		if l.fastFrom == nil {
			l.fastFrom = indexFrom(now)
		}
		if end := indexFrom(now + 1); bytes.Compare(end, l.fastEnd) > 0 {
			l.fastEnd = end
		}
	}
	l.chunksWritten.Add(uint64(chunks)) // counted once on disk, with their bytes
	for i, f := range folds {
		l.addBytes(f.thread, int64(sizes[i]))
		if l.tails[f.thread] != f.tail {
			continue // deleted meanwhile
		}
		t := f.tail
		k := len(f.events)
		for _, p := range t.events[:k] {
			t.bytes -= len(p.json)
		}
		if rest := len(t.events) - k; cap(t.events) == l.opts.FoldEvents+8 {
			// The rest moves to the front (nothing outside l.mu holds
			// the slice: the fold's own view is written).
			copy(t.events, t.events[k:])
			clear(t.events[rest:])
			t.events = t.events[:rest]
		} else {
			t.events = append(l.newEvents(), t.events[k:]...)
		}
		t.committed -= k
		if len(t.events) == 0 {
			delete(l.tails, f.thread)
			if cap(t.events) == l.opts.FoldEvents+8 && len(l.free) < maxFree {
				l.free = append(l.free, t.events)
			}
			t.events = nil
		} else {
			t.since = time.Now()
		}
	}
}

// foldAll writes every thread's tail as chunks and empties the commit
// log (on Close, once the writer is stopped and everything committed):
// the tree is synced first, since folds do not sync it.
func (l *Log) foldAll() error {
	l.mu.Lock()
	for thread, t := range l.tails {
		if t.committed > 0 {
			l.due[thread] = true
		}
	}
	l.closing = true
	l.mu.Unlock()
	l.flush()
	if err := l.Err(); err != nil {
		return err
	}
	if err := l.db.LogData(nil, pebble.Sync); err != nil {
		return err
	}
	return l.wal.Clear()
}

func (l *Log) close() {
	close(l.stop)
	<-l.done
}

// release lets go of the codec and closes the commit log's file (what
// it holds stays: a crash leaves it for the next Open).
func (l *Log) release() {
	l.codec.close()
	_ = l.wal.Close()
}

// writable reports why the store writes nothing to the tree now (l.mu
// held): the disk nearly full, or the last group commit failed (retried
// until it succeeds); nil when it writes.
func (l *Log) writable() error {
	switch {
	case l.full != nil:
		return fmt.Errorf("%w: %w", ErrNotWritable, l.full)
	case l.err != nil:
		return fmt.Errorf("%w: %w", ErrNotWritable, l.err)
	}
	return nil
}

// checkWritable is writable, locking, and the tree's own space: a write
// to the tree is refused before the disk has too little room for
// Pebble's log, tables and MANIFEST (MinTreeFree), whatever MinFree says
// (Pebble stops the process when one of those writes fails).
func (l *Log) checkWritable() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	if err := l.treeSpace(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotWritable, err)
	}
	return nil
}

// treeCheckEvery is how often the tree's space is read afresh (statfs)
// while writes come.
const treeCheckEvery = 2 * time.Millisecond

// treeSpace is nil when the tree's disk has MinTreeFree bytes free, or
// ErrDiskFull saying how few it has (l.mu held).
func (l *Log) treeSpace() error {
	if now := time.Now(); now.Sub(l.treeChecked) >= treeCheckEvery {
		l.treeChecked = now
		free, err := l.opts.FreeSpace()
		switch {
		case err != nil:
			l.treeFull = fmt.Errorf("%w: %v", ErrDiskFull, err)
		case free < MinTreeFree:
			l.treeFull = fmt.Errorf("%w: %d bytes free under %s, under the %d the tree keeps for its own writes", ErrDiskFull, free, l.opts.Dir, MinTreeFree)
		default:
			l.treeFull = nil
		}
	}
	return l.treeFull
}

// Err is the last write's failure, nil once a write succeeds again.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *Log) get(key []byte) ([]byte, bool, error) {
	v, closer, err := l.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer closer.Close()
	return append([]byte(nil), v...), true, nil
}

// floorOf returns the oldest seq kept of thread, read from the disk the
// first time (l.mu held).
func (l *Log) floorOf(thread string) uint64 {
	f, ok := l.floor[thread]
	if !ok {
		if v, found, err := l.get(floorKey(thread)); err == nil && found && len(v) == 8 {
			f = binary.BigEndian.Uint64(v)
		}
		l.floor[thread] = f
	}
	return f
}

// maxFree caps the emptied tails' slices kept for new ones.
const maxFree = 1024

// newEvents is an empty slice for a tail's events, an emptied tail's when
// there is one (l.mu held).
func (l *Log) newEvents() []record {
	if k := len(l.free); k > 0 {
		ev := l.free[k-1]
		l.free = l.free[:k-1]
		return ev
	}
	return make([]record, 0, l.opts.FoldEvents+8)
}

var _ server.SyncedLog = (*Log)(nil)

// rootRun says whether e opens or keeps open (started, running,
// interrupted: true) or ends (completed, failed: false) its thread's root
// run; ok is false for any other event.
func rootRun(e *server.Event) (open, ok bool) {
	if e.Seq == 0 || e.Channel != channels.Lifecycle || len(e.Namespace) != 0 {
		return false, false
	}
	if _, ok := e.Payload.(*protocol.ServerEventLifecycle); !ok {
		return false, false
	}
	return !e.EndsRun(), true
}

// markRuns writes into b the marks of the threads whose root run runs
// says is open, and removes those of the runs it says ended.
func markRuns(b *pebble.Batch, runs map[string]bool) {
	for thread, open := range runs {
		if open {
			_ = b.Set(runKey(thread), nil, nil)
		} else {
			_ = b.Delete(runKey(thread), nil)
		}
	}
}

// markSynced records that batch gen is on disk and wakes WaitSynced's
// callers (l.mu held).
func (l *Log) markSynced(gen uint64) {
	if gen <= l.synced {
		return
	}
	l.synced = gen
	close(l.syncedCh)
	l.syncedCh = make(chan struct{})
}

// WaitSynced implements server.SyncedLog: it returns once every event
// appended before the call is in a synced group commit (what a crash
// cannot lose; within CommitEvery while the writer keeps up), or with
// ctx's error, or ErrClosed when the store closes first. A commit that
// fails is tried again with the next, so a disk that refuses writes
// keeps its callers waiting until ctx ends them.
func (l *Log) WaitSynced(ctx context.Context) error {
	l.mu.Lock()
	if len(l.pending) == 0 && l.inflight == 0 {
		l.mu.Unlock()
		return nil // every event appended is in a commit the writer synced
	}
	target := l.gen + 1 // the batch the pending events go in
	for l.synced < target {
		ch := l.syncedCh
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-l.done:
			return ErrClosed
		}
		l.mu.Lock()
	}
	l.mu.Unlock()
	return nil
}

// waiting is how many events are appended and not yet committed: pending
// and those the writer is committing (l.mu held).
func (l *Log) waiting() int { return len(l.pending) + l.inflight }

// Append implements server.EventLog: the event is in the buffer at once
// and on disk within CommitEvery. It never waits: the server waits for
// room first (WaitRoom); past twice MaxPending (a caller that did not
// wait) it refuses at once (ErrBehind).
func (l *Log) Append(ctx context.Context, thread string, e *server.Event) error {
	return l.append(ctx, thread, e, nil)
}

// WaitRoom implements server.RoomWaiter: it returns once fewer than
// MaxPending events wait for the disk, or ErrBehind (with the disk's
// error, when it fails its commits) after QueueWait, or the log's refusal
// when the disk is full, or ctx's error.
func (l *Log) WaitRoom(ctx context.Context, thread string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.full != nil || l.waiting() < l.opts.MaxPending {
		return nil // a full disk's Append says why
	}
	deadline := time.Now().Add(l.opts.QueueWait)
	wake := func() { l.mu.Lock(); l.room.Broadcast(); l.mu.Unlock() }
	timer := time.AfterFunc(l.opts.QueueWait, wake)
	defer timer.Stop()
	stop := context.AfterFunc(ctx, wake)
	defer stop()
	for l.waiting() >= l.opts.MaxPending && time.Now().Before(deadline) && ctx.Err() == nil {
		l.room.Wait()
	}
	if l.waiting() < l.opts.MaxPending {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	l.refusedBehind.Add(1)
	if l.err != nil {
		return fmt.Errorf("%w: %v", ErrBehind, l.err)
	}
	return ErrBehind
}

// append appends e, of a producer's batch when by is set.
func (l *Log) append(ctx context.Context, thread string, e *server.Event, by *server.ProducedBy) error {
	l.mu.Lock()
	if l.full != nil {
		err := l.full
		l.mu.Unlock()
		l.refusedFull.Add(1)
		return err
	}
	if l.waiting() >= 2*l.opts.MaxPending {
		err := l.err
		l.mu.Unlock()
		l.refusedBehind.Add(1)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrBehind, err)
		}
		return ErrBehind
	}
	t := l.tails[thread]
	if t == nil {
		t = &tail{thread: thread, since: time.Now(), events: l.newEvents()}
		l.tails[thread] = t
		l.floorOf(thread)
	}
	p := pendingEvent{thread: thread, seq: e.Seq, json: e.JSON(), tail: t}
	if by != nil {
		p.by = by.AppendBinary(nil)
		l.markProduced(thread, e, *by)
	}
	l.pending = append(l.pending, p)
	t.events = append(t.events, record{seq: e.Seq, id: e.EventID(), json: e.JSON()})
	if l.crashed {
		l.renewed[thread] = true // its stream goes on after the crash already
	}
	t.bytes += len(e.JSON())
	if open, ok := rootRun(e); ok {
		l.runs[thread] = open
	}
	wake := len(l.pending) == l.opts.MaxPending/4
	l.mu.Unlock()
	if wake {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	return l.mem.Append(ctx, thread, e)
}

// After implements server.EventLog: the events after seq from the
// thread's chunks, then its tail, then the buffer.
func (l *Log) After(ctx context.Context, thread string, seq uint64, fn func(*server.Event) bool) error {
	l.mu.Lock()
	if floor := l.floorOf(thread); seq+1 < floor {
		seq = floor - 1 // dropped by the retention policy, from the buffer too
	}
	l.mu.Unlock()
	each := func(e *server.Event) bool {
		seq = e.Seq
		return fn(e)
	}
	// The server reads without the thread's lock, so the buffer may let go
	// of its oldest events (appends trim it) between the look at its
	// oldest and the read: the disk has them, and is read again for them
	// (a few times at most: a hole the disk has too is the caller's to
	// announce).
	for round := 0; ; round++ {
		if oldest, _ := l.mem.Oldest(ctx, thread); oldest == 0 || seq+1 < oldest {
			more, _, err := l.stored(thread, seq, each)
			if err != nil || !more {
				return err
			}
		}
		if round == 3 {
			return l.mem.After(ctx, thread, seq, each)
		}
		if trimmed, err := l.mem.AfterHeld(ctx, thread, seq, each); err != nil || !trimmed {
			return err
		}
	}
}

// stored calls fn with the thread's events after seq from its chunks
// and its tail; it returns whether fn wanted more and the last seq it
// was given.
func (l *Log) stored(thread string, seq uint64, fn func(*server.Event) bool) (bool, uint64, error) {
	l.mu.Lock()
	var tl []record
	if t := l.tails[thread]; t != nil {
		tl = append(tl, t.events...)
	}
	l.mu.Unlock()
	var upTo uint64 // exclusive; 0: every chunk
	if len(tl) > 0 {
		upTo = tl[0].seq
	}
	more := true
	if upTo == 0 || seq+1 < upTo {
		err := l.chunks(thread, seq, upTo, func(e *server.Event) bool {
			more = fn(e)
			seq = e.Seq
			return more
		})
		if err != nil || !more {
			return more, seq, err
		}
	}
	for _, p := range tl {
		if p.seq <= seq {
			continue
		}
		e, err := server.DecodeEvent(p.json)
		if err != nil {
			return false, seq, fmt.Errorf("diskstore: thread %s: %w", thread, err)
		}
		seq = p.seq
		if !fn(e) {
			return false, seq, nil
		}
	}
	return true, seq, nil
}

// chunks reads the thread's chunked events after seq and below upTo (0:
// all).
func (l *Log) chunks(thread string, seq, upTo uint64, fn func(*server.Event) bool) error {
	prefix := chunkPrefix(thread)
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper(prefix)})
	if err != nil {
		return err
	}
	defer it.Close()
	// The chunk holding seq+1 starts at or before it.
	if !it.SeekLT(chunkKey(thread, seq+2)) {
		it.First()
	}
	for ; it.Valid(); it.Next() {
		if upTo > 0 && chunkFirst(it.Key()) >= upTo {
			break
		}
		h, body, err := readChunkHead(it.Value())
		if err != nil {
			return err
		}
		if h.Last <= seq {
			continue
		}
		raw, err := l.codec.decodeValue(body)
		if err != nil {
			return fmt.Errorf("diskstore: thread %s: %w", thread, err)
		}
		more, err := readChunk(raw, func(e *server.Event) (bool, error) {
			if e.Seq <= seq {
				return true, nil
			}
			if upTo > 0 && e.Seq >= upTo {
				return false, nil
			}
			return fn(e), nil
		})
		if err != nil || !more {
			return err
		}
	}
	return it.Error()
}

// Oldest implements server.EventLog: the oldest event kept.
func (l *Log) Oldest(ctx context.Context, thread string) (uint64, error) {
	prefix := chunkPrefix(thread)
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper(prefix)})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	var o uint64
	l.mu.Lock()
	floor := l.floorOf(thread)
	if t := l.tails[thread]; t != nil && len(t.events) > 0 {
		o = t.events[0].seq
	}
	l.mu.Unlock()
	if it.First() {
		o = chunkFirst(it.Key())
	} else if o == 0 {
		if o, err = l.mem.Oldest(ctx, thread); err != nil {
			return 0, err
		}
	}
	if o == 0 {
		return 0, nil
	}
	return max(o, floor), nil
}

// Memory is the hot cache in front of the disk: the server counts it as
// its replay buffers (their budget, the memory governor).
func (l *Log) Memory() *server.MemoryLog { return l.mem }

// Len implements server.EventLog: what the buffer holds.
func (l *Log) Len(ctx context.Context, thread string) int { return l.mem.Len(ctx, thread) }

// Release implements server.EventLog: the buffer lets the thread go; the
// disk keeps it.
func (l *Log) Release(ctx context.Context, thread string) { l.mem.Release(ctx, thread) }

// Head implements server.DurableLog: the thread's last event's epoch and
// seq (or the new epoch it goes on in after a crash).
func (l *Log) Head(ctx context.Context, thread string) (string, uint64, error) {
	var id string
	l.mu.Lock()
	if t := l.tails[thread]; t != nil && len(t.events) > 0 {
		id = t.events[len(t.events)-1].id
	}
	l.mu.Unlock()
	if id == "" {
		v, ok, err := l.get(headKey(thread))
		if err != nil || !ok {
			return "", 0, err
		}
		id = string(v)
	}
	c, err := server.ParseCursor(id)
	if err != nil {
		return "", 0, err
	}
	if v, ok, err := l.get(renewKey(thread)); err != nil {
		return "", 0, err
	} else if ok {
		if r, err := server.ParseCursor(string(v)); err == nil && r.Seq >= c.Seq {
			c = r
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.crashed && !l.renewed[thread] {
		// The first time after a crash: a new epoch, kept, from which the
		// thread's stream goes on.
		if err := l.writable(); err != nil {
			return "", 0, err
		}
		l.renewed[thread] = true
		c.Epoch = server.NewEpoch()
		if err := l.db.Set(renewKey(thread), []byte(c.String()), pebble.Sync); err != nil {
			return "", 0, err
		}
	}
	return c.Epoch, c.Seq, nil
}

// Cache implements server.DurableLog (for a cluster's other nodes: this
// store has one node).
func (l *Log) Cache(ctx context.Context, thread string, e *server.Event) {
	_ = l.mem.Append(ctx, thread, e)
}

// Stored implements server.DurableLog: what the store holds after seq.
func (l *Log) Stored(ctx context.Context, thread string, seq uint64, fn func(*server.Event) bool) error {
	l.mu.Lock()
	if floor := l.floorOf(thread); seq+1 < floor {
		seq = floor - 1
	}
	l.mu.Unlock()
	_, _, err := l.stored(thread, seq, fn)
	return err
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

package diskstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/records"
	"github.com/cockroachdb/pebble/v2"
)

// State keeps values, checkpoints and owners (server.StateStore). Values
// and checkpoints are written without waiting for the disk (the next group
// commit of events syncs them, as the events around them); an owner's
// claim is synced.
type State struct {
	db  *pebble.DB
	log *Log
	mu  sync.Mutex // ClaimOwner's read and write as one

	itemsMu sync.Mutex
	items   int // the store's items, counted on first use (-1 before)

	idxMu sync.Mutex
	index *server.RecordIndex // the records' metadata, built on first use

	// wrote counts the writes made without a sync (values, checkpoints,
	// run records); synced is what wrote was when the last SyncState
	// that succeeded began: SyncState has nothing to do when they match.
	wrote, synced atomic.Uint64
}

var (
	_ server.IndexedCatalog = (*State)(nil)
	_ server.SyncedState    = (*State)(nil)
)

// RecordsMatching implements server.IndexedCatalog: the index is built
// from the records on first use, then kept as they are written.
func (s *State) RecordsMatching(ctx context.Context, metadata map[string]any, fn func(server.ThreadRecord) bool) (bool, error) {
	s.idxMu.Lock()
	if s.index == nil {
		x := server.NewRecordIndex()
		if err := s.Records(ctx, func(r server.ThreadRecord) bool { x.Set(r); return true }); err != nil {
			s.idxMu.Unlock()
			return false, err
		}
		s.index = x
	}
	ids, ok := s.index.Candidates(metadata)
	s.idxMu.Unlock()
	if !ok {
		return false, nil
	}
	for _, id := range ids {
		r, found, err := s.Record(ctx, id)
		if err != nil {
			return true, err
		}
		if found && !fn(r) {
			break
		}
	}
	return true, nil
}

func stateKey(thread, what string) []byte {
	return append(append(append([]byte("s/"), thread...), 0), what...)
}

func (s *State) get(key []byte) ([]byte, bool, error) { return s.log.get(key) }

// Exists implements server.StateStore.
func (s *State) Exists(_ context.Context, thread string) (bool, error) {
	prefix := stateKey(thread, "")
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper(prefix)})
	if err != nil {
		return false, err
	}
	defer it.Close()
	if it.First() {
		return true, nil
	}
	s.log.mu.Lock()
	t := s.log.tails[thread]
	s.log.mu.Unlock()
	if t != nil {
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
	if err := s.log.checkWritable(); err != nil {
		return err
	}
	if err := s.db.Set(stateKey(thread, "v"), b, pebble.NoSync); err != nil {
		return err
	}
	s.wrote.Add(1)
	s.log.unsynced.Store(true) // synced with the next group commit
	return nil
}

// AddCheckpoint implements server.StateStore. A checkpoint is kept as its
// record and references to its values: each top-level value (each item,
// for a list, such as the messages) is kept once per thread under the hash
// of its JSON, so that a checkpoint costs the disk what changed since the
// ones before it, not every value again (a thread's copy, once each).
func (s *State) AddCheckpoint(_ context.Context, thread string, cp server.CheckpointRecord) error {
	if err := s.log.checkWritable(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.db.NewBatch()
	defer b.Close()
	stored := storedCheckpoint{CheckpointRecord: cp, Refs: map[string]valueRef{}}
	stored.Values = nil
	put := func(v any) (string, error) {
		raw, err := json.Marshal(v)
		if err != nil {
			return "", err
		}
		sum := sha256.Sum256(raw)
		h := hex.EncodeToString(sum[:16])
		key := stateKey(thread, "b"+h)
		if _, ok, err := s.get(key); err != nil {
			return "", err
		} else if !ok {
			if err := b.Set(key, raw, nil); err != nil {
				return "", err
			}
		}
		return h, nil
	}
	for k, v := range cp.Values {
		var ref valueRef
		if list, ok := v.([]any); ok {
			ref.List, ref.Items = true, make([]string, len(list))
			for i, item := range list {
				h, err := put(item)
				if err != nil {
					return err
				}
				ref.Items[i] = h
			}
		} else {
			h, err := put(v)
			if err != nil {
				return err
			}
			ref.Hash = h
		}
		stored.Refs[k] = ref
	}
	rec, err := json.Marshal(stored)
	if err != nil {
		return err
	}
	n, err := s.nextCheckpoint(thread)
	if err != nil {
		return err
	}
	if err := b.Set(binary.BigEndian.AppendUint64(stateKey(thread, "c"), n), rec, nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return err
	}
	s.wrote.Add(1)
	s.log.unsynced.Store(true) // synced with the next group commit
	return nil
}

// storedCheckpoint is a checkpoint as the disk keeps it: its record, its
// values by reference (Refs; a checkpoint written before values were
// shared has them inline, in Values).
type storedCheckpoint struct {
	server.CheckpointRecord
	Refs map[string]valueRef `json:"R,omitempty"`
}

// valueRef names a checkpoint's value: the hash of its JSON, or for a
// list the hash of each item's.
type valueRef struct {
	Hash  string   `json:"h,omitempty"`
	List  bool     `json:"l,omitempty"`
	Items []string `json:"i,omitempty"`
}

// nextCheckpoint is the number of the thread's next checkpoint (s.mu held).
func (s *State) nextCheckpoint(thread string) (uint64, error) {
	prefix := stateKey(thread, "c")
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper(prefix)})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	if !it.Last() {
		return 0, it.Error()
	}
	k := it.Key()
	return binary.BigEndian.Uint64(k[len(k)-8:]) + 1, nil
}

type numbered struct {
	n  uint64
	cp storedCheckpoint
}

// checkpoints lists the thread's checkpoints, newest first, their values
// not read yet (resolve).
func (s *State) checkpoints(thread string) ([]numbered, error) {
	prefix := stateKey(thread, "c")
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper(prefix)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []numbered
	for it.Last(); it.Valid(); it.Prev() {
		k := it.Key()
		var cp storedCheckpoint
		if err := json.Unmarshal(it.Value(), &cp); err != nil {
			return nil, fmt.Errorf("diskstore: thread %s's checkpoint %d: %w", thread, binary.BigEndian.Uint64(k[len(k)-8:]), err)
		}
		out = append(out, numbered{binary.BigEndian.Uint64(k[len(k)-8:]), cp})
	}
	return out, it.Error()
}

// resolve reads a stored checkpoint's values; blobs (by hash, read once
// per call's cache) are decoded anew for each checkpoint, so no two
// records share a value.
func (s *State) resolve(thread string, cp storedCheckpoint, blobs map[string][]byte) (server.CheckpointRecord, error) {
	out := cp.CheckpointRecord
	if cp.Refs == nil {
		return out, nil
	}
	value := func(h string) (any, error) {
		raw, ok := blobs[h]
		if !ok {
			var found bool
			var err error
			if raw, found, err = s.get(stateKey(thread, "b"+h)); err != nil {
				return nil, err
			} else if !found {
				return nil, fmt.Errorf("diskstore: thread %s's checkpoint %s: value %s is missing", thread, cp.ID, h)
			}
			blobs[h] = raw
		}
		var v any
		return v, json.Unmarshal(raw, &v)
	}
	out.Values = make(map[string]any, len(cp.Refs))
	for k, ref := range cp.Refs {
		if !ref.List {
			v, err := value(ref.Hash)
			if err != nil {
				return out, err
			}
			out.Values[k] = v
			continue
		}
		list := make([]any, len(ref.Items))
		for i, h := range ref.Items {
			v, err := value(h)
			if err != nil {
				return out, err
			}
			list[i] = v
		}
		out.Values[k] = list
	}
	return out, nil
}

// Checkpoints implements server.StateStore.
func (s *State) Checkpoints(_ context.Context, thread string) ([]server.CheckpointRecord, error) {
	list, err := s.checkpoints(thread)
	if err != nil {
		return nil, err
	}
	out := make([]server.CheckpointRecord, len(list))
	blobs := map[string][]byte{}
	for i, n := range list {
		if out[i], err = s.resolve(thread, n.cp, blobs); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// NewestCheckpoint implements records.NewestCheckpointer: the last
// record, its values not read.
func (s *State) NewestCheckpoint(_ context.Context, thread string) (server.CheckpointRecord, bool, error) {
	prefix := stateKey(thread, "c")
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper(prefix)})
	if err != nil {
		return server.CheckpointRecord{}, false, err
	}
	defer it.Close()
	if !it.Last() {
		return server.CheckpointRecord{}, false, it.Error()
	}
	var cp storedCheckpoint
	if err := json.Unmarshal(it.Value(), &cp); err != nil {
		k := it.Key()
		return server.CheckpointRecord{}, false, fmt.Errorf("diskstore: thread %s's checkpoint %d: %w", thread, binary.BigEndian.Uint64(k[len(k)-8:]), err)
	}
	cp.Values = nil
	return cp.CheckpointRecord, true, nil
}

// PatchNewestCheckpoint implements records.CheckpointPatcher: the newest
// checkpoint's record written again with metadata merged (its values'
// references unchanged), synced with the next group commit.
func (s *State) PatchNewestCheckpoint(_ context.Context, thread string, metadata map[string]any) (server.CheckpointRecord, bool, error) {
	if err := s.log.checkWritable(); err != nil {
		return server.CheckpointRecord{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	prefix := stateKey(thread, "c")
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper(prefix)})
	if err != nil {
		return server.CheckpointRecord{}, false, err
	}
	if !it.Last() {
		err := it.Error()
		_ = it.Close()
		return server.CheckpointRecord{}, false, err
	}
	key := append([]byte(nil), it.Key()...)
	var cp storedCheckpoint
	err = json.Unmarshal(it.Value(), &cp)
	_ = it.Close()
	if err != nil {
		return server.CheckpointRecord{}, false, fmt.Errorf("diskstore: thread %s's newest checkpoint: %w", thread, err)
	}
	cp.Metadata = records.MergedMetadata(cp.Metadata, metadata)
	b, err := json.Marshal(cp)
	if err != nil {
		return server.CheckpointRecord{}, false, err
	}
	if err := s.db.Set(key, b, pebble.NoSync); err != nil {
		return server.CheckpointRecord{}, false, err
	}
	s.wrote.Add(1)
	s.log.unsynced.Store(true) // synced with the next group commit
	cp.Values = nil
	return cp.CheckpointRecord, true, nil
}

// Checkpoint implements server.StateStore.
func (s *State) Checkpoint(_ context.Context, thread, id string) (server.CheckpointRecord, bool, error) {
	list, err := s.checkpoints(thread)
	for _, n := range list {
		if n.cp.ID == id {
			cp, err := s.resolve(thread, n.cp, map[string][]byte{})
			return cp, err == nil, err
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
	if err := s.log.checkWritable(); err != nil {
		return "", err
	}
	return principal, s.db.Set(stateKey(thread, "o"), []byte(principal), pebble.Sync)
}

// Delete implements server.StateStore: the thread's state and its events
// go, the commit log's copies included (a marker tells a recovery to skip
// those).
func (s *State) Delete(_ context.Context, thread string) error {
	l := s.log
	l.flushing.Lock()
	defer l.flushing.Unlock()
	l.mu.Lock()
	if err := l.writable(); err != nil {
		l.mu.Unlock()
		return err
	}
	l.pending = slices.DeleteFunc(l.pending, func(p pendingEvent) bool { return p.thread == thread })
	delete(l.tails, thread)
	delete(l.due, thread)
	delete(l.runs, thread)
	for k := range l.marks {
		if th, _, _ := cutMarkKey(k); th == thread {
			delete(l.marks, k)
		}
	}
	delete(l.producers, thread)
	l.touched = slices.DeleteFunc(l.touched, func(t *tail) bool { return t.thread == thread })
	delete(l.floor, thread)
	freed := l.bytes[thread]
	delete(l.bytes, thread)
	l.total -= freed
	last := l.commit
	l.mu.Unlock()

	b := s.db.NewBatch()
	defer b.Close()
	prefix := chunkPrefix(thread)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper(prefix)})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		if h, _, err := readChunkHead(it.Value()); err == nil {
			_ = b.Delete(indexKey(h.Written, thread, chunkFirst(it.Key())), nil)
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return err
	}
	// Its runs' entries of "o/" (RunThread).
	rp := runPrefix(thread)
	if it, err = s.db.NewIter(&pebble.IterOptions{LowerBound: rp, UpperBound: upper(rp)}); err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		_ = b.Delete(runThreadKey(string(it.Key()[len(rp):])), nil)
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return err
	}
	for _, prefix := range [][]byte{stateKey(thread, ""), prefix, producerPrefix(thread), runPrefix(thread), openRunKey(thread, "")} {
		if err := b.DeleteRange(prefix, upper(prefix), nil); err != nil {
			return err
		}
	}
	for _, k := range [][]byte{headKey(thread), renewKey(thread), floorKey(thread), runKey(thread), recordKey(thread)} {
		_ = b.Delete(k, nil)
	}
	_ = b.Set(deletedKey(thread), binary.BigEndian.AppendUint64(nil, last), nil)
	s.idxMu.Lock()
	defer s.idxMu.Unlock()
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	if s.index != nil {
		s.index.Delete(thread)
	}
	return nil
}

// ErrNoSuchThread refuses a thread the store does not hold (Export,
// ThreadStats).
var ErrNoSuchThread = errors.New("diskstore: no such thread")

// known returns ErrNoSuchThread, naming thread, unless the store holds
// events or state of it.
func (e *Engine) known(thread string) error {
	ctx := context.Background()
	_, seq, err := e.log.Head(ctx, thread)
	if err != nil || seq > 0 {
		return err
	}
	ok, err := e.state.Exists(ctx, thread)
	if err != nil || ok {
		return err
	}
	return fmt.Errorf("%w: %q", ErrNoSuchThread, thread)
}

// ThreadStats is what a store holds of one thread.
type ThreadStats struct {
	Events      uint64 // kept (the retention policy drops the oldest)
	First, Last uint64 // the seqs of the oldest and newest kept (0: none)
}

// ThreadStats counts a thread's events on disk; ErrNoSuchThread for one
// the store does not hold.
func (e *Engine) ThreadStats(thread string) (ThreadStats, error) {
	var st ThreadStats
	if err := e.known(thread); err != nil {
		return st, err
	}
	err := e.log.Stored(context.Background(), thread, 0, func(ev *server.Event) bool {
		if st.First == 0 {
			st.First = ev.Seq
		}
		st.Last = ev.Seq
		st.Events++
		return true
	})
	return st, err
}

// Stats is what a store holds.
type Stats struct {
	Threads, Events uint64
	Bytes           uint64 // on disk
}

// Stats counts the store's threads and events and its bytes on disk.
func (e *Engine) Stats() (Stats, error) {
	var st Stats
	threads := map[string]bool{}
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte("c/"), UpperBound: []byte("c0")})
	if err != nil {
		return st, err
	}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		thread := string(k[2 : len(k)-9])
		floor := e.log.floorFor(thread)
		h, body, err := readChunkHead(it.Value())
		if err != nil {
			_ = it.Close()
			return st, err
		}
		threads[thread] = true
		if first := chunkFirst(k); first >= floor {
			st.Events += h.Count
			continue
		}
		raw, err := e.log.codec.decodeValue(body)
		if err != nil {
			_ = it.Close()
			return st, err
		}
		_, _ = readChunk(raw, func(ev *server.Event) (bool, error) {
			if ev.Seq >= floor {
				st.Events++
			}
			return true, nil
		})
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return st, err
	}
	e.log.mu.Lock()
	for thread, t := range e.log.tails {
		threads[thread] = true
		st.Events += uint64(len(t.events))
	}
	e.log.mu.Unlock()
	st.Threads = uint64(len(threads))
	st.Bytes = e.db.Metrics().DiskSpaceUsage() + uint64(e.log.wal.Bytes())
	return st, nil
}

// floorFor is floorOf, locking.
func (l *Log) floorFor(thread string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.floorOf(thread)
}

// Compact rewrites the chunks folded with S2 while the process was busy
// as zstd (those the running store had not rewritten yet, and any an
// earlier run left), then the whole store, dropping what deletes left
// behind.
func (e *Engine) Compact(ctx context.Context) error {
	l := e.log
	l.flushing.Lock()
	from, to := wholeIndex()
	_, err := l.recompress(ctx, from, to, 0)
	if err == nil {
		l.fastFrom = nil
	}
	l.flushing.Unlock()
	if err != nil {
		return err
	}
	return e.db.Compact(ctx, []byte{0}, []byte{0xff}, true)
}

// recompressBatch is how many rewritten chunks one unsynced batch holds.
const recompressBatch = 256

// recompressPerPass bounds the index entries one background pass visits
// (a pass a second, when the process has CPU to spare): about 10 ms of
// zstd at most.
const recompressPerPass = 256

// recompressSome goes on rewriting the S2 chunks as zstd,
// recompressPerPass index entries at a time (the writer, once a second
// while the process is not busy): the whole index once after the store
// opens, then from the first chunk written while busy.
func (l *Log) recompressSome() {
	l.flushing.Lock()
	defer l.flushing.Unlock()
	if l.fastFrom == nil {
		return
	}
	next, err := l.recompress(context.Background(), l.fastFrom, l.fastEnd, recompressPerPass)
	if err == nil {
		l.fastFrom = next // nil: every one rewritten, until the next busy second
	}
}

// recompress rewrites the chunks written with S2 as zstd, with their
// index entries' sizes and the threads' byte counts, walking the index
// (the chunks in the order they were written) from key from to key to,
// at most budget entries of it (0: no bound); it says the index key to
// go on from (nil: it reached to; from again after an error: what was
// rewritten is skipped next time). The
// writes are not synced: a rewrite a crash loses leaves the S2 chunk,
// as readable. l.flushing held: no fold, retention pass or delete
// meanwhile.
func (l *Log) recompress(ctx context.Context, from, to []byte, budget int) (next []byte, err error) {
	if err := l.checkWritable(); err != nil {
		return from, err
	}
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: from, UpperBound: to})
	if err != nil {
		return from, err
	}
	defer it.Close()
	b := l.db.NewBatch()
	defer func() { _ = b.Close() }() // the last one
	grown := map[string]int64{}
	commit := func() error {
		if b.Empty() {
			return nil
		}
		err := b.Commit(pebble.NoSync)
		_ = b.Close()
		b = l.db.NewBatch()
		if err != nil {
			return err
		}
		l.mu.Lock()
		for thread, d := range grown {
			l.addBytes(thread, d)
		}
		l.mu.Unlock()
		clear(grown)
		return nil
	}
	visited, rewritten := 0, 0
	for it.First(); it.Valid(); it.Next() {
		if budget > 0 && visited == budget {
			next = append([]byte(nil), it.Key()...)
			break
		}
		visited++
		if err := ctx.Err(); err != nil {
			return from, err
		}
		thread, first, ok := parseIndexKey(it.Key())
		if !ok {
			continue
		}
		v, found, err := l.get(chunkKey(thread, first))
		if err != nil {
			return from, err
		}
		if !found {
			continue // dropped meanwhile
		}
		h, body, err := readChunkHead(v)
		if err != nil || !isFast(body) {
			continue
		}
		raw, err := l.codec.decodeValue(body)
		if err != nil {
			return from, fmt.Errorf("diskstore: thread %s, chunk %d: %w", thread, first, err)
		}
		nv := l.codec.encode(h.append(nil), raw, false)
		_ = b.Set(chunkKey(thread, first), nv, nil)
		_ = b.Set(it.Key(), binary.AppendUvarint(nil, uint64(len(nv))), nil)
		grown[thread] += int64(len(nv) - len(v))
		if rewritten++; rewritten%recompressBatch == 0 {
			if err := commit(); err != nil {
				return from, err
			}
		}
		runtime.Gosched() // deliveries run between two chunks
	}
	if err := it.Error(); err != nil {
		return from, err
	}
	return next, commit()
}

// Export writes the thread's events as NDJSON, each without its seq and
// event_id: a producer's batch (POST /threads/{id}/events) that another
// server imports as it would any producer's events.
func (e *Engine) Export(thread string, w io.Writer) (n int, err error) {
	if err := e.known(thread); err != nil {
		return 0, err
	}
	werr := e.log.Stored(context.Background(), thread, 0, func(ev *server.Event) bool {
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
	if err == nil {
		err = werr
	}
	return n, err
}

// SyncState implements server.SyncedState: the values, checkpoints and
// run records written without a sync before the call are synced (with
// Pebble's log, which groups the syncs of concurrent callers into one);
// when there are none (every other write is synced as it is made), it
// returns at once.
func (s *State) SyncState(context.Context) (err error) {
	wrote := s.wrote.Load()
	if s.synced.Load() >= wrote {
		return nil
	}
	defer closedAsError(&err)
	if err := s.db.LogData(nil, pebble.Sync); err != nil {
		return err
	}
	for {
		was := s.synced.Load()
		if was >= wrote || s.synced.CompareAndSwap(was, wrote) {
			return nil
		}
	}
}

package diskstore

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/cockroachdb/pebble/v2"
)

// retain runs each second in the writer: the threads whose tails are old
// enough are folded at the next commit, the commit log lets go of the
// segments whose events every thread has in chunks, and the retention
// policy drops what it no longer keeps: each thread committed since the
// last pass keeps its last MaxEvents events, MaxThreadBytes of them, none
// older than MaxAge (every minute, every thread); the whole store keeps
// MaxBytes, the oldest chunks of any thread dropped first. A replay from
// before what is kept gets the missed-events notice.
func (l *Log) retain() {
	l.flushing.Lock()
	defer l.flushing.Unlock()
	l.mu.Lock()
	old := time.Now().Add(-l.opts.FoldAge)
	wm := l.commit + 1 // the commit log is needed from the oldest commit not yet in a chunk
	for thread, t := range l.tails {
		if t.committed > 0 && t.since.Before(old) {
			l.due[thread] = true
		}
		if len(t.events) > 0 && t.events[0].commit > 0 {
			wm = min(wm, t.events[0].commit)
		}
	}
	if l.writable() != nil {
		l.mu.Unlock()
		return // the commit log and the retention policy wait for the disk
	}
	touched := make(map[string]uint64, len(l.touched))
	for _, t := range l.touched {
		touched[t.thread] = t.last
	}
	l.touched = l.touched[:0]
	l.round++
	l.mu.Unlock()
	if l.wal.CanRelease(wm) {
		// The chunks holding those commits' events were written without
		// a sync: the tree's log is synced before the commits go.
		if err := l.db.LogData(nil, pebble.Sync); err == nil {
			_ = l.wal.Release(wm)
		}
	}

	keep := map[string]uint64{}
	raise := func(thread string, seq uint64) {
		if seq > keep[thread] {
			keep[thread] = seq
		}
	}
	for thread, last := range touched {
		if l.opts.MaxEvents > 0 && last > uint64(l.opts.MaxEvents) {
			raise(thread, last-uint64(l.opts.MaxEvents)+1)
		}
		if l.opts.MaxThreadBytes > 0 {
			l.mu.Lock()
			over := l.bytes[thread] > l.opts.MaxThreadBytes
			l.mu.Unlock()
			if over {
				raise(thread, l.byteFloor(thread))
			}
		}
	}
	if l.opts.MaxAge > 0 {
		cutoff := uint64(l.opts.Now().Add(-l.opts.MaxAge).UnixMilli())
		threads := make([]string, 0, len(touched))
		for thread := range touched {
			threads = append(threads, thread)
		}
		if l.aged.IsZero() || time.Since(l.aged) >= time.Minute {
			// Every minute, the threads nobody writes too.
			l.aged = time.Now()
			threads = append(threads, l.threads()...)
		}
		for _, thread := range threads {
			raise(thread, l.ageFloor(thread, cutoff))
		}
	}
	if l.opts.MaxBytes > 0 {
		for thread, seq := range l.storeFloors(keep) {
			raise(thread, seq)
		}
	}
	for thread, seq := range keep {
		l.drop(thread, seq)
	}
}

// threads lists every thread with events in a chunk.
func (l *Log) threads() []string {
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte("h/"), UpperBound: []byte("h0")})
	if err != nil {
		return nil
	}
	defer it.Close()
	var out []string
	for it.First(); it.Valid(); it.Next() {
		out = append(out, string(it.Key()[2:]))
	}
	return out
}

// byteFloor is the first seq of the newest chunks of thread that fit
// MaxThreadBytes.
func (l *Log) byteFloor(thread string) uint64 {
	prefix := chunkPrefix(thread)
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper(prefix)})
	if err != nil {
		return 0
	}
	defer it.Close()
	var sum int64
	for it.Last(); it.Valid(); it.Prev() {
		if sum += int64(len(it.Value())); sum > l.opts.MaxThreadBytes {
			h, _, err := readChunkHead(it.Value())
			if err != nil {
				return 0
			}
			return h.Last + 1
		}
	}
	return 0
}

// ageFloor is the first seq of thread whose event is not older than
// cutoff (Unix ms): a chunk is judged by the timestamps of its first and
// last events, read only when it straddles the cutoff.
func (l *Log) ageFloor(thread string, cutoff uint64) uint64 {
	var keep uint64
	prefix := chunkPrefix(thread)
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper(prefix)})
	if err != nil {
		return 0
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		h, body, err := readChunkHead(it.Value())
		if err != nil {
			return keep
		}
		if h.Newest < cutoff {
			keep = h.Last + 1
			continue
		}
		if h.Oldest >= cutoff {
			return keep
		}
		raw, err := l.codec.decodeValue(body)
		if err != nil {
			return keep
		}
		_, _ = readChunk(raw, func(e *server.Event) (bool, error) {
			if timestampOf(e.JSON()) >= cutoff {
				return false, nil
			}
			keep = e.Seq + 1
			return true, nil
		})
		return keep
	}
	l.mu.Lock()
	var tl []record
	if t := l.tails[thread]; t != nil {
		tl = append(tl, t.events...)
	}
	l.mu.Unlock()
	for _, p := range tl {
		if timestampOf(p.json) >= cutoff {
			break
		}
		keep = p.seq + 1
	}
	return keep
}

// storeFloors picks the oldest chunks of any thread to drop until what
// the store keeps fits MaxBytes (the floors already chosen dropping
// theirs too).
func (l *Log) storeFloors(chosen map[string]uint64) map[string]uint64 {
	l.mu.Lock()
	over := l.total - l.opts.MaxBytes
	l.mu.Unlock()
	if over <= 0 {
		return nil
	}
	out := map[string]uint64{}
	from, to := wholeIndex()
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: from, UpperBound: to})
	if err != nil {
		return nil
	}
	defer it.Close()
	for it.First(); it.Valid() && over > 0; it.Next() {
		thread, first, ok := parseIndexKey(it.Key())
		size, n := binary.Uvarint(it.Value())
		if !ok || n <= 0 {
			continue
		}
		v, found, err := l.get(chunkKey(thread, first))
		if err != nil || !found {
			continue
		}
		h, _, err := readChunkHead(v)
		if err != nil {
			continue
		}
		if h.Last+1 > out[thread] {
			out[thread] = h.Last + 1
		}
		if h.Last >= chosen[thread] { // not dropped already
			over -= int64(size)
		}
	}
	return out
}

// drop forgets the thread's events below seq keep: its chunks wholly
// below keep leave the disk, and replays (from the buffer too) start at
// keep.
func (l *Log) drop(thread string, keep uint64) {
	l.mu.Lock()
	if keep <= l.floorOf(thread) {
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	b := l.db.NewBatch()
	defer b.Close()
	prefix := chunkPrefix(thread)
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper(prefix)})
	if err != nil {
		return
	}
	var freed int64
	var events uint64
	for it.First(); it.Valid(); it.Next() {
		h, _, err := readChunkHead(it.Value())
		if err != nil || h.Last >= keep {
			break
		}
		events += h.Count
		freed += int64(len(it.Value()))
		_ = b.Delete(it.Key(), nil)
		_ = b.Delete(indexKey(h.Written, thread, chunkFirst(it.Key())), nil)
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return
	}
	_ = b.Set(floorKey(thread), binary.BigEndian.AppendUint64(nil, keep), nil)
	if err := b.Commit(pebble.NoSync); err != nil {
		return
	}
	l.dropped.Add(events)
	l.mu.Lock()
	l.floor[thread] = max(l.floor[thread], keep)
	l.addBytes(thread, -freed)
	l.mu.Unlock()
}

// timestampOf reads an event's params.timestamp (Unix ms) with the
// protocol's routing decoder, which scans for the members it needs
// (json.Unmarshal of the whole event, twice a chunk, was a tenth of a
// fold's CPU).
func timestampOf(b []byte) uint64 {
	var r protocol.ServerEventRouting
	if protocol.DecodeServerEventRouting(b, &r) != nil {
		return 0
	}
	return r.ParamsTimestamp
}

package diskstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentstream/agentstream/diskstore/internal/commitlog"
	"github.com/agentstream/agentstream/server"
	"github.com/cockroachdb/pebble/v2"
	"github.com/stretchr/testify/require"
)

// appendN appends n custom events to thread after seq from (epoch ep),
// each with timestamp ts, and returns them.
func appendN(t *testing.T, l *Log, thread, ep string, from uint64, n int, ts time.Time) []*server.Event {
	t.Helper()
	var out []*server.Event
	for i := 0; i < n; i++ {
		e := testEvent(t, thread, ep, from+uint64(i)+1, ts)
		require.NoError(t, l.Append(context.Background(), thread, e))
		out = append(out, e)
	}
	return out
}

// testEvent is a custom event of thread with the seq and timestamp given.
func testEvent(t *testing.T, thread, ep string, seq uint64, ts time.Time) *server.Event {
	t.Helper()
	b := fmt.Appendf(nil, `{"type":"event","event_id":"%s-%d","seq":%d,"method":"custom","params":{"namespace":[],"timestamp":%d,"data":{"name":"n","payload":"%s %d, some text to fill the event %d"}}}`,
		ep, seq, seq, ts.UnixMilli(), thread, seq, seq)
	e, err := server.DecodeEvent(b)
	require.NoError(t, err)
	return e
}

func replay(t *testing.T, l *Log, thread string, seq uint64) []string {
	t.Helper()
	out := []string{}
	require.NoError(t, l.After(context.Background(), thread, seq, func(e *server.Event) bool {
		out = append(out, string(e.JSON()))
		return true
	}))
	return out
}

func jsons(evs []*server.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = string(e.JSON())
	}
	return out
}

// waitWritten waits until the store has committed n events.
func waitWritten(t *testing.T, eng *Engine, n uint64) {
	t.Helper()
	require.Eventually(t, func() bool { return eng.Counters().Written == n }, 5*time.Second, 5*time.Millisecond)
}

// commitKey is where an earlier version kept group commit n.
func commitKey(n uint64) []byte { return binary.BigEndian.AppendUint64([]byte("w/"), n) }

// count is how many keys start with prefix.
func count(t *testing.T, db *pebble.DB, prefix string) int {
	t.Helper()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte(prefix), UpperBound: upper([]byte(prefix))})
	require.NoError(t, err)
	defer it.Close()
	n := 0
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	return n
}

// TestReplayFromEveryCursor: a thread whose events are in chunks, in its
// tail (committed or not) and in the hot cache replays from every cursor
// the events after it, each once, in order; the same after a clean
// restart, when they are all in chunks.
func TestReplayFromEveryCursor(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, BufferEvents: 8, FoldEvents: 10, CommitEvery: time.Millisecond}
	eng, err := Open(opts)
	require.NoError(t, err)
	l := eng.log
	evs := appendN(t, l, "r", "ep1", 0, 95, time.Now())
	require.Eventually(t, func() bool { return count(t, eng.db, "c/") >= 8 }, 5*time.Second, 5*time.Millisecond, "folded into chunks")
	more := appendN(t, l, "r", "ep1", 95, 5, time.Now()) // in the tail, maybe not committed yet
	evs = append(evs, more...)
	want := jsons(evs)
	for seq := 0; seq <= len(evs); seq++ {
		require.Equal(t, want[seq:], replay(t, l, "r", uint64(seq)), "after %d", seq)
	}
	ep, last, err := l.Head(context.Background(), "r")
	require.NoError(t, err)
	require.Equal(t, "ep1", ep)
	require.Equal(t, uint64(100), last)
	require.NoError(t, eng.Close())

	eng, err = Open(opts)
	require.NoError(t, err)
	defer eng.Close()
	require.Zero(t, count(t, eng.db, "w/"), "a clean close leaves the commit log empty")
	for seq := 0; seq <= len(evs); seq += 7 {
		require.Equal(t, want[seq:], replay(t, eng.log, "r", uint64(seq)), "after %d, restarted", seq)
	}
	oldest, err := eng.log.Oldest(context.Background(), "r")
	require.NoError(t, err)
	require.Equal(t, uint64(1), oldest)
	st, err := eng.Stats()
	require.NoError(t, err)
	require.Equal(t, uint64(100), st.Events)
	require.Equal(t, uint64(1), st.Threads)
}

// crash stops the engine without its clean close: what was committed
// stays, nothing is folded, no clean mark.
func crash(t *testing.T, eng *Engine) {
	t.Helper()
	eng.closeOnce.Do(func() {
		eng.log.close()
		eng.log.release()
		require.NoError(t, eng.db.Close())
		eng.syncer.Close()
	})
}

// TestRecoveryFoldsTheCommitLog: events only in the commit log when the
// store crashed are in their threads' chunks after the next Open, byte
// for byte; a thread deleted before the crash does not come back from
// it.
func TestRecoveryFoldsTheCommitLog(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, FoldEvents: 1000, FoldAge: time.Hour}
	eng, err := Open(opts)
	require.NoError(t, err)
	kept := appendN(t, eng.log, "kept", "ep1", 0, 30, time.Now())
	appendN(t, eng.log, "gone", "ep1", 0, 5, time.Now())
	waitWritten(t, eng, 35)
	c := eng.Counters()
	require.Positive(t, c.AsyncSyncs, "the commits' syncs go through the kernel's AIO (Linux)")
	require.Zero(t, c.BlockingSyncs)
	require.Zero(t, count(t, eng.db, "c/"), "nothing folded yet")
	require.NoError(t, eng.state.Delete(context.Background(), "gone"))
	again := appendN(t, eng.log, "gone", "ep2", 0, 2, time.Now()) // the thread made again
	waitWritten(t, eng, 37)
	crash(t, eng)

	eng, err = Open(opts)
	require.NoError(t, err)
	defer eng.Close()
	require.True(t, eng.Crashed())
	require.Zero(t, eng.log.wal.Segments(), "the commit log is folded")
	require.Zero(t, eng.log.wal.Bytes())
	require.Equal(t, jsons(kept), replay(t, eng.log, "kept", 0))
	require.Equal(t, jsons(again), replay(t, eng.log, "gone", 0), "only what came after the delete")
	ep, seq, err := eng.log.Head(context.Background(), "kept")
	require.NoError(t, err)
	require.Equal(t, uint64(30), seq)
	require.NotEqual(t, "ep1", ep, "a new epoch after the crash")
	ep2, _, err := eng.log.Head(context.Background(), "kept")
	require.NoError(t, err)
	require.Equal(t, ep, ep2, "chosen once")
}

// TestACommitCutShortIsLostAlone: power lost while a group commit was
// being written (its record cut short on the disk): the next Open
// recovers every event before it, the thread goes on from the last of
// them in a new epoch.
func TestACommitCutShortIsLostAlone(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, FoldEvents: 1000, FoldAge: time.Hour}
	eng, err := Open(opts)
	require.NoError(t, err)
	evs := appendN(t, eng.log, "cut", "ep1", 0, 10, time.Now())
	waitWritten(t, eng, 10)
	evs = append(evs, appendN(t, eng.log, "cut", "ep1", 10, 5, time.Now())...)
	waitWritten(t, eng, 15)
	crash(t, eng)
	segs, err := filepath.Glob(filepath.Join(dir, commitDir, "*.log"))
	require.NoError(t, err)
	require.Len(t, segs, 1)
	info, err := os.Stat(segs[0])
	require.NoError(t, err)
	require.NoError(t, os.Truncate(segs[0], info.Size()-3))

	eng, err = Open(opts)
	require.NoError(t, err)
	defer eng.Close()
	require.True(t, eng.Crashed())
	got := replay(t, eng.log, "cut", 0)
	require.GreaterOrEqual(t, len(got), 10, "the commits before the cut one are kept")
	require.Less(t, len(got), 15, "the cut commit is lost")
	require.Equal(t, jsons(evs[:len(got)]), got)
	ep, seq, err := eng.log.Head(context.Background(), "cut")
	require.NoError(t, err)
	require.Equal(t, uint64(len(got)), seq)
	require.NotEqual(t, "ep1", ep)
}

// TestCommitsOfEitherFormatAreRead: commits are S2 now and were zstd
// before; after a crash a store holding the earlier kind recovers them
// the same, and a value of neither kind is an error, not a guess.
func TestCommitsOfEitherFormatAreRead(t *testing.T) {
	c, err := newCodec()
	require.NoError(t, err)
	defer c.close()
	raw := commitRecord(commitRecord(nil, "a", 1, []byte(`{"x":1}`)), "b", 7, []byte(`{"y":"two"}`))
	s2v := c.encodeCommit([]byte("kept"), raw)
	require.Equal(t, "kept", string(s2v[:4]), "appended to what dst held")
	require.Equal(t, byte(s2Value), s2v[4])
	got, err := c.decodeValue(s2v[4:])
	require.NoError(t, err)
	require.Equal(t, raw, got)
	got, err = c.decodeValue(c.enc.EncodeAll(raw, nil))
	require.NoError(t, err)
	require.Equal(t, raw, got, "a commit written before, in zstd")
	_, err = c.decodeValue([]byte{0x7b, 1, 2})
	require.Error(t, err)
	_, err = c.decodeValue(nil)
	require.Error(t, err)

	// A store an earlier version left crashed, with its commits in the
	// tree ("w/") and in zstd, recovers their events.
	dir := t.TempDir()
	opts := Options{Dir: dir, FoldEvents: 1000, FoldAge: time.Hour}
	eng, err := Open(opts)
	require.NoError(t, err)
	evs := appendN(t, eng.log, "old", "ep1", 0, 20, time.Now())
	waitWritten(t, eng, 20)
	crash(t, eng)
	wal, err := commitlog.Open(filepath.Join(dir, commitDir), nil, 0)
	require.NoError(t, err)
	db, err := pebble.Open(dir, &pebble.Options{Logger: quiet{}})
	require.NoError(t, err)
	rewritten := 0
	require.NoError(t, wal.Replay(func(n uint64, value []byte) error {
		raw, err := c.decodeValue(value)
		require.NoError(t, err)
		rewritten++
		return db.Set(commitKey(n), c.enc.EncodeAll(raw, nil), pebble.Sync)
	}, false))
	require.NoError(t, wal.Close())
	require.NoError(t, db.Close())
	require.NoError(t, os.RemoveAll(filepath.Join(dir, commitDir)))
	require.Positive(t, rewritten)
	eng, err = Open(opts)
	require.NoError(t, err)
	defer eng.Close()
	require.True(t, eng.Crashed())
	require.Equal(t, jsons(evs), replay(t, eng.log, "old", 0))
}

// TestTheCommitLogEmptiesAsThreadsFold: once every event of a group
// commit is in a chunk the commit is deleted, so the commit log holds
// about FoldAge of events at most.
func TestTheCommitLogEmptiesAsThreadsFold(t *testing.T) {
	eng, err := Open(Options{Dir: t.TempDir(), FoldEvents: 10, FoldAge: 200 * time.Millisecond})
	require.NoError(t, err)
	defer eng.Close()
	for i := 0; i < 5; i++ {
		appendN(t, eng.log, fmt.Sprint("t", i), "ep", 0, 13, time.Now()) // 10 fold by count, 3 by age
	}
	waitWritten(t, eng, 65)
	require.Positive(t, eng.Counters().CommitLogBytes)
	require.Eventually(t, func() bool {
		eng.log.mu.Lock()
		n := len(eng.log.tails)
		eng.log.mu.Unlock()
		return n == 0 && eng.log.wal.Segments() == 0 && eng.Counters().CommitLogBytes == 0
	}, 10*time.Second, 20*time.Millisecond, "every tail folded, the commit log empty")
	require.Equal(t, 10, count(t, eng.db, "c/"))
}

// TestRetentionByBytes: a thread keeps MaxThreadBytes of its newest
// chunks; the store keeps MaxBytes, the oldest chunks of any thread
// dropped first; what is dropped is gone from replays and from the
// store's byte count.
func TestRetentionByBytes(t *testing.T) {
	t.Run("per thread", func(t *testing.T) {
		eng, err := Open(Options{Dir: t.TempDir(), FoldEvents: 10, MaxThreadBytes: 2000})
		require.NoError(t, err)
		defer eng.Close()
		evs := appendN(t, eng.log, "big", "ep", 0, 400, time.Now())
		appendN(t, eng.log, "small", "ep", 0, 20, time.Now())
		// Chunks are dropped as they are folded, a few at a time: wait
		// until the thread is within its bytes, not only until the first
		// went.
		var big, small int64
		require.Eventually(t, func() bool {
			o, err := eng.log.Oldest(context.Background(), "big")
			eng.log.mu.Lock()
			big, small = eng.log.bytes["big"], eng.log.bytes["small"]
			eng.log.mu.Unlock()
			return err == nil && o > 1 && big <= 2000
		}, 10*time.Second, 20*time.Millisecond)
		require.LessOrEqual(t, big, int64(2000))
		require.Positive(t, big)
		o, err := eng.log.Oldest(context.Background(), "big")
		require.NoError(t, err)
		require.Equal(t, jsons(evs[o-1:]), replay(t, eng.log, "big", 0), "from the oldest kept, all of it")
		require.Len(t, replay(t, eng.log, "small", 0), 20, "another thread keeps its own")
		require.Positive(t, small)
		require.Positive(t, eng.Counters().Dropped)
	})
	t.Run("whole store", func(t *testing.T) {
		// What two threads' chunks take, measured without a cap.
		write := func(eng *Engine) (recent []*server.Event) {
			appendN(t, eng.log, "old", "ep", 0, 60, time.Now())
			require.Eventually(t, func() bool { return eng.Counters().Chunks >= 6 }, 5*time.Second, 5*time.Millisecond)
			time.Sleep(5 * time.Millisecond) // later chunks, later index keys
			recent = appendN(t, eng.log, "new", "ep", 0, 30, time.Now())
			require.Eventually(t, func() bool { return eng.Counters().Chunks >= 9 }, 5*time.Second, 5*time.Millisecond)
			return recent
		}
		eng, err := Open(Options{Dir: t.TempDir(), FoldEvents: 10})
		require.NoError(t, err)
		write(eng)
		all := eng.Counters().ChunkBytes
		require.NoError(t, eng.Close())

		// The newest thread (a third of all) fits with part of the oldest
		// (about half of it: chunk sizes vary by a few bytes, so a limit of
		// half of all could drop the oldest thread whole); both do not.
		limit := all * 2 / 3
		dir := t.TempDir()
		eng, err = Open(Options{Dir: dir, FoldEvents: 10, MaxBytes: limit})
		require.NoError(t, err)
		recent := write(eng)
		require.Eventually(t, func() bool { return eng.Counters().ChunkBytes <= limit }, 10*time.Second, 20*time.Millisecond)
		require.Equal(t, jsons(recent), replay(t, eng.log, "new", 0), "the newest thread whole")
		o, err := eng.log.Oldest(context.Background(), "old")
		require.NoError(t, err)
		require.Greater(t, o, uint64(1), "the oldest chunks dropped")
		require.LessOrEqual(t, o, uint64(60), "some of the oldest thread kept")
		require.NoError(t, eng.Close())
		eng, err = Open(Options{Dir: dir, FoldEvents: 10, MaxBytes: limit})
		require.NoError(t, err)
		defer eng.Close()
		require.LessOrEqual(t, eng.Counters().ChunkBytes, limit, "counted again from the index after a restart")
		require.Positive(t, eng.Counters().ChunkBytes)
		o2, err := eng.log.Oldest(context.Background(), "old")
		require.NoError(t, err)
		require.Equal(t, o, o2, "the floor outlives the restart")
	})
}

// TestValuesAreSyncedWithTheNextCommit: values and checkpoints are
// written to the tree without a sync; the writer syncs the tree within a
// commit interval, with no event to commit too.
func TestValuesAreSyncedWithTheNextCommit(t *testing.T) {
	eng, err := Open(Options{Dir: t.TempDir(), CommitEvery: 20 * time.Millisecond})
	require.NoError(t, err)
	defer eng.Close()
	time.Sleep(100 * time.Millisecond) // Open's own syncs are done
	syncs := func() uint64 { c := eng.Counters(); return c.AsyncSyncs + c.BlockingSyncs }
	before := syncs()
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, before, syncs(), "an idle store does not sync")
	require.NoError(t, eng.state.SetValues(context.Background(), "v", map[string]any{"n": 1}))
	require.Eventually(t, func() bool { return syncs() > before && !eng.log.unsynced.Load() }, 5*time.Second, 5*time.Millisecond)
	before = syncs()
	require.NoError(t, eng.state.AddCheckpoint(context.Background(), "v", server.CheckpointRecord{}))
	require.Eventually(t, func() bool { return syncs() > before && !eng.log.unsynced.Load() }, 5*time.Second, 5*time.Millisecond)
}

// TestDueThreadsFoldFasterThanTheyComeDue: threads that come due together
// are folded a quarter at a time (at least foldsPerCommit), so that a
// server committing less often than CommitEvery (a saturated core) does
// not leave them growing for many commits; a fixed cap of foldsPerCommit
// took 25 commits here.
func TestDueThreadsFoldFasterThanTheyComeDue(t *testing.T) {
	eng, err := Open(Options{Dir: t.TempDir(), FoldEvents: 4, CommitEvery: time.Hour})
	require.NoError(t, err)
	defer eng.Close()
	const threads = 400
	for i := 0; i < threads; i++ {
		appendN(t, eng.log, fmt.Sprint("t", i), "ep", 0, 4, time.Now())
	}
	eng.log.flush() // the commit: every thread is due
	require.Equal(t, uint64(threads*4), eng.Counters().Written)
	require.Zero(t, eng.Counters().Chunks)
	eng.log.flush()
	require.Equal(t, uint64(threads/4), eng.Counters().Chunks, "a quarter of those due with the next commit")
	commits := 1
	for eng.Counters().Chunks < threads {
		eng.log.flush()
		commits++
		require.LessOrEqual(t, commits, 12, "the due threads folded within a dozen commits")
	}
}

// TestBusyFoldsFastChunks: while the process is busy chunks are S2;
// once it is not, the writer rewrites them as zstd (smaller) in the
// background and folds new ones in zstd; those an earlier run left are
// rewritten by Compact, or by a run with CPU to spare. Every event replays the same throughout and after a
// restart, and the index's sizes and the store's byte count follow each
// rewrite.
func TestBusyFoldsFastChunks(t *testing.T) {
	dir := t.TempDir()
	var busy atomic.Bool
	busy.Store(true)
	opts := Options{Dir: dir, FoldEvents: 10, Busy: busy.Load}
	eng, err := Open(opts)
	require.NoError(t, err)
	require.Eventually(t, eng.log.fast.Load, 5*time.Second, 10*time.Millisecond, "the writer asks Busy once a second")
	evs := appendN(t, eng.log, "a", "ep", 0, 20, time.Now())
	require.Eventually(t, func() bool { return eng.Counters().Chunks == 2 }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, uint64(2), eng.Counters().FastChunks)
	require.Equal(t, []bool{true, true}, chunkFormats(t, eng))
	require.Equal(t, jsons(evs), replay(t, eng.log, "a", 0))
	s2Bytes := eng.Counters().ChunkBytes
	require.Equal(t, s2Bytes, indexedBytes(t, eng))

	busy.Store(false)
	require.Eventually(t, func() bool { return slices.Equal(chunkFormats(t, eng), []bool{false, false}) },
		5*time.Second, 10*time.Millisecond, "rewritten as zstd once the process is not busy")
	require.Less(t, eng.Counters().ChunkBytes, s2Bytes, "zstd keeps less than S2")
	require.Equal(t, eng.Counters().ChunkBytes, indexedBytes(t, eng))
	require.Equal(t, jsons(evs), replay(t, eng.log, "a", 0))
	evs = append(evs, appendN(t, eng.log, "a", "ep", 20, 10, time.Now())...)
	require.Eventually(t, func() bool { return eng.Counters().Chunks == 3 }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, uint64(2), eng.Counters().FastChunks)
	require.Equal(t, []bool{false, false, false}, chunkFormats(t, eng))

	// Busy again, then closed before a quiet second: the next run finds
	// an S2 chunk it did not write. Busy all along, it keeps it until
	// Compact rewrites it.
	busy.Store(true)
	require.Eventually(t, eng.log.fast.Load, 5*time.Second, 10*time.Millisecond)
	evs = append(evs, appendN(t, eng.log, "a", "ep", 30, 10, time.Now())...)
	// Folded while busy, before the close (a fold left to the next run's
	// recovery would be that run's, not busy yet: zstd).
	require.Eventually(t, func() bool { return eng.Counters().Chunks == 4 }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, uint64(3), eng.Counters().FastChunks)
	require.NoError(t, eng.Close())
	eng, err = Open(opts)
	require.NoError(t, err)
	require.Equal(t, []bool{false, false, false, true}, chunkFormats(t, eng))
	before := eng.Counters().ChunkBytes
	require.Equal(t, before, indexedBytes(t, eng), "counted again from the disk")
	require.NoError(t, eng.Compact(context.Background()))
	require.Equal(t, []bool{false, false, false, false}, chunkFormats(t, eng))
	require.Less(t, eng.Counters().ChunkBytes, before)
	require.Equal(t, eng.Counters().ChunkBytes, indexedBytes(t, eng))
	require.Equal(t, jsons(evs), replay(t, eng.log, "a", 0))

	// Once more an S2 chunk left behind; a run with CPU to spare walks
	// the whole index once and rewrites it.
	require.Eventually(t, eng.log.fast.Load, 5*time.Second, 10*time.Millisecond)
	evs = append(evs, appendN(t, eng.log, "a", "ep", 40, 10, time.Now())...)
	require.NoError(t, eng.Close())
	busy.Store(false)
	eng, err = Open(opts)
	require.NoError(t, err)
	defer eng.Close()
	require.Eventually(t, func() bool { return slices.Equal(chunkFormats(t, eng), []bool{false, false, false, false, false}) },
		5*time.Second, 10*time.Millisecond, "what an earlier run left rewritten too")
	require.Equal(t, eng.Counters().ChunkBytes, indexedBytes(t, eng))
	require.Equal(t, jsons(evs), replay(t, eng.log, "a", 0))
}

// chunkFormats says, chunk by chunk in key order, whether it is S2.
func chunkFormats(t *testing.T, eng *Engine) []bool {
	t.Helper()
	it, err := eng.db.NewIter(&pebble.IterOptions{LowerBound: []byte("c/"), UpperBound: upper([]byte("c/"))})
	require.NoError(t, err)
	defer it.Close()
	var out []bool
	for it.First(); it.Valid(); it.Next() {
		_, body, err := readChunkHead(it.Value())
		require.NoError(t, err)
		out = append(out, isFast(body))
	}
	return out
}

// indexedBytes adds up the chunk sizes the index holds.
func indexedBytes(t *testing.T, eng *Engine) int64 {
	t.Helper()
	it, err := eng.db.NewIter(&pebble.IterOptions{LowerBound: []byte("t/"), UpperBound: upper([]byte("t/"))})
	require.NoError(t, err)
	defer it.Close()
	var n int64
	for it.First(); it.Valid(); it.Next() {
		v, k := binary.Uvarint(it.Value())
		require.Positive(t, k)
		n += int64(v)
	}
	return n
}

// TestCPUBusy: the default Busy says a process that sleeps between two
// questions is not busy, and one that spins on every core it may use for
// the second is (cpuuse.Gauge's share, nine tenths or more).
func TestCPUBusy(t *testing.T) {
	busy := cpuBusy()
	time.Sleep(50 * time.Millisecond)
	require.False(t, busy(), "a process that sleeps meanwhile is not busy")
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for !stop.Load() {
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	require.True(t, busy(), "every core it may use, spinning")
}

// TestWaitSyncedWaitsForTheCommit: WaitSynced returns at once with
// nothing appended, waits while events appended before it are not in a
// synced commit, and returns once the commit that holds them is written.
func TestWaitSyncedWaitsForTheCommit(t *testing.T) {
	eng, err := Open(Options{Dir: t.TempDir(), CommitEvery: time.Hour})
	require.NoError(t, err)
	defer eng.Close()
	l := eng.log
	require.NoError(t, l.WaitSynced(context.Background()), "nothing appended: nothing to wait for")
	appendN(t, l, "w", "ep", 0, 3, time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	require.ErrorIs(t, l.WaitSynced(ctx), context.DeadlineExceeded, "not committed yet")
	cancel()
	done := make(chan error, 1)
	go func() { done <- l.WaitSynced(context.Background()) }()
	select {
	case err := <-done:
		t.Fatalf("returned before the commit: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	l.flush()
	require.NoError(t, <-done)
	require.Equal(t, uint64(3), eng.Counters().Written, "what it waited for is in a synced commit")
	require.NoError(t, l.WaitSynced(context.Background()), "committed: nothing to wait for")
}

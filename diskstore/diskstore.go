package diskstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentstream/agentstream/diskstore/internal/aiosync"
	"github.com/agentstream/agentstream/diskstore/internal/commitlog"
	"github.com/agentstream/agentstream/internal/cpuuse"
	"github.com/agentstream/agentstream/server"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Options configure a store.
type Options struct {
	// Dir holds the store (created when missing).
	Dir string
	// Repair opens a store whose commit log or tree log is damaged (the
	// disk changed a record that later ones follow), keeping every commit
	// it can read and the tree's log up to the damage; the others' events
	// are lost (Engine.Repaired says where), and readers are told of the
	// holes they leave (events.missed). Without it such a store is
	// refused (ErrDamaged).
	Repair bool
	// Verify reads every table of the store as it opens (Engine.Check):
	// damage in one is refused at start, naming the file, rather than
	// found by the first read of what it holds. It costs a read of the
	// whole store.
	Verify bool
	// Existing opens only a store that is there (ErrNotAStore for a
	// directory without one), writing nothing into any other directory:
	// for tools that read a store (agentstream data).
	Existing bool
	// BufferEvents and BufferBytes cap the in-memory replay buffer of each
	// thread, the hot cache in front of the disk (DefaultBufferEvents and
	// the server's DefaultBufferBytes when zero): older replays read the
	// disk.
	BufferEvents, BufferBytes int
	// CommitEvery is the longest an event waits before its group commit
	// (DefaultCommitEvery); a commit is synced to the disk.
	CommitEvery time.Duration
	// MaxPending caps the events appended and not yet on disk; past it a
	// publisher waits for the disk (WaitRoom, before it takes its thread's
	// lock), up to QueueWait, then fails (DefaultMaxPending). Append
	// itself refuses at once past twice MaxPending.
	MaxPending int
	// QueueWait bounds that wait (DefaultQueueWait).
	QueueWait time.Duration
	// MaxProducers is how many producers' last batches the store keeps
	// per thread (server.DefaultMaxProducersPerThread), the ones used
	// longest ago forgotten first.
	MaxProducers int
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
	// MaxThreadBytes keeps at most this many bytes (compressed, on disk)
	// of each thread's events, the oldest dropped first, a chunk at a time
	// (0: no cap).
	MaxThreadBytes int64
	// MaxBytes keeps at most this many bytes (compressed, on disk) of all
	// the threads' events together, the oldest chunks of any thread
	// dropped first (0: no cap).
	MaxBytes int64
	// MaxAge drops events older than this (0: kept as long as their
	// thread).
	MaxAge time.Duration
	// Now is the clock of MaxAge (time.Now; tests replace it).
	Now func() time.Time
	// FoldEvents, FoldBytes and FoldAge say when a thread's committed
	// events are folded from the commit log into a chunk of their own:
	// this many events, this many bytes of them, or the oldest this old
	// (DefaultFoldEvents, DefaultFoldBytes, DefaultFoldAge).
	FoldEvents, FoldBytes int
	FoldAge               time.Duration
	// Busy says whether the process has no CPU to spare; the store asks
	// once a second, and folds chunks with S2 rather than zstd until it
	// says no again, then rewrites them as zstd in the background (and
	// those a closed store left; Engine.Compact does it at once). The
	// default (nil) reads the process's CPU use over the last second:
	// nine tenths or more of what it could have had is busy (see
	// cpuuse.Gauge). Tests replace it.
	Busy func() bool
}

// Defaults of Options.
const (
	DefaultCommitEvery = 10 * time.Millisecond
	DefaultMaxPending  = 65536
	DefaultQueueWait   = 2 * time.Second
	DefaultMinFree     = 256 << 20
	// DefaultBufferEvents is the hot cache of a thread on disk: what a
	// reconnect usually asks for (a replay of the last moments); the rest
	// of its history is a disk read away.
	DefaultBufferEvents = 64
	// DefaultMaxEvents is each thread's history on disk: a million events.
	DefaultMaxEvents  = 1_000_000
	DefaultFoldEvents = 64
	DefaultFoldBytes  = 64 << 10
	DefaultFoldAge    = 10 * time.Second
)

// MinTreeFree is the free space the tree (Pebble: the values, records,
// items and event chunks) keeps for its own writes: its log, a memtable's
// flush, its MANIFEST. Below it writes to the tree are refused
// (ErrNotWritable wrapping ErrDiskFull, a 503), whatever Options.MinFree
// says, since Pebble ends the process when one of those writes fails; a
// store opened with less free is refused.
const MinTreeFree = memTableBytes

// ErrDiskFull refuses an event while the store's disk has less free
// space than Options.MinFree.
var ErrDiskFull = errors.New("diskstore: the disk is nearly full (--data-min-free); the event was not kept")

// ErrNotWritable refuses a write of a thread's state (values,
// checkpoints, owner, a delete) while the store takes no events: its disk
// nearly full, or its last group commit failed. The tree under the store
// treats a failed write to its own log as fatal, so it is written to only
// while the disk takes writes.
var ErrNotWritable = errors.New("diskstore: the store takes no writes now")

// ErrBehind refuses an append while the disk is that far behind.
var ErrBehind = errors.New("diskstore: the disk is behind (--data-dir); the event was not kept")

// Engine keeps threads in one Pebble store: a server.Engine.
type Engine struct {
	closeOnce sync.Once
	cutRuns   atomic.Int64 // the runs Start ended
	db        *pebble.DB
	opts      Options
	log       *Log
	state     *State
	syncer    *aiosync.Syncer // nil where the kernel has no AIO: Pebble syncs as it does by itself
}

// memTableBytes is Pebble's memtable (its default is 4 MiB): the
// chunks a few seconds bring, so that they reach the tree's first level
// in fewer, larger tables with less to compact (0.4-0.6 µs of CPU per
// event at 5,000 threads, BenchmarkAppendCPU), for up to three
// memtables' memory while one is being flushed.
const memTableBytes = 16 << 20

// Open opens (or creates) the store under opts.Dir. A store not closed
// cleanly has its commit log folded into its threads' chunks first.
func Open(opts Options) (*Engine, error) {
	if opts.Dir == "" {
		return nil, errors.New("diskstore: no directory")
	}
	opts = withDefaults(opts)
	if opts.Existing {
		if err := isStore(opts.Dir); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(opts.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("diskstore: %w", err)
	}
	if !opts.Existing {
		// A store that would stop at its first write is refused now.
		free, err := opts.FreeSpace()
		if err != nil {
			return nil, fmt.Errorf("diskstore: %w", err)
		}
		if free < MinTreeFree {
			return nil, fmt.Errorf("%w: %d bytes free under %s, and a store needs %d to start", ErrDiskFull, free, opts.Dir, uint64(MinTreeFree))
		}
	}
	// A store another process holds is refused before Pebble opens it
	// (its refusal leaves a goroutine of its own behind).
	if err := notHeld(opts.Dir); err != nil {
		return nil, err
	}
	// The tree's logs are read first: Pebble would pass over damage in
	// them silently (treelog.go).
	treeDamage, err := checkTreeLogs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("diskstore: %w", err)
	}
	var repairedTree []string
	for _, d := range treeDamage {
		if !opts.Repair {
			return nil, fmt.Errorf("%w: the tree's log %s", ErrDamaged, d)
		}
		if err := cutTreeLog(d); err != nil {
			return nil, err
		}
		repairedTree = append(repairedTree, "the tree's log "+d.String()+": cut there")
	}
	// Its MANIFEST and OPTIONS too: Pebble passes over a damaged
	// MANIFEST record silently, and its refusal of damaged options does
	// not name the file (treefiles.go).
	if err := checkManifest(opts.Dir); err != nil {
		return nil, err
	}
	if did, err := checkOptions(opts.Dir, opts.Repair); err != nil {
		return nil, err
	} else if did != "" {
		repairedTree = append(repairedTree, did)
	}
	// The plain file system: Pebble's default wraps it in a slow-disk
	// monitor whose goroutine can outlive Close. Its syncs go through the
	// kernel's AIO where there is one, so that a slow disk does not hold
	// the processor the live path runs on (package aiosync).
	fs := vfs.Default
	syncer, err := aiosync.New(aiosync.DefaultDepth) // nil where there is none
	if err == nil {
		fs = aiosync.FS(fs, syncer)
	}
	db, err := pebble.Open(opts.Dir, treeOptions(fs, opts.Existing))
	if err != nil {
		syncer.Close()
		if strings.Contains(err.Error(), "unknown to the objstorage provider") {
			// A MANIFEST cut short that names tables compacted away since.
			m, _ := currentManifest(opts.Dir)
			return nil, fmt.Errorf("%w: the tree's MANIFEST %s names tables the directory does not hold (%v): restore the store from a backup", ErrDamaged, filepath.Join(opts.Dir, m), err)
		}
		return nil, fmt.Errorf("diskstore: opening %s: %w", opts.Dir, err)
	}
	wal, err := commitlog.Open(filepath.Join(opts.Dir, commitDir), syncer, 0)
	if err != nil {
		db.Close()
		syncer.Close()
		return nil, fmt.Errorf("diskstore: %w", err)
	}
	fail := func(err error) (*Engine, error) {
		wal.Close()
		db.Close()
		syncer.Close()
		return nil, tableDamage(opts.Dir, err)
	}
	// A store not closed cleanly (a crash, kill -9, power lost) may have
	// lost the last events it was told of: every thread goes on in a new
	// epoch, so that no id names two events (a client that saw an id it
	// lost gets the reset notice).
	// A new store has nothing to lose.
	switch damage := error(nil); {
	case opts.Repair:
		// A damaged table: the tree is written again from what can be
		// read (rebuild.go).
		if damage = checkTables(db, opts.Dir); errors.Is(damage, ErrTableDamaged) {
			rebuilt, lost, err := rebuildTree(db, opts.Dir, func() *pebble.Options { return treeOptions(fs, false) }, damage)
			if rebuilt == nil {
				wal.Close()
				syncer.Close()
				return nil, err
			}
			db = rebuilt
			if err != nil {
				return fail(err)
			}
			repairedTree = append(repairedTree, lost)
		} else if damage != nil {
			return fail(damage)
		}
	case opts.Verify:
		if damage = checkTables(db, opts.Dir); damage != nil {
			return fail(damage)
		}
	}
	_, closer, err := db.Get(cleanKey)
	crashed := errors.Is(err, pebble.ErrNotFound)
	if err == nil {
		closer.Close()
	} else if !crashed {
		return fail(fmt.Errorf("diskstore: reading %s: %w", opts.Dir, err))
	}
	if crashed {
		empty, err := isEmpty(db)
		if err != nil {
			return fail(fmt.Errorf("diskstore: reading %s: %w", opts.Dir, err))
		}
		crashed = !empty || wal.Segments() > 0
	}
	if err := db.Delete(cleanKey, pebble.Sync); err != nil {
		return fail(fmt.Errorf("diskstore: %s: %w", opts.Dir, err))
	}
	l, err := newLog(db, wal, opts, crashed)
	if err != nil {
		return fail(err)
	}
	if len(repairedTree) > 0 {
		l.repaired = strings.Join(append(repairedTree, l.repaired), "; ")
		l.repaired = strings.TrimSuffix(l.repaired, "; ")
	}
	e := &Engine{db: db, opts: opts, log: l, syncer: syncer}
	e.state = &State{db: db, log: l, items: -1}
	return e, nil
}

func withDefaults(opts Options) Options {
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
	if opts.MaxProducers <= 0 {
		opts.MaxProducers = server.DefaultMaxProducersPerThread
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
	if opts.FoldEvents <= 0 {
		opts.FoldEvents = DefaultFoldEvents
	}
	if opts.FoldBytes <= 0 {
		opts.FoldBytes = DefaultFoldBytes
	}
	if opts.FoldAge <= 0 {
		opts.FoldAge = DefaultFoldAge
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Busy == nil {
		opts.Busy = cpuBusy()
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
	return opts
}

// isEmpty reports whether db holds no key.
func isEmpty(db *pebble.DB) (bool, error) {
	it, err := db.NewIter(nil)
	if err != nil {
		return false, err
	}
	empty := !it.First()
	return empty, errors.Join(it.Error(), it.Close())
}

// commitDir is the commit log's directory under the store's (package
// commitlog).
const commitDir = "commits"

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

// ErrDamaged refuses a store whose commit log, or the tree's log, the
// disk changed: a record fails its checksum and later ones follow it (a
// crash leaves a bad record only at the end). Options.Repair opens it
// anyway.
var ErrDamaged = errors.New("diskstore: the store is damaged")

// ErrClosed ends a wait for a commit (Log.WaitSynced) when the store
// closed first.
var ErrClosed = errors.New("diskstore: the store closed")

// ErrNotAStore refuses, with Options.Existing, a directory that holds no
// store (empty, or another program's).
var ErrNotAStore = errors.New("diskstore: not a store")

// isStore reports ErrNotAStore unless dir holds a store: Pebble's options
// and manifest, and the commit log.
func isStore(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("diskstore: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrNotAStore, dir)
	}
	for _, pattern := range []string{"OPTIONS-*", "MANIFEST-*", commitDir} {
		if m, _ := filepath.Glob(filepath.Join(dir, pattern)); len(m) == 0 {
			return fmt.Errorf("%w: %s has no %s (an agentstream --data-dir has); nothing was written to it", ErrNotAStore, dir, pattern)
		}
	}
	return nil
}

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

// Stores implements server.Engine: the Log and State, and what they can
// do.
func (e *Engine) Stores() server.EngineStores {
	l, st := e.log, e.state
	return server.EngineStores{
		Log: l, State: st,
		Durable: l, Producers: l, Room: l, Synced: l, Memory: l.Memory(),
		Catalog: st, Index: st, Runs: st, Items: st, StateSynced: st,
	}
}

// Start implements server.Engine: the runs the store shows open belong
// to no process now (the last one stopped while they ran: killed, or
// crashed), so each is ended on the wire (EngineHost.EndCutRun): its
// open messages and tool calls end and its root fails, and clients that
// resume see it.
func (e *Engine) Start(h server.EngineHost) error {
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte("r/"), UpperBound: []byte("r0")})
	if err != nil {
		return err
	}
	var cut []string
	for it.First(); it.Valid(); it.Next() {
		cut = append(cut, string(it.Key()[2:]))
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return err
	}
	marked := map[string]bool{}
	for _, thread := range cut {
		marked[thread] = true
		if !h.EndCutRun(thread) {
			// Its end is in the stream after all (a mark the crash kept
			// and the commit that ended the run lost): the mark goes.
			_ = e.db.Delete(runKey(thread), pebble.NoSync)
		}
	}
	// A run whose record says it ran, with no mark: none of its events
	// reached the disk. EndCutRun finds no open run in the stream and
	// ends the record alone.
	open, err := e.state.openRunThreads()
	if err != nil {
		return err
	}
	for _, thread := range open {
		if !marked[thread] {
			h.EndCutRun(thread)
		}
	}
	e.cutRuns.Store(int64(len(cut)))
	return nil
}

// treeOptions are the tree's Pebble options (existing: open only a tree
// that is there); fresh ones for each Open, which fills them in.
func treeOptions(fs vfs.FS, existing bool) *pebble.Options {
	// Damage Pebble finds in a table is the read's error, which names
	// the file, not the process's end (its default listener calls
	// Fatalf).
	po := &pebble.Options{Logger: quiet{}, FS: fs, ErrorIfNotExists: existing,
		EventListener: &pebble.EventListener{DataCorruption: func(pebble.DataCorruptionInfo) {}}}
	// The values are compressed already (codec): Pebble's own block
	// compression would only spend CPU on them in every flush and
	// compaction.
	po.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionNone })
	po.MemTableSize = memTableBytes
	return po
}

// Repaired says what Options.Repair passed over in a damaged commit log
// ("" when nothing): where, and which commits could not be read.
func (e *Engine) Repaired() string { return e.log.repaired }

// CutRuns is how many runs Start found open in the store, and ended: the
// runs the last process was running when it stopped without closing them.
func (e *Engine) CutRuns() int { return int(e.cutRuns.Load()) }

// Close writes what is pending, folds every thread's events into its
// chunks, marks the store closed cleanly, and closes it.
func (e *Engine) Close() error {
	var err error
	e.closeOnce.Do(func() {
		e.log.close()
		err = e.log.Err()
		if err == nil {
			err = e.log.foldAll()
		}
		if err == nil {
			err = e.db.Set(cleanKey, nil, pebble.Sync)
		}
		e.log.release()
		err = errors.Join(err, e.db.Close())
		e.syncer.Close()
	})
	return err
}

// cpuBusy is Options.Busy's default: whether the process used nine tenths
// or more of the CPU time it could have had since it was last asked
// (cpuuse.Gauge, as the writers' pacer reads it).
func cpuBusy() func() bool {
	var g cpuuse.Gauge
	g.Use() // the first read: nothing to compare with yet
	return func() bool {
		use, ok := g.Use()
		return ok && use >= cpuuse.Busy
	}
}

// Check reads every key and value of the store, so that damage in any of
// its tables is found (Pebble checks each block's checksum as it reads
// it): the first damage, as an error naming the file, or nil.
func (e *Engine) Check() error { return checkTables(e.db, e.opts.Dir) }

// checkTables is Check of the tree db in dir.
func checkTables(db *pebble.DB, dir string) error {
	it, err := db.NewIter(nil)
	if err != nil {
		return fmt.Errorf("diskstore: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		if _, err := it.ValueAndErr(); err != nil {
			_ = it.Close()
			return tableDamage(dir, err)
		}
	}
	return tableDamage(dir, errors.Join(it.Error(), it.Close()))
}

// ErrTableDamaged is damage in one of the store's tables (its checksums
// do not match what is read): ErrDamaged, which repair does not mend.
var ErrTableDamaged = fmt.Errorf("%w: table", ErrDamaged)

// tableDamage is err as ErrTableDamaged, naming the file and what was
// found, when Pebble found a table damaged; err otherwise.
func tableDamage(dir string, err error) error {
	if err == nil || !pebble.IsCorruptionError(err) {
		return err
	}
	what, _, _ := strings.Cut(err.Error(), "\n")
	if m := pebbleFile.FindStringSubmatch(what); m != nil {
		what = filepath.Join(dir, m[1]+".sst") + ": " + m[2]
	}
	return fmt.Errorf("%w %s", ErrTableDamaged, what)
}

// pebbleFile finds the table a Pebble corruption error names.
var pebbleFile = regexp.MustCompile(`pebble: file (\d+): (.*)`)

// Package commitlog keeps a store's group commits in plain files of
// their own, beside the store's tree: each commit is appended to the
// current segment and synced before Append returns, and whole segments
// are released once the caller has put every commit in them somewhere
// durable (the store's chunks). A commit lives a few seconds, so it has
// no business in an LSM tree: there it was written to the tree's own
// write-ahead log, kept in its memtable, often flushed to a table and
// compacted before its deletion met it.
//
// A segment is named by the number of its first commit
// (DIR/0000000000000001.log) and holds commits with consecutive numbers,
// each framed as
//
//	length(4) crc32c(4) number(8) payload(length)
//
// with the checksum over the number and the payload, all big-endian.
// Replay reads each segment up to its first record that is cut short,
// fails its checksum or breaks the numbering: that is a commit whose
// write a crash interrupted, never synced and never acknowledged (every
// Append syncs before the next begins; a write that fails is cut off
// the file, or its segment is left for a new one), or the old contents of
// a recycled file. Released segments are recycled: the next segment is
// written over one released before, so that a sync finds the file's
// blocks allocated and its size unchanged and has only data to write.
package commitlog

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/agentstream/agentstream/diskstore/internal/aiosync"
)

// DefaultSegmentBytes is the size past which a segment is closed and the
// next commit starts a new one.
const DefaultSegmentBytes = 16 << 20

const headerBytes = 16

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Log is the commit log in one directory. Its methods are not safe for
// concurrent use (the store's writer owns it), but Bytes and Segments.
type Log struct {
	dir          string
	syncer       *aiosync.Syncer // nil: files sync with a plain fsync
	segmentBytes int64

	segs   []segment // closed segments, oldest first
	cur    *os.File  // the segment being written; nil until the next Append
	curSeg segment   // its size: the file's, which a reused file has already
	size   int64     // cur's records' bytes
	spare  []segment // released files kept to be written over
	hdr    [headerBytes]byte

	bytes    atomic.Int64 // what the files take, for Bytes
	segments atomic.Int64
}

// segment is one file's commits: first..last (last < first: none yet).
type segment struct {
	name        string
	first, last uint64
	size        int64
}

// empty reports whether the segment holds no commit.
func (s segment) empty() bool { return s.last < s.first }

// below reports whether every commit the segment holds is below n (an
// empty one: whether it starts below n).
func (s segment) below(n uint64) bool {
	if s.empty() {
		return s.first < n
	}
	return s.last < n
}

// curBelow reports whether the segment being written holds commits, all
// below n.
func (l *Log) curBelow(n uint64) bool {
	return l.cur != nil && !l.curSeg.empty() && l.curSeg.below(n)
}

// spareSuffix names a released file kept to be written over: not a
// segment, so that Open removes it instead of replaying it.
const spareSuffix = ".free"

// Open opens the commit log in dir (created if missing), with segments
// of about segmentBytes (DefaultSegmentBytes when 0). Syncs go through
// syncer when it is not nil.
func Open(dir string, syncer *aiosync.Syncer, segmentBytes int64) (*Log, error) {
	if segmentBytes <= 0 {
		segmentBytes = DefaultSegmentBytes
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("commitlog: %w", err)
	}
	l := &Log{dir: dir, syncer: syncer, segmentBytes: segmentBytes}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("commitlog: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasSuffix(name, spareSuffix) {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return nil, fmt.Errorf("commitlog: %w", err)
			}
			continue
		}
		first, ok := segmentNumber(name)
		if !ok {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return nil, fmt.Errorf("commitlog: %w", err)
		}
		l.segs = append(l.segs, segment{name: name, first: first, last: first - 1, size: info.Size()})
	}
	slices.SortFunc(l.segs, func(a, b segment) int { return cmp.Compare(a.first, b.first) })
	l.recount()
	return l, nil
}

func segmentName(first uint64) string { return fmt.Sprintf("%016x.log", first) }

func segmentNumber(name string) (uint64, bool) {
	hex, ok := strings.CutSuffix(name, ".log")
	if !ok || len(hex) != 16 {
		return 0, false
	}
	n, err := strconv.ParseUint(hex, 16, 64)
	return n, err == nil && n > 0
}

// Replay calls fn with every commit the segments hold, in order: each
// segment's records up to the first one a crash cut short. It is called
// once, after Open and before any Append.
//
// A record that fails its checksum (or is cut short) is what a crash
// leaves at the end of the last write, unless a later commit follows it
// in its segment: then the disk changed it (damage), and Replay returns a
// *DamageError naming the file and offset, before calling fn with
// anything after it.
// With repair set it goes on past the damage instead (the commits it
// cannot read are lost) and returns the damage it passed as a
// *DamageError after replaying the rest.
func (l *Log) Replay(fn func(n uint64, payload []byte) error, repair bool) error {
	var passed []Damage
	for i := range l.segs {
		s := &l.segs[i]
		b, err := os.ReadFile(filepath.Join(l.dir, s.name))
		if err != nil {
			return fmt.Errorf("commitlog: %w", err)
		}
		want, off := s.first, 0
		for {
			size, ok := record(b[off:], want)
			if !ok {
				// The end of what this segment holds, unless a later
				// commit follows in it.
				next, at, found := nextCommit(b, off, want)
				if !found {
					break
				}
				d := Damage{File: s.name, Offset: int64(off), Commit: want, Next: next}
				if !repair {
					return &DamageError{Damage: []Damage{d}}
				}
				passed = append(passed, d)
				off, want = at, next
				continue
			}
			payload := b[off+headerBytes : off+headerBytes+size]
			if err := fn(want, payload); err != nil {
				return err
			}
			s.last = want
			want++
			off += headerBytes + size
		}
	}
	if len(passed) > 0 {
		return &DamageError{Damage: passed}
	}
	return nil
}

// record returns the size of the payload of the record at the start of b
// if it is a whole record of commit want with its checksum right.
func record(b []byte, want uint64) (size int, ok bool) {
	if len(b) < headerBytes {
		return 0, false
	}
	n := binary.BigEndian.Uint64(b[8:])
	sz := binary.BigEndian.Uint32(b)
	if n != want || uint64(len(b)-headerBytes) < uint64(sz) ||
		crc32.Checksum(b[8:headerBytes+int(sz)], crcTable) != binary.BigEndian.Uint32(b[4:]) {
		return 0, false
	}
	return int(sz), true
}

// nextCommit finds the first whole record after offset off of a
// segment's bytes b that a commit above want wrote (at is its offset):
// within a segment the commits are consecutive, and each is synced before
// the next is written, so such a record means the one at off was changed
// after it was written, not cut short by a crash. found is false when
// none follows. (Across segments the numbering may jump, so a segment's
// end says nothing about the next one's start.)
func nextCommit(b []byte, off int, want uint64) (next uint64, at int, found bool) {
	for o := off + 1; o+headerBytes <= len(b); o++ {
		n := binary.BigEndian.Uint64(b[o+8:])
		if n <= want || n > want+1<<20 {
			continue // not a commit that could follow this one
		}
		if _, ok := record(b[o:], n); ok {
			return n, o, true
		}
	}
	return 0, 0, false
}

// Damage is a place in the log where the disk changed what was written:
// from the record at Offset of File (commit Commit) up to commit Next,
// the next one that can be read, the commits are lost.
type Damage struct {
	File   string
	Offset int64
	Commit uint64
	Next   uint64
}

// DamageError is the damage Replay found (or, repairing, passed).
type DamageError struct{ Damage []Damage }

func (e *DamageError) Error() string {
	var parts []string
	for _, d := range e.Damage {
		parts = append(parts, fmt.Sprintf("%s offset %d: commits %d to %d cannot be read (a checksum fails, and commit %d follows)", d.File, d.Offset, d.Commit, d.Next-1, d.Next))
	}
	return "commitlog: damaged: " + strings.Join(parts, "; ")
}

// Append writes commit n (numbers are consecutive within a segment; a
// new segment may start at any number) and syncs it. After an error the
// commit is not in the log and n may be appended again.
func (l *Log) Append(n uint64, payload []byte) error {
	if uint64(len(payload)) > 1<<32-1 {
		return fmt.Errorf("commitlog: a commit of %d bytes", len(payload))
	}
	if l.cur != nil && (n != l.curSeg.last+1 || l.size >= l.segmentBytes) {
		if err := l.closeCurrent(); err != nil {
			return err
		}
	}
	if l.cur == nil {
		if err := l.create(n); err != nil {
			return err
		}
	}
	binary.BigEndian.PutUint32(l.hdr[:], uint32(len(payload)))
	binary.BigEndian.PutUint64(l.hdr[8:], n)
	sum := crc32.Update(crc32.Checksum(l.hdr[8:], crcTable), crcTable, payload)
	binary.BigEndian.PutUint32(l.hdr[4:], sum)
	_, err := l.cur.WriteAt(l.hdr[:], l.size)
	if err == nil {
		_, err = l.cur.WriteAt(payload, l.size+headerBytes)
	}
	if err == nil {
		err = l.sync(l.cur)
	}
	if err != nil {
		// What was written may be on the disk in part: its header is
		// overwritten, so that Replay stops before it; if that fails too,
		// the file is left (its records end there) and the next commit
		// starts a new one.
		if l.cut() != nil {
			_ = l.closeCurrent()
		}
		return fmt.Errorf("commitlog: %w", err)
	}
	l.size += headerBytes + int64(len(payload))
	l.curSeg.last = n
	if l.size > l.curSeg.size {
		l.bytes.Add(l.size - l.curSeg.size)
		l.curSeg.size = l.size
	}
	return nil
}

func (l *Log) cut() error {
	var zero [headerBytes]byte
	if _, err := l.cur.WriteAt(zero[:], l.size); err != nil {
		return err
	}
	return l.sync(l.cur)
}

func (l *Log) sync(f *os.File) error {
	if l.syncer != nil {
		return l.syncer.Sync(f.Fd(), true)
	}
	return f.Sync()
}

// create starts the segment whose first commit is n, written over a
// released file when there is one (its old records carry other numbers:
// Replay stops at the first).
func (l *Log) create(n uint64) error {
	name := segmentName(n)
	path := filepath.Join(l.dir, name)
	var f *os.File
	var size int64
	if k := len(l.spare); k > 0 {
		old := filepath.Join(l.dir, l.spare[k-1].name)
		size = l.spare[k-1].size
		l.spare = l.spare[:k-1]
		err := os.Rename(old, path)
		if err == nil {
			f, err = os.OpenFile(path, os.O_RDWR, 0)
		}
		if err != nil {
			_ = os.Remove(old)
			_ = os.Remove(path)
			f, size = nil, 0
		}
	}
	if f == nil {
		var err error
		if f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o640); err != nil {
			l.recount()
			return fmt.Errorf("commitlog: %w", err)
		}
	}
	// The name is made durable before a commit is acknowledged in it.
	if err := l.syncDir(); err != nil {
		f.Close()
		_ = os.Remove(path)
		l.recount()
		return err
	}
	l.cur, l.size = f, 0
	l.curSeg = segment{name: name, first: n, last: n - 1, size: size}
	l.recount()
	return nil
}

func (l *Log) syncDir() error {
	d, err := os.Open(l.dir)
	if err != nil {
		return fmt.Errorf("commitlog: %w", err)
	}
	defer d.Close()
	if l.syncer != nil {
		err = l.syncer.Sync(d.Fd(), false)
	} else {
		err = d.Sync()
	}
	if err != nil {
		return fmt.Errorf("commitlog: %w", err)
	}
	return nil
}

// closeCurrent closes the segment being written; it joins the closed ones.
func (l *Log) closeCurrent() error {
	if l.cur == nil {
		return nil
	}
	err := l.cur.Close()
	l.cur = nil
	l.segs = append(l.segs, l.curSeg)
	l.recount()
	if err != nil {
		return fmt.Errorf("commitlog: %w", err)
	}
	return nil
}

// Release lets go of the segments whose commits are all below n: the
// caller has every one of their events elsewhere, durably. The segment
// being written goes too when it is wholly below n (the next Append
// starts a new one). One released file of a full segment's size is kept,
// to be written over.
func (l *Log) Release(n uint64) error {
	if l.curBelow(n) {
		if err := l.closeCurrent(); err != nil {
			return err
		}
	}
	var errs []error
	kept := l.segs[:0]
	for _, s := range l.segs {
		if !s.below(n) {
			kept = append(kept, s)
			continue
		}
		path := filepath.Join(l.dir, s.name)
		if len(l.spare) == 0 && s.size >= l.segmentBytes/2 {
			free := strings.TrimSuffix(s.name, ".log") + spareSuffix
			if err := os.Rename(path, filepath.Join(l.dir, free)); err == nil {
				l.spare = append(l.spare, segment{name: free, size: s.size})
				continue
			}
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	l.segs = kept
	l.recount()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("commitlog: %w", err)
	}
	return nil
}

// CanRelease reports whether Release(n) would let a segment go.
func (l *Log) CanRelease(n uint64) bool {
	if l.curBelow(n) {
		return true
	}
	for _, s := range l.segs {
		if s.below(n) {
			return true
		}
	}
	return false
}

// Clear removes every segment and spare file (the caller has all their
// commits elsewhere, durably): a store closed cleanly, or recovered.
func (l *Log) Clear() error {
	_ = l.closeCurrent()
	var errs []error
	for _, s := range append(l.spare, l.segs...) {
		if err := os.Remove(filepath.Join(l.dir, s.name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	l.segs, l.spare = nil, nil
	l.recount()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("commitlog: %w", err)
	}
	return l.syncDir()
}

func (l *Log) recount() {
	var b int64
	for _, s := range l.segs {
		b += s.size
	}
	for _, s := range l.spare {
		b += s.size
	}
	n := len(l.segs)
	if l.cur != nil {
		b += l.curSeg.size
		n++
	}
	l.bytes.Store(b)
	l.segments.Store(int64(n))
}

// Segments is how many segment files hold commits (the one being
// written included).
func (l *Log) Segments() int { return int(l.segments.Load()) }

// Bytes is what the log's files take on the disk (a released file kept
// to be written over included).
func (l *Log) Bytes() int64 { return l.bytes.Load() }

// Close closes the segment being written (its commits stay).
func (l *Log) Close() error { return l.closeCurrent() }

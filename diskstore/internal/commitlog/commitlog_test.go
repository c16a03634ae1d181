package commitlog

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentstream/agentstream/diskstore/internal/aiosync"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// commit is a commit as Replay gave it.
type commit struct {
	n       uint64
	payload string
}

func replayAll(t *testing.T, dir string, segmentBytes int64) []commit {
	t.Helper()
	l, err := Open(dir, nil, segmentBytes)
	require.NoError(t, err)
	defer l.Close()
	var out []commit
	require.NoError(t, l.Replay(func(n uint64, p []byte) error {
		out = append(out, commit{n, string(p)})
		return nil
	}, false))
	return out
}

func payload(n uint64) string {
	return fmt.Sprintf("commit %d: %s", n, strings.Repeat("x", int(n%7)*10))
}

// appendRange appends commits from..to and returns them.
func appendRange(t *testing.T, l *Log, from, to uint64) []commit {
	t.Helper()
	var out []commit
	for n := from; n <= to; n++ {
		require.NoError(t, l.Append(n, []byte(payload(n))))
		out = append(out, commit{n, payload(n)})
	}
	return out
}

func segmentFiles(t *testing.T, dir string) (segs, spares []string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		switch {
		case strings.HasSuffix(e.Name(), ".log"):
			segs = append(segs, e.Name())
		case strings.HasSuffix(e.Name(), spareSuffix):
			spares = append(spares, e.Name())
		}
	}
	return segs, spares
}

// TestReplayGivesBackEveryCommit: commits appended across several
// segments come back in order, byte for byte, after the log is closed
// and opened again; with the kernel's AIO making the syncs where there is
// one.
func TestReplayGivesBackEveryCommit(t *testing.T) {
	dir := t.TempDir()
	syncer, err := aiosync.New(0)
	if err != nil {
		syncer = nil // no AIO here: plain syncs
	}
	defer syncer.Close()
	l, err := Open(dir, syncer, 200)
	require.NoError(t, err)
	want := appendRange(t, l, 1, 40)
	require.Greater(t, l.Segments(), 3)
	segs, _ := segmentFiles(t, dir)
	require.Len(t, segs, l.Segments())
	var size int64
	for _, s := range segs {
		info, err := os.Stat(filepath.Join(dir, s))
		require.NoError(t, err)
		size += info.Size()
	}
	require.Equal(t, size, l.Bytes())
	require.NoError(t, l.Close())
	require.Equal(t, want, replayAll(t, dir, 200))
	if syncer != nil {
		async, _ := syncer.Counts()
		require.GreaterOrEqual(t, async, uint64(40), "each commit synced through AIO")
	}
}

// TestACutRecordEndsItsSegment: a record a crash cut short, or whose
// bytes changed, ends what Replay reads of its segment; the segments
// after it are read as before.
func TestACutRecordEndsItsSegment(t *testing.T) {
	for _, damage := range []string{"cut short", "a changed byte", "a zeroed header"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			l, err := Open(dir, nil, 1<<20)
			require.NoError(t, err)
			first := appendRange(t, l, 1, 5)
			require.NoError(t, l.Close())
			// A new segment begins (the numbering jumps, as after a restart).
			l, err = Open(dir, nil, 1<<20)
			require.NoError(t, err)
			second := appendRange(t, l, 100, 102)
			require.NoError(t, l.Close())

			path := filepath.Join(dir, segmentName(1))
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			last := headerBytes + len(payload(5)) // commit 5, the segment's last record
			switch damage {
			case "cut short":
				b = b[:len(b)-3]
			case "a changed byte":
				b[len(b)-1] ^= 0xff
			case "a zeroed header":
				clear(b[len(b)-last : len(b)-last+headerBytes])
			}
			require.NoError(t, os.WriteFile(path, b, 0o640))
			require.Equal(t, append(first[:4:4], second...), replayAll(t, dir, 1<<20))
		})
	}
}

// TestAReleasedSegmentIsWrittenOver: Release lets go of the segments
// wholly below its number (the one being written too, once wholly
// below); one released file is kept and becomes the next segment, whose
// old records Replay does not mistake for new ones; Open removes a kept
// file a crash left; Clear removes everything.
func TestAReleasedSegmentIsWrittenOver(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, nil, 300)
	require.NoError(t, err)
	appendRange(t, l, 1, 30)
	segs, _ := segmentFiles(t, dir)
	require.Greater(t, len(segs), 3)
	require.False(t, l.CanRelease(1), "no segment is wholly below commit 1")
	require.True(t, l.CanRelease(20))
	require.NoError(t, l.Release(20))
	left, spares := segmentFiles(t, dir)
	require.Len(t, spares, 1, "one released file kept")
	require.Less(t, len(left), len(segs))
	require.Equal(t, len(left), l.Segments())
	oldest, ok := segmentNumber(left[0])
	require.True(t, ok)
	require.LessOrEqual(t, oldest, uint64(20), "the segment holding commit 20 stays")
	require.Greater(t, oldest, uint64(1))

	// Everything below 31: the segment being written goes too; the next
	// commit starts a segment in the kept file.
	require.NoError(t, l.Release(31))
	require.Zero(t, l.Segments())
	_, spares = segmentFiles(t, dir)
	require.Len(t, spares, 1)
	require.NoError(t, l.Append(31, []byte("short")))
	segs, spares = segmentFiles(t, dir)
	require.Equal(t, []string{segmentName(31)}, segs)
	require.Empty(t, spares, "the kept file became the segment")
	info, err := os.Stat(filepath.Join(dir, segmentName(31)))
	require.NoError(t, err)
	require.Greater(t, info.Size(), int64(headerBytes+len("short")), "written over: its old bytes follow")
	require.Equal(t, info.Size(), l.Bytes())
	require.NoError(t, l.Close())
	require.Equal(t, []commit{{31, "short"}}, replayAll(t, dir, 300), "the old records after the new one are not read")

	// A kept file a crash left is removed by Open.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "0000000000000005"+spareSuffix), []byte("old"), 0o640))
	l, err = Open(dir, nil, 300)
	require.NoError(t, err)
	_, spares = segmentFiles(t, dir)
	require.Empty(t, spares)
	require.NoError(t, l.Replay(func(uint64, []byte) error { return nil }, false))
	require.NoError(t, l.Clear())
	segs, spares = segmentFiles(t, dir)
	require.Empty(t, segs)
	require.Empty(t, spares)
	require.Zero(t, l.Bytes())
	require.NoError(t, l.Close())
}

// TestAFailedAppendLeavesNoRecord: when a commit's write fails (here its
// file is gone from under it) the commit is not in the log; appended
// again, it is there once.
func TestAFailedAppendLeavesNoRecord(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, nil, 1<<20)
	require.NoError(t, err)
	want := appendRange(t, l, 1, 3)
	require.NoError(t, l.cur.Close()) // every write to it fails now
	require.Error(t, l.Append(4, []byte(payload(4))))
	want = append(want, appendRange(t, l, 4, 6)...)
	require.Equal(t, 2, l.Segments(), "the next commit started a new segment")
	require.NoError(t, l.Close())
	require.Equal(t, want, replayAll(t, dir, 1<<20))
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDamageInTheMiddleIsRefused: a record changed in the middle of a
// segment, with later commits after it, is damage, not a crash's cut:
// Replay refuses it, naming the file, the offset and the commits lost;
// repairing, it replays every commit it can read and reports what it
// passed.
func TestDamageInTheMiddleIsRefused(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, nil, 1<<20)
	require.NoError(t, err)
	all := appendRange(t, l, 1, 10)
	require.NoError(t, l.Close())
	path := filepath.Join(dir, segmentName(1))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	off := 0
	for n := uint64(1); n < 4; n++ { // the offset of commit 4
		off += headerBytes + len(payload(n))
	}
	for i := 0; i < 8; i++ {
		b[off+headerBytes+2+i] ^= 0x5a // eight bytes of commit 4's payload
	}
	require.NoError(t, os.WriteFile(path, b, 0o640))

	l, err = Open(dir, nil, 1<<20)
	require.NoError(t, err)
	var got []commit
	err = l.Replay(func(n uint64, p []byte) error { got = append(got, commit{n, string(p)}); return nil }, false)
	var damage *DamageError
	require.ErrorAs(t, err, &damage)
	require.Equal(t, []Damage{{File: segmentName(1), Offset: int64(off), Commit: 4, Next: 5}}, damage.Damage)
	require.Contains(t, err.Error(), segmentName(1)+" offset "+fmt.Sprint(off))
	require.Equal(t, all[:3], got, "nothing after the damage is replayed")
	require.NoError(t, l.Close())

	l, err = Open(dir, nil, 1<<20)
	require.NoError(t, err)
	defer l.Close()
	got = nil
	err = l.Replay(func(n uint64, p []byte) error { got = append(got, commit{n, string(p)}); return nil }, true)
	require.ErrorAs(t, err, &damage, "what was passed is reported")
	require.Equal(t, append(all[:3:3], all[4:]...), got, "every commit but the damaged one")
}

package aiosync

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newSyncer(t *testing.T, depth int) *Syncer {
	t.Helper()
	s, err := New(depth)
	require.NoError(t, err, "this kernel has native AIO (Linux 2.6+); io_setup failing means aio-max-nr is reached")
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

func writeFile(t *testing.T, dir string, size int) *os.File {
	t.Helper()
	f, err := os.CreateTemp(dir, "sync")
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	_, err = f.Write(bytes.Repeat([]byte("x"), size))
	require.NoError(t, err)
	return f
}

func TestSyncsThroughAIO(t *testing.T) {
	s := newSyncer(t, 4)
	f := writeFile(t, t.TempDir(), 4096)
	require.NoError(t, s.Sync(f.Fd(), true))
	require.NoError(t, s.Sync(f.Fd(), false))
	async, blocking := s.Counts()
	require.Equal(t, uint64(2), async)
	require.Zero(t, blocking)
}

// A descriptor the kernel refuses gets the error a plain sync would.
func TestBadDescriptor(t *testing.T) {
	s := newSyncer(t, 4)
	f := writeFile(t, t.TempDir(), 10)
	fd := f.Fd()
	require.NoError(t, f.Close())
	err := s.Sync(fd, true)
	require.ErrorIs(t, err, unix.EBADF)
	_, blocking := s.Counts()
	require.Equal(t, uint64(1), blocking)

	r, w, err := os.Pipe() // a pipe cannot be synced
	require.NoError(t, err)
	defer r.Close()
	defer w.Close()
	require.ErrorIs(t, s.Sync(w.Fd(), false), unix.EINVAL)
}

// More syncs at once than the Syncer's depth: each gets its own answer.
func TestManyAtOnce(t *testing.T) {
	s := newSyncer(t, 3)
	dir := t.TempDir()
	files := make([]*os.File, 4)
	for i := range files {
		files[i] = writeFile(t, dir, 1000)
	}
	var wg sync.WaitGroup
	errs := make([]error, 100)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Sync(files[i%len(files)].Fd(), i%2 == 0)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	async, blocking := s.Counts()
	require.Equal(t, uint64(100), async)
	require.Zero(t, blocking)
}

// After Close a sync is a blocking call, and the reaper has ended
// (TestMain checks for leaked goroutines).
func TestAfterClose(t *testing.T) {
	s, err := New(2)
	require.NoError(t, err)
	f := writeFile(t, t.TempDir(), 10)
	require.NoError(t, s.Sync(f.Fd(), true))
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	require.NoError(t, s.Sync(f.Fd(), true))
	async, blocking := s.Counts()
	require.Equal(t, [2]uint64{1, 1}, [2]uint64{async, blocking})
}

// A reaper that cannot read its completions any more (its eventfd
// gone) stops the Syncer taking syncs: they are blocking calls from then
// on, and none waits forever.
func TestReaperGone(t *testing.T) {
	s, err := New(2)
	require.NoError(t, err)
	f := writeFile(t, t.TempDir(), 10)
	require.NoError(t, s.event.Close())
	<-s.done
	require.NoError(t, s.Sync(f.Fd(), true))
	async, blocking := s.Counts()
	require.Equal(t, [2]uint64{0, 1}, [2]uint64{async, blocking})
	require.NoError(t, s.Close())
}

// The point of the package: while the disk works, the goroutine waiting
// for it is parked (in a channel receive), not in a system call holding
// its processor (a goroutine may be seen in the short io_submit call that
// hands the sync over). Megabytes written to a real disk make the sync long
// enough to be seen in flight.
func TestParkedWhileSyncing(t *testing.T) {
	dir := "/var/tmp"
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Type == unix.TMPFS_MAGIC {
		dir = t.TempDir()
	} else {
		d, err := os.MkdirTemp(dir, "aiosync")
		require.NoError(t, err)
		t.Cleanup(func() { os.RemoveAll(d) })
		dir = d
	}
	s := newSyncer(t, 4)
	seen := map[string]int{}
	buf := make([]byte, 1<<20)
	for attempt := 0; attempt < 20 && seen["chan receive"] == 0; attempt++ {
		f := writeFile(t, dir, 16<<20)
		done := make(chan error, 1)
		go func() { done <- s.Sync(f.Fd(), true) }()
	watch:
		for {
			select {
			case err := <-done:
				require.NoError(t, err)
				break watch
			default:
			}
			n := runtime.Stack(buf, true)
			for _, g := range strings.Split(string(buf[:n]), "\n\n") {
				if strings.Contains(g, "aiosync.(*Syncer).Sync(") && !strings.Contains(g, "runtime.Stack") {
					header, _, _ := strings.Cut(g, "\n")
					_, state, _ := strings.Cut(header, "[")
					state, _, _ = strings.Cut(state, "]")
					state, _, _ = strings.Cut(state, ",")
					if strings.Contains(g, "(*Syncer).blocking(") {
						state = "blocking " + state // the sync itself made in the goroutine
					}
					seen[state]++
				}
			}
			time.Sleep(50 * time.Microsecond)
		}
		require.NoError(t, f.Close())
	}
	require.Zero(t, seen["blocking syscall"], "a sync held its processor: %v", seen)
	require.Positive(t, seen["chan receive"], "no sync was seen in flight in 20 tries of 16 MiB each on %s (a disk this fast?): %v", dir, seen)
}

// A Pebble store on FS syncs through the Syncer, and what it synced is
// there after it is opened again.
func TestPebbleOnFS(t *testing.T) {
	s := newSyncer(t, 4)
	dir := t.TempDir()
	db, err := pebble.Open(filepath.Join(dir, "db"), &pebble.Options{FS: FS(vfs.Default, s), Logger: quietLogger{}})
	require.NoError(t, err)
	require.NoError(t, db.Set([]byte("k"), []byte("v"), pebble.Sync))
	require.NoError(t, db.Close())
	async, blocking := s.Counts()
	require.Positive(t, async)
	require.Zero(t, blocking)

	db, err = pebble.Open(filepath.Join(dir, "db"), &pebble.Options{FS: FS(vfs.Default, s), Logger: quietLogger{}})
	require.NoError(t, err)
	v, closer, err := db.Get([]byte("k"))
	require.NoError(t, err)
	require.Equal(t, "v", string(v))
	closer.Close()
	require.NoError(t, db.Close())
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)              {}
func (quietLogger) Errorf(string, ...any)             {}
func (quietLogger) Fatalf(format string, args ...any) { panic(format) }

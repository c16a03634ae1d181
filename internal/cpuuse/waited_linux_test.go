package cpuuse

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestWaitedSeesThreadsShareACore: two threads that spin on one core
// each wait for it while the other runs, and Waited counts it.
func TestWaitedSeesThreadsShareACore(t *testing.T) {
	var mine unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &mine))
	core := -1
	for c := range 1024 {
		if mine.IsSet(c) {
			core = c
			break
		}
	}
	require.GreaterOrEqual(t, core, 0)
	var one unix.CPUSet
	one.Set(core)

	before, ok := Waited()
	require.True(t, ok, "this machine's /proc/self/task/*/schedstat")
	spun, release := make(chan error, 2), make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			// The thread stays locked and ends with the goroutine: its
			// affinity never reaches another goroutine.
			runtime.LockOSThread()
			if err := unix.SchedSetaffinity(0, &one); err != nil {
				spun <- err
				return
			}
			for start := time.Now(); time.Since(start) < 300*time.Millisecond; {
			}
			spun <- nil
			<-release // alive while Waited reads it
		})
	}
	require.NoError(t, <-spun)
	require.NoError(t, <-spun)
	after, ok := Waited()
	close(release)
	wg.Wait()
	require.True(t, ok)
	require.GreaterOrEqual(t, after-before, 100*time.Millisecond, "two threads spinning 300 ms on one core: together they waited about that long")
	line := []byte("123 456 7\n")
	w, ok := waitOf(line)
	require.True(t, ok)
	require.Equal(t, 456*time.Nanosecond, w)
	_, ok = waitOf([]byte("123"))
	require.False(t, ok, "a short line")
}

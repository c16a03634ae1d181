package memgov

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestGCPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name                    string
		base                    int
		live, buffered, minHead int64
		want                    int
	}{
		{"no buffers: GOGC as given", 100, 400 * mib, 0, 16 * mib, 100},
		{"buffers half the heap", 100, 400 * mib, 200 * mib, 16 * mib, 50},
		{"buffers most of the heap: the rest's headroom", 100, 400 * mib, 360 * mib, 16 * mib, 10},
		{"the least headroom holds", 100, 400 * mib, 400 * mib, 16 * mib, 4},
		{"never under 1", 100, 400 * mib, 400 * mib, 1, 1},
		{"a base of 50 applies to the rest", 50, 400 * mib, 200 * mib, 16 * mib, 25},
		{"a small heap keeps its base", 100, 8 * mib, 6 * mib, 16 * mib, 100},
		{"buffers counted over the live heap are capped", 100, 100 * mib, 300 * mib, 16 * mib, 16},
		{"GOGC off stays off", -1, 400 * mib, 200 * mib, 16 * mib, -1},
		{"no heap yet", 100, 0, 0, 16 * mib, 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, GCPercent(c.base, c.live, c.buffered, c.minHead))
		})
	}
}

// TestGovernorLowersGOGCForBuffersAndPutsItBack holds a 64 MiB "buffer" on
// the heap, tells the governor so, and waits for it to lower GOGC after a
// collection; Stop puts the old GOGC back and ends its goroutine.
func TestGovernorLowersGOGCForBuffersAndPutsItBack(t *testing.T) {
	defer goleak.VerifyNone(t)
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)

	buffers := make([][]byte, 64)
	for i := range buffers {
		buffers[i] = make([]byte, 1<<20)
	}
	g := Start(func() int64 { return 64 << 20 }, Options{Interval: 5 * time.Millisecond, MinHeadroom: 4 << 20})
	require.Equal(t, 100, g.Percent())
	require.Eventually(t, func() bool {
		runtime.GC()
		return g.Percent() < 100
	}, 10*time.Second, 20*time.Millisecond)
	p := g.Percent()
	require.Equal(t, p, debug.SetGCPercent(p), "GOGC is what the governor says")
	runtime.KeepAlive(buffers)

	g.Stop()
	g.Stop() // a second Stop is harmless
	require.Equal(t, 100, debug.SetGCPercent(100), "Stop put the old GOGC back")
}

func TestGovernorLeavesGOGCOffAlone(t *testing.T) {
	defer goleak.VerifyNone(t)
	old := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(old)
	g := Start(func() int64 { return 1 << 30 }, Options{Interval: time.Millisecond})
	runtime.GC()
	time.Sleep(20 * time.Millisecond)
	defer g.Stop()
	require.Equal(t, -1, g.Percent(), "off")
	g.Stop()
	require.Equal(t, -1, debug.SetGCPercent(-1), "still off")
}

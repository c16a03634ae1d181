package memgov

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
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
		churn                   int64
		want                    int
	}{
		{"no buffers: GOGC as given", 100, 400 * mib, 0, 16 * mib, -1, 100},
		{"buffers half the heap", 100, 400 * mib, 200 * mib, 16 * mib, -1, 50},
		{"buffers most of the heap: the rest's headroom", 100, 400 * mib, 360 * mib, 16 * mib, -1, 10},
		{"the least headroom holds", 100, 400 * mib, 400 * mib, 16 * mib, -1, 4},
		{"never under 1", 100, 400 * mib, 400 * mib, 1, -1, 1},
		{"a base of 50 applies to the rest", 50, 400 * mib, 200 * mib, 16 * mib, -1, 25},
		{"a small heap keeps its base", 100, 8 * mib, 6 * mib, 16 * mib, -1, 100},
		{"buffers counted over the live heap are capped", 100, 100 * mib, 300 * mib, 16 * mib, -1, 16},
		{"GOGC off stays off", -1, 400 * mib, 200 * mib, 16 * mib, 0, -1},
		{"no heap yet", 100, 0, 0, 16 * mib, 0, 100},
		{"allocating more than GOGC's headroom: GOGC's", 100, 400 * mib, 0, 16 * mib, 1000 * mib, 100},
		{"allocating less: the headroom is what was allocated", 100, 400 * mib, 0, 16 * mib, 100 * mib, 25},
		{"hardly allocating (idle connections): the least headroom", 100, 400 * mib, 0, 16 * mib, 1 * mib, 4},
		{"nothing allocated in the window", 100, 400 * mib, 200 * mib, 16 * mib, 0, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, GCPercent(c.base, c.live, c.buffered, c.minHead, c.churn))
		})
	}
}

// TestGovernorLowersGOGCForBuffersAndPutsItBack holds a 64 MiB "buffer" on
// the heap, tells the governor so, and waits for it to lower GOGC after a
// collection; Stop puts the old GOGC back and ends its goroutine.
func TestGovernorLowersGOGCForBuffersAndPutsItBack(t *testing.T) {
	defer goleak.VerifyNone(t)
	buffers := liveMiB(t, 64)
	g := Start(&fakeBuffers{held: 64 << 20, limit: 1 << 30}, Options{Interval: 5 * time.Millisecond, MinHeadroom: 4 << 20})
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
	g := Start(&fakeBuffers{held: 1 << 30, limit: 1 << 30}, Options{Interval: time.Millisecond})
	runtime.GC()
	time.Sleep(20 * time.Millisecond)
	defer g.Stop()
	require.Equal(t, -1, g.Percent(), "off")
	g.Stop()
	require.Equal(t, -1, debug.SetGCPercent(-1), "still off")
}

// fakeBuffers stands for a server's replay buffers.
type fakeBuffers struct {
	mu          sync.Mutex
	held, limit int64
}

func (f *fakeBuffers) Used() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return min(f.held, f.limit)
}

func (f *fakeBuffers) TotalBytes() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.limit
}

func (f *fakeBuffers) SetTotalBytes(n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limit = n
}

func TestBufferLimit(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name                                string
		target, budget, cur, need, buffered int64
		want                                int64
	}{
		{"within the target: unchanged", 256 * mib, 256 * mib, 256 * mib, 250 * mib, 200 * mib, 256 * mib},
		{"over: the buffers give what passes it", 256 * mib, 256 * mib, 256 * mib, 300 * mib, 200 * mib, 156 * mib},
		{"over, buffers under their limit: from what they hold", 256 * mib, 256 * mib, 200 * mib, 300 * mib, 150 * mib, 106 * mib},
		{"never under a 64th of the budget", 256 * mib, 256 * mib, 256 * mib, 900 * mib, 200 * mib, 4 * mib},
		{"room: half of it back", 256 * mib, 256 * mib, 100 * mib, 156 * mib, 90 * mib, 150 * mib},
		{"little room: unchanged", 256 * mib, 256 * mib, 100 * mib, 250 * mib, 90 * mib, 100 * mib},
		{"never above the budget", 256 * mib, 128 * mib, 120 * mib, 10 * mib, 90 * mib, 128 * mib},
		{"a tiny budget never becomes 0 (none)", 256 * mib, 10, 10, 900 * mib, 10, 1},
		{"no budget: left alone", 256 * mib, 0, 0, 900 * mib, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, BufferLimit(c.target, c.budget, c.cur, c.need, c.buffered))
		})
	}
}

// TestGovernorHoldsTheTarget: with 96 MiB held on the heap for "buffers"
// and a target of 64 MiB, the governor lowers the buffers' budget, and the
// soft memory limit is the target; once that memory is let go, the budget
// comes back up; Stop puts back the limit and the budget.
func TestGovernorHoldsTheTarget(t *testing.T) {
	defer goleak.VerifyNone(t)
	oldLimit := debug.SetMemoryLimit(-1)
	held := liveMiB(t, 96)
	b := &fakeBuffers{held: 96 << 20, limit: 128 << 20}
	g := Start(b, Options{Interval: 5 * time.Millisecond, MinHeadroom: 4 << 20, Target: 64 << 20})
	defer g.Stop()
	require.Equal(t, int64(64<<20), debug.SetMemoryLimit(-1))
	require.Eventually(t, func() bool {
		runtime.GC()
		return b.TotalBytes() < 64<<20
	}, 10*time.Second, 20*time.Millisecond, "the budget comes down")
	low := b.TotalBytes()
	runtime.KeepAlive(held)

	held = nil
	b.mu.Lock()
	b.held = 0
	b.mu.Unlock()
	require.Eventually(t, func() bool {
		runtime.GC()
		return b.TotalBytes() > low
	}, 10*time.Second, 20*time.Millisecond, "with room again, the budget goes back up")

	g.Stop()
	require.Equal(t, oldLimit, debug.SetMemoryLimit(-1), "Stop put the limit back")
	require.Equal(t, int64(128<<20), b.TotalBytes(), "and the budget")
}

var sink []byte

// liveMiB sets GOGC to 100 for the test (put back after it) and returns
// n MiB for it to keep live (runtime.KeepAlive).
func liveMiB(t *testing.T, n int) [][]byte {
	old := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(old) })
	held := make([][]byte, n)
	for i := range held {
		held[i] = make([]byte, 1<<20)
	}
	return held
}

// TestGovernorKeepsLittleHeadroomWhenLittleIsAllocated: with 64 MiB live
// (none of it buffers) and nothing allocated over the churn window, the
// headroom is the least one (GOGC about 4 MiB over 64); allocating fast
// brings GOGC's own back.
func TestGovernorKeepsLittleHeadroomWhenLittleIsAllocated(t *testing.T) {
	defer goleak.VerifyNone(t)
	held := liveMiB(t, 64)
	g := Start(&fakeBuffers{limit: 1 << 30}, Options{Interval: 5 * time.Millisecond, MinHeadroom: 4 << 20, ChurnWindow: 100 * time.Millisecond})
	defer g.Stop()
	runtime.GC()
	require.Eventually(t, func() bool { return g.Percent() <= 10 }, 10*time.Second, 10*time.Millisecond,
		"idle: about the least headroom over the live heap (GOGC %d)", g.Percent())

	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				sink = make([]byte, 1<<20)
			}
		}
	}()
	require.Eventually(t, func() bool { return g.Percent() == 100 }, 10*time.Second, 10*time.Millisecond,
		"allocating fast: GOGC's headroom (GOGC %d)", g.Percent())
	close(stop)
	<-done
	runtime.KeepAlive(held)
}

func TestQuietCollect(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		recent, freeable, live int64
		want                   bool
	}{
		{recent: 0, freeable: 100 * mib, live: 100 * mib, want: true},
		{recent: -1, freeable: 100 * mib, live: 100 * mib, want: false},  // not known yet
		{recent: mib, freeable: 100 * mib, live: 100 * mib, want: false}, // allocating: the runtime collects by itself
		{recent: 0, freeable: 10 * mib, live: 10 * mib, want: false},     // less than MinHeadroom to free
		{recent: 0, freeable: 20 * mib, live: 100 * mib, want: false},    // less than a quarter of the live heap
		{recent: 0, freeable: 26 * mib, live: 100 * mib, want: true},     // more than both
		{recent: mib/16 - 1, freeable: 17 * mib, live: 0, want: true},    // under a sixteenth of MinHeadroom
	} {
		require.Equal(t, c.want, QuietCollect(c.recent, c.freeable, c.live, 16*mib), "%+v", c)
	}
}

// TestGovernorCollectsAQuietProcess: a burst of goroutines ends, and the
// process goes quiet; the runtime keeps the stacks of ended goroutines
// for new ones until a collection. The Governor collects once, which
// gives them back, and not again while there is nothing to free.
func TestGovernorCollectsAQuietProcess(t *testing.T) {
	defer goleak.VerifyNone(t)
	// A live heap whose headroom the goroutines' own allocations do not
	// fill: no collection comes by itself.
	held := liveMiB(t, 32)
	defer runtime.KeepAlive(held)
	runtime.GC()
	g := Start(&fakeBuffers{limit: 1 << 30}, Options{Interval: 10 * time.Millisecond, MinHeadroom: 4 << 20, ChurnWindow: 2 * time.Second})
	defer g.Stop()

	release := make(chan struct{})
	var started, wg sync.WaitGroup
	for range 6000 { // under the race detector's 8,128
		started.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			started.Done()
			<-release
		}()
	}
	started.Wait()
	stacks := []metrics.Sample{{Name: "/memory/classes/heap/stacks:bytes"}}
	metrics.Read(stacks)
	grown := stacks[0].Value.Uint64()
	require.Greater(t, grown, uint64(10<<20))
	close(release)
	wg.Wait()

	require.Eventually(t, func() bool { return g.QuietCollections() == 1 }, 10*time.Second, 10*time.Millisecond, "a quiet process is collected")
	metrics.Read(stacks)
	require.Less(t, stacks[0].Value.Uint64(), grown/4, "and the stacks are given back")
	time.Sleep(2500 * time.Millisecond) // more than a ChurnWindow
	require.EqualValues(t, 1, g.QuietCollections(), "nothing more to free: no more collections")
}

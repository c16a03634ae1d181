package pace

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// conn is a connection whose events are counted: write takes all queued
// (writes counts those that carried any).
type conn struct {
	queued  atomic.Int64
	writes  atomic.Int64
	written atomic.Int64
	fail    atomic.Bool
	block   chan struct{} // when set, write waits on it
	busy    atomic.Int32  // writes under way, to catch overlap
	overlap atomic.Bool
}

func (c *conn) write() bool {
	if c.busy.Add(1) > 1 {
		c.overlap.Store(true)
	}
	defer c.busy.Add(-1)
	if c.block != nil {
		<-c.block
	}
	// A kick that lands just after the run it would have joined ended
	// finds nothing left: an empty write, not counted.
	if n := c.queued.Swap(0); n > 0 {
		c.writes.Add(1)
		c.written.Add(n)
	}
	return !c.fail.Load()
}

func (c *conn) pending() bool { return c.queued.Load() > 0 }

func (c *conn) publish(w *Writer, n int) {
	for range n {
		c.queued.Add(1)
		w.Kick()
	}
}

func TestQuietConnectionWritesAtOnce(t *testing.T) {
	p := New(time.Hour) // a release would never come in time
	c := &conn{}
	w := p.NewWriter(c.write, c.pending)
	c.publish(w, 1)
	require.Eventually(t, func() bool { return c.written.Load() == 1 }, 5*time.Second, time.Millisecond)
	w.Stop()
}

func TestBusyConnectionWaitsAndGathers(t *testing.T) {
	p := New(100 * time.Millisecond)
	c := &conn{}
	w := p.NewWriter(c.write, c.pending)
	c.publish(w, 1)
	require.Eventually(t, func() bool { return c.written.Load() == 1 }, 5*time.Second, time.Millisecond)
	// Within the interval of that write: these wait, and leave together.
	c.publish(w, 50)
	require.Eventually(t, func() bool { return c.written.Load() == 51 }, 5*time.Second, time.Millisecond)
	w.Stop()
	assert.LessOrEqual(t, c.writes.Load(), int64(3), "50 events in far fewer writes")
	assert.False(t, c.overlap.Load())
}

// TestKicksThatWaitAreCounted: what the interval's adaptation reads to
// know whether writes are being gathered.
func TestKicksThatWaitAreCounted(t *testing.T) {
	p := New(time.Hour)
	p.adapted.Store(int64(time.Hour)) // no adaptation (which resets the counts) during the test
	c := &conn{}
	w := p.NewWriter(c.write, c.pending)
	c.publish(w, 1)
	require.Eventually(t, func() bool { return c.written.Load() == 1 }, 5*time.Second, time.Millisecond)
	c.publish(w, 3) // the first waits for the interval, the others find it waiting
	p.mu.Lock()
	waited := p.waited
	p.mu.Unlock()
	assert.Equal(t, [2]uint64{2, 1}, [2]uint64{p.kicks.Load(), waited}, "kicks that reached the pacer, and those that waited")
	w.Stop()
	p.mu.Lock()
	p.timer.Stop()
	p.mu.Unlock()
}

func TestNoPacing(t *testing.T) {
	p := New(0)
	c := &conn{}
	w := p.NewWriter(c.write, c.pending)
	for i := 1; i <= 20; i++ {
		c.publish(w, 1)
		require.Eventually(t, func() bool { return c.written.Load() == int64(i) }, 5*time.Second, time.Millisecond)
	}
	w.Stop()
	assert.Equal(t, int64(20), c.writes.Load(), "every event written as it came")
}

func TestEventsDuringAWriteAreWritten(t *testing.T) {
	p := New(time.Millisecond)
	c := &conn{block: make(chan struct{})}
	w := p.NewWriter(c.write, c.pending)
	c.publish(w, 1) // the write starts and blocks
	require.Eventually(t, func() bool { return c.busy.Load() == 1 }, 5*time.Second, time.Millisecond)
	c.publish(w, 5) // absorbed by the running write
	close(c.block)
	require.Eventually(t, func() bool { return c.written.Load() == 6 }, 5*time.Second, time.Millisecond)
	w.Stop()
	assert.False(t, c.overlap.Load())
}

func TestStopWaitsAndEnds(t *testing.T) {
	p := New(time.Millisecond)
	c := &conn{block: make(chan struct{})}
	w := p.NewWriter(c.write, c.pending)
	c.publish(w, 1)
	require.Eventually(t, func() bool { return c.busy.Load() == 1 }, 5*time.Second, time.Millisecond)
	stopped := make(chan struct{})
	go func() { w.Stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Stop returned while a write was under way")
	case <-time.After(20 * time.Millisecond):
	}
	close(c.block)
	<-stopped
	n := c.writes.Load()
	c.publish(w, 3)
	time.Sleep(20 * time.Millisecond) // a release, if one were (wrongly) queued
	assert.Equal(t, n, c.writes.Load(), "no write after Stop")
}

func TestFailedWriteStopsTheWriter(t *testing.T) {
	p := New(0)
	c := &conn{}
	c.fail.Store(true)
	w := p.NewWriter(c.write, c.pending)
	c.publish(w, 1)
	require.Eventually(t, func() bool { return c.writes.Load() == 1 }, 5*time.Second, time.Millisecond)
	w.Stop() // wait for the run to finish
	c.publish(w, 3)
	w.Stop()
	assert.Equal(t, int64(1), c.writes.Load())
}

func TestManyWritersOnePacer(t *testing.T) {
	p := New(2 * time.Millisecond)
	const n = 200
	conns := make([]*conn, n)
	writers := make([]*Writer, n)
	for i := range conns {
		conns[i] = &conn{}
		writers[i] = p.NewWriter(conns[i].write, conns[i].pending)
	}
	var wg sync.WaitGroup
	for round := 0; round < 50; round++ {
		wg.Add(n)
		for i := range conns {
			go func() { defer wg.Done(); conns[i].publish(writers[i], 1) }()
		}
		wg.Wait()
	}
	for i := range conns {
		require.Eventually(t, func() bool { return conns[i].written.Load() == 50 }, 5*time.Second, time.Millisecond)
		writers[i].Stop()
		assert.False(t, conns[i].overlap.Load())
	}
}

func TestBuffers(t *testing.T) {
	b := GetBuffer()
	assert.Empty(t, *b)
	*b = append(*b, "x"...)
	PutBuffer(b)
	big := GetBuffer()
	*big = make([]byte, 0, 2<<20)
	PutBuffer(big) // dropped, not kept
	assert.Empty(t, *GetBuffer())
}

func TestHoldGathersWhatArrivesDuringIt(t *testing.T) {
	p := New(20 * time.Millisecond)
	c := &conn{}
	w := p.NewWriter(c.write, c.pending)
	w.Hold()
	c.publish(w, 3) // a quiet connection would write at once: held, it waits
	time.Sleep(5 * time.Millisecond)
	c.publish(w, 2)
	require.Eventually(t, func() bool { return c.written.Load() == 5 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, int64(1), c.writes.Load(), "one write after the hold")
	w.Stop()
}

func TestHoldGoesOnWhileBusyUpToItsBound(t *testing.T) {
	p := New(5 * time.Millisecond)
	c := &conn{}
	w := p.NewWriter(c.write, c.pending)
	var busy atomic.Bool
	var asked atomic.Int32
	busy.Store(true)
	w.SetHoldWhile(func() bool { asked.Add(1); return busy.Load() })
	w.Hold()
	c.publish(w, 1)
	require.Eventually(t, func() bool { return asked.Load() >= 3 }, 5*time.Second, time.Millisecond)
	assert.Zero(t, c.written.Load(), "held while busy")
	busy.Store(false)
	require.Eventually(t, func() bool { return c.written.Load() == 1 }, 5*time.Second, time.Millisecond)
	// Busy for ever: the hold ends after MaxHoldIntervals all the same.
	busy.Store(true)
	time.Sleep(10 * time.Millisecond)
	asked.Store(0)
	w.Hold()
	c.publish(w, 1)
	require.Eventually(t, func() bool { return c.written.Load() == 2 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, int32(MaxHoldIntervals-1), asked.Load(), "asked at the end of every interval but the last")
	w.Stop()
}

// TestIntervalAdaptsToCPUUse: a process using all its CPU and behind
// doubles the interval up to MaxInterval; one with CPU to spare brings it
// back to the configured one; one that keeps up keeps it, however busy.
func TestIntervalAdaptsToCPUUse(t *testing.T) {
	windows := func(p *Pacer, n int, use float64, behind bool) {
		for range n {
			p.setFrom(use, behind)
		}
	}
	p := New(5 * time.Millisecond)
	require.Equal(t, 5*time.Millisecond, p.Current())
	windows(p, overloadWindows, 0.5, true)
	windows(p, 2, 1, true)
	require.Equal(t, 5*time.Millisecond, p.Current(), "a burst is not overload")

	p = New(5 * time.Millisecond)
	windows(p, overloadWindows-1, 1, false)
	require.Equal(t, 5*time.Millisecond, p.Current(), "busy but keeping up: a longer interval would only delay events")
	windows(p, 1, 1, false)
	require.Equal(t, 10*time.Millisecond, p.Current(), "at the limit for a second: overload, doubled without other signs")

	p = New(5 * time.Millisecond)
	windows(p, overloadWindows-1, 1, false)
	windows(p, 1, 0.75, false)
	require.Equal(t, 10*time.Millisecond, p.Current(), "a second at the limit on average, one window under it: overload still")
	windows(p, 1, 1, false)
	require.Equal(t, 20*time.Millisecond, p.Current(), "paced up already: busy is enough")

	p = New(5 * time.Millisecond)
	windows(p, busyWindows-1, 1, true)
	require.Equal(t, 5*time.Millisecond, p.Current())
	windows(p, 1, 1, true)
	require.Equal(t, 10*time.Millisecond, p.Current(), "busy for windows on end, and behind: doubled")
	windows(p, 30, 1, true)
	require.Equal(t, MaxInterval, p.Current(), "behind: the interval grows to its bound, and no further")
	windows(p, 1, 0.8, false)
	require.Equal(t, MaxInterval, p.Current(), "one window under the limit while busy on average: nothing changes")
	windows(p, 1, 0.75, false)
	require.Equal(t, MaxInterval/2, p.Current(), "between the thresholds on average and keeping up: halved")
	windows(p, 1, 0.75, true)
	require.Equal(t, MaxInterval/2, p.Current(), "between the thresholds and still behind: nothing changes")
	windows(p, 10, 0.1, true)
	require.Equal(t, 5*time.Millisecond, p.Current(), "CPU to spare: back to the configured interval, and no lower")
	windows(p, 30, 1, true)
	windows(p, 1, 0.3, false)
	require.Equal(t, MaxInterval/2, p.Current(), "one window with CPU to spare halves at once")
	off := New(Off)
	off.mu.Lock()
	off.adapt()
	off.mu.Unlock()
	require.Zero(t, off.Current(), "pacing off stays off")

	// After a quiet while, a kick finds the interval back where it was set.
	for range 30 {
		p.setFrom(1, true)
	}
	p.cpu.Use()                // the gauge's first read, then a quiet
	time.Sleep(2 * adaptEvery) // while (the process sleeps)
	p.adapted.Store(int64(p.now() - 20*adaptEvery))
	w := p.NewWriter(func() bool { return true }, func() bool { return false })
	w.Kick()
	w.Stop()
	require.Equal(t, 5*time.Millisecond, p.Current(), "a quiet process resets the interval")
	windows(p, busyWindows-1, 1, true)
	require.Equal(t, 5*time.Millisecond, p.Current(), "and forgets the busy windows before the quiet")
}

// TestIntervalKeepsTheOneThatCarriesTheLoad: a node that keeps up at an
// interval runs below the busy mark there, so the interval halves; busy
// again at once at half, it doubles back, and then stays: for floorFor
// windows it does not go below the interval that carried the load, while
// windows with CPU to spare come and go; afterwards it may halve again.
func TestIntervalKeepsTheOneThatCarriesTheLoad(t *testing.T) {
	p := New(5 * time.Millisecond)
	window := func(use float64, behind bool) time.Duration {
		p.setFrom(use, behind)
		return p.Current()
	}
	for p.Current() < 80*time.Millisecond {
		window(1, true)
	}
	require.Equal(t, 80*time.Millisecond, p.Current())
	require.Equal(t, 40*time.Millisecond, window(0.5, false), "a window with CPU to spare: halved")
	window(1, true)
	window(1, true)
	require.Equal(t, 80*time.Millisecond, window(1, true), "busy again at once at half: doubled back")
	for i := range floorFor - 1 {
		require.Equal(t, 80*time.Millisecond, window(0.5, false), "window %d: not below the interval that carried the load", i)
	}
	require.Equal(t, 40*time.Millisecond, window(0.5, false), "the floor lasts floorFor windows")

	// A halving that holds (no doubling soon after) sets no floor.
	q := New(5 * time.Millisecond)
	for q.Current() < 80*time.Millisecond {
		q.setFrom(1, true)
	}
	q.setFrom(0.5, false)
	for range floorAfter + 1 {
		q.setFrom(0.8, false)
	}
	require.Equal(t, 5*time.Millisecond, q.Current(), "halved step by step while it keeps up")
}

// TestSchedGaugeSeesGoroutinesWaiting: on one processor, goroutines that
// each hold it for 2 ms make the others wait to run; the gauge's 99th
// percentile shows it (and reads nothing at its first read).
func TestSchedGaugeSeesGoroutinesWaiting(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var g schedGauge
	require.Zero(t, g.p99(), "the first read has nothing to compare with")
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for start := time.Now(); time.Since(start) < 2*time.Millisecond; {
			}
		}()
	}
	wg.Wait()
	require.GreaterOrEqual(t, g.p99(), 5*time.Millisecond, "20 goroutines of 2 ms each on one processor: the last waited over 30 ms")
}

// BenchmarkKickAndWrite is one connection's write cycle, pacing off: a
// kick, the writer running, the write, one event after another.
func BenchmarkKickAndWrite(b *testing.B) {
	p := New(Off)
	var queued atomic.Int64
	wrote := make(chan struct{}, 1)
	w := p.NewWriter(func() bool {
		if queued.Swap(0) > 0 {
			wrote <- struct{}{}
		}
		return true
	}, func() bool { return queued.Load() > 0 })
	defer w.Stop()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		queued.Add(1)
		w.Kick()
		<-wrote
	}
}

// TestHoldRunEndHoldsLonger: a replay that holds a run's end is held for
// RunEndHold, even with an interval of 1 ms and nothing left to read, and
// what arrives meanwhile leaves with it; it lengthens a short hold under
// way.
func TestHoldRunEndHoldsLonger(t *testing.T) {
	p := New(time.Millisecond)
	c := &conn{}
	w := p.NewWriter(c.write, c.pending)
	start := time.Now()
	w.Hold()
	w.HoldRunEnd()
	c.publish(w, 2)
	time.Sleep(10 * time.Millisecond) // ten intervals: a plain Hold would have ended
	c.publish(w, 1)
	require.Eventually(t, func() bool { return c.written.Load() == 3 }, 5*time.Second, time.Millisecond)
	assert.GreaterOrEqual(t, time.Since(start), RunEndHold, "held for RunEndHold at least")
	assert.Equal(t, int64(1), c.writes.Load(), "one write after the hold")
	w.Stop()
}

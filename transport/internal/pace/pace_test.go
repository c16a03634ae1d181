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

// TestIntervalAdaptsAtTheConfiguredOne: at the configured interval, a
// process using all its CPU and behind doubles it; one that keeps up
// keeps it, however busy, unless at its limit for a second.
func TestIntervalAdaptsAtTheConfiguredOne(t *testing.T) {
	windows := func(p *Pacer, n int, w window) {
		for range n {
			p.setFrom(w)
		}
	}
	p := New(5 * time.Millisecond)
	require.Equal(t, 5*time.Millisecond, p.Current())
	windows(p, overloadWindows, window{use: 0.5, behind: true})
	windows(p, 2, window{use: 1, behind: true})
	require.Equal(t, 5*time.Millisecond, p.Current(), "a burst is not overload")

	p = New(5 * time.Millisecond)
	windows(p, overloadWindows-1, window{use: 1})
	require.Equal(t, 5*time.Millisecond, p.Current(), "busy but keeping up: a longer interval would only delay events")
	windows(p, 1, window{use: 1})
	require.Equal(t, 10*time.Millisecond, p.Current(), "at the limit for a second: overload, doubled without other signs")

	p = New(5 * time.Millisecond)
	windows(p, overloadWindows-1, window{use: 1})
	windows(p, 1, window{use: 0.75})
	require.Equal(t, 10*time.Millisecond, p.Current(), "a second at the limit on average, one window under it: overload still")

	p = New(5 * time.Millisecond)
	windows(p, busyWindows-1, window{use: 1, behind: true})
	require.Equal(t, 5*time.Millisecond, p.Current())
	windows(p, 1, window{use: 1, behind: true})
	require.Equal(t, 10*time.Millisecond, p.Current(), "busy for windows on end, and behind: doubled")

	off := New(Off)
	off.mu.Lock()
	off.adapt()
	off.mu.Unlock()
	require.Zero(t, off.Current(), "pacing off stays off")

	// After a quiet while, a kick finds the interval back where it was set.
	windows(p, 40, window{use: 1, sparse: true})
	require.Equal(t, MaxInterval, p.Current())
	p.cpu.Use()                // the gauge's first read, then a quiet
	time.Sleep(2 * adaptEvery) // while (the process sleeps)
	p.adapted.Store(int64(p.now() - 20*adaptEvery))
	w := p.NewWriter(func() bool { return true }, func() bool { return false })
	w.Kick()
	w.Stop()
	require.Equal(t, 5*time.Millisecond, p.Current(), "a quiet process resets the interval")
	windows(p, busyWindows-1, window{use: 1, behind: true})
	require.Equal(t, 5*time.Millisecond, p.Current(), "and forgets the busy windows before the quiet")
}

// TestIntervalAboveTheConfiguredOne: above the configured interval, a
// busy process doubles it only on two windows in a row of writes that
// gather next to nothing, or of goroutines waiting half an interval to
// run; busy, gathering and on time, it keeps it, however busy; it halves
// it when the halved interval would fit in the CPU; and each interval
// lasts settleWindows windows at least.
func TestIntervalAboveTheConfiguredOne(t *testing.T) {
	p := New(5 * time.Millisecond)
	step := func(w window) time.Duration {
		p.setFrom(w)
		return p.Current()
	}
	carrying := window{use: 1, behind: true, batch: 1.6, writes: 0.5}
	for range busyWindows {
		step(window{use: 1, behind: true})
	}
	require.Equal(t, 10*time.Millisecond, p.Current())
	require.Equal(t, 10*time.Millisecond, step(window{use: 1, sparse: true}), "the first window at an interval drains the one before: not a sign")
	require.Equal(t, 10*time.Millisecond, step(window{use: 1, sparse: true}), "one window of a sign is not enough")
	require.Equal(t, 20*time.Millisecond, step(window{use: 1, sparse: true}), "two in a row, busy: writes gather nothing, doubled")
	step(window{use: 1})
	step(window{use: 1, late: true})
	require.Equal(t, 40*time.Millisecond, step(window{use: 1, late: true}), "goroutines wait half an interval, two windows in a row: doubled")
	for i := range 50 {
		require.Equal(t, 40*time.Millisecond, step(carrying), "window %d: busy, gathering, on time: the load is carried", i)
	}
	quiet := window{use: 0.7, sparse: true, batch: 1.6, writes: 0.5}
	step(quiet)
	require.Equal(t, 40*time.Millisecond, step(quiet), "not busy: a sign alone does not double")

	// Halving: when the halved interval fits, by halvedUse.
	q := New(5 * time.Millisecond)
	for q.Current() < 160*time.Millisecond {
		q.setFrom(window{use: 1, sparse: true})
	}
	wide := window{use: 0.7, batch: 3.2, writes: 0.5}
	for range 10 {
		q.setFrom(wide)
	}
	require.Equal(t, 160*time.Millisecond, q.Current(), "0.7 of the CPU, writes 0.5 of it, halved: 1.2, does not fit")
	fits := window{use: 0.7, batch: 3.2, writes: 0.2}
	q.setFrom(fits)
	require.Equal(t, 80*time.Millisecond, q.Current(), "0.7 + 0.2: fits, halved")
	q.setFrom(fits)
	q.setFrom(fits)
	require.Equal(t, 80*time.Millisecond, q.Current(), "an interval lasts settleWindows windows at least")
	q.setFrom(window{use: 0.3, batch: 1, writes: 0.3, late: true})
	require.Equal(t, 80*time.Millisecond, q.Current(), "goroutines waiting: not halved, however idle")
	q.setFrom(window{use: 0.3, batch: 1, writes: 0.3})
	require.Equal(t, 40*time.Millisecond, q.Current(), "one event a write: halving adds no write, it fits")
}

func TestHalvedUse(t *testing.T) {
	assert.InDelta(t, 1.0, halvedUse(0.6, window{batch: 4, writes: 0.4}), 1e-9, "every write becomes two")
	assert.InDelta(t, 0.8, halvedUse(0.6, window{batch: 1.5, writes: 0.4}), 1e-9, "half the writes become two")
	assert.InDelta(t, 0.6, halvedUse(0.6, window{batch: 1, writes: 0.4}), 1e-9, "one event a write: as many writes")
	assert.InDelta(t, 0.6, halvedUse(0.6, window{}), 1e-9, "no writes")
}

// TestIntervalKeepsTheOneThatCarriesTheLoad: when a halving is undone
// within floorAfter windows, the interval does not go below the one that
// carried the load for floorFor windows, however much the halved one
// seems to fit; afterwards it may halve again.
func TestIntervalKeepsTheOneThatCarriesTheLoad(t *testing.T) {
	p := New(5 * time.Millisecond)
	step := func(w window) time.Duration {
		p.setFrom(w)
		return p.Current()
	}
	for p.Current() < 80*time.Millisecond {
		step(window{use: 1, sparse: true})
	}
	fits := window{use: 0.5, batch: 1.6, writes: 0.2}
	step(fits)
	step(fits)
	require.Equal(t, 40*time.Millisecond, step(fits), "fits at half: halved")
	step(window{use: 1, sparse: true})
	step(window{use: 1, sparse: true})
	require.Equal(t, 80*time.Millisecond, step(window{use: 1, sparse: true}), "at half, writes gather nothing: doubled back")
	for i := range floorFor - 1 {
		require.Equal(t, 80*time.Millisecond, step(fits), "window %d: not below the interval that carried the load", i)
	}
	require.Equal(t, 40*time.Millisecond, step(fits), "the floor lasts floorFor windows")

	// A halving that holds (no doubling soon after) sets no floor.
	q := New(5 * time.Millisecond)
	for q.Current() < 80*time.Millisecond {
		q.setFrom(window{use: 1, sparse: true})
	}
	for range 3 * settleWindows {
		q.setFrom(fits)
	}
	require.Equal(t, 10*time.Millisecond, q.Current(), "halved step by step while the halved one fits")
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

// TestEachWriterWaitsForItsOwnInterval: two connections that wrote an
// interval's half apart, kicked together, are released each when its own
// interval ends, not together; neither writes twice within its interval.
func TestEachWriterWaitsForItsOwnInterval(t *testing.T) {
	const interval = 400 * time.Millisecond
	p := New(interval)
	p.adapted.Store(int64(time.Hour)) // no adaptation during the test
	var mu sync.Mutex
	wrote := map[string][]time.Duration{}
	writer := func(name string, c *conn) *Writer {
		return p.NewWriter(func() bool {
			mu.Lock()
			wrote[name] = append(wrote[name], p.now())
			mu.Unlock()
			return c.write()
		}, c.pending)
	}
	ca, cb := &conn{}, &conn{}
	a, b := writer("a", ca), writer("b", cb)
	times := func(name string) []time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Duration(nil), wrote[name]...)
	}
	ca.publish(a, 1)
	require.Eventually(t, func() bool { return ca.written.Load() == 1 }, 5*time.Second, time.Millisecond)
	time.Sleep(interval / 2)
	cb.publish(b, 1)
	require.Eventually(t, func() bool { return cb.written.Load() == 1 }, 5*time.Second, time.Millisecond)
	time.Sleep(interval / 8)
	ca.publish(a, 1)
	cb.publish(b, 1)
	require.Eventually(t, func() bool { return ca.written.Load() == 2 && cb.written.Load() == 2 }, 5*time.Second, time.Millisecond)
	a.Stop()
	b.Stop()
	ta, tb := times("a"), times("b")
	slack := releaseSlack(interval)
	assert.GreaterOrEqual(t, ta[1]-ta[0], interval-slack, "a waited for its interval")
	assert.GreaterOrEqual(t, tb[1]-tb[0], interval-slack, "b waited for its interval")
	assert.GreaterOrEqual(t, tb[1]-ta[1], interval/4, "b released after a, at the end of its own interval")
	p.mu.Lock()
	assert.Zero(t, p.due.len(), "nothing left waiting")
	p.mu.Unlock()
}

// TestWritesAreMeasured: what the adaptation reads of the writes: how
// many started, how long they took, how many events they carried.
func TestWritesAreMeasured(t *testing.T) {
	p := New(time.Millisecond)
	p.adapted.Store(int64(time.Hour)) // no adaptation (which resets the counts) during the test
	c := &conn{}
	w := p.NewWriter(func() bool {
		time.Sleep(2 * time.Millisecond)
		p.Delivered(3)
		return c.write()
	}, c.pending)
	for i := 1; i <= 5; i++ {
		c.publish(w, 1)
		require.Eventually(t, func() bool { return c.written.Load() == int64(i) }, 5*time.Second, time.Millisecond)
	}
	w.Stop()
	assert.Equal(t, uint64(5), p.runs.Load())
	assert.Equal(t, uint64(15), p.events.Load())
	assert.GreaterOrEqual(t, time.Duration(p.writing.Load()), 10*time.Millisecond)
	p.mu.Lock()
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Unlock()
}

func TestDueQueueOrders(t *testing.T) {
	var q dueQueue
	ws := make([]*Writer, 200)
	for i := range ws {
		ws[i] = &Writer{}
		q.push(ws[i], time.Duration((i*7919)%200)*time.Millisecond) // every due time once, shuffled
	}
	last := time.Duration(-1)
	for q.len() > 0 {
		at := q.first()
		require.Greater(t, at, last)
		last = at
		q.pop()
	}
	assert.Equal(t, 199*time.Millisecond, last)
}

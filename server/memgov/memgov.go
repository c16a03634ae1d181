// Package memgov owns the Go collector's setting while a server holds
// replay buffers: it keeps the heap's headroom between collections
// proportional to the memory that churns, not to the buffers.
//
// The collector lets the heap grow by GOGC percent of what was live at the
// last collection before it collects again (100%: to twice the live heap).
// A server's replay buffers are most of its live heap under load and are
// bounded by their budget (--buffer-total-bytes), yet they doubled the
// process's resident memory like everything else: 5,000 busy threads with
// a 256 MiB budget left 600-700 MB resident. A Governor reads the live
// heap after each collection and sets GOGC so that the headroom is GOGC
// percent of the rest of the heap (connections, queues, events on their
// way) only: resident memory is then about the buffers plus what the
// process needs without them. The buffers hold JSON only (no pointers to
// follow), so the more frequent collections this brings cost little.
//
// The headroom is also at most what the process allocated in the last
// ChurnWindow (10 s; never under MinHeadroom): a server that allocates
// little, as one holding many idle connections does, keeps little room
// for garbage it does not make, and the runtime returns the rest of the
// memory it had grown to (the connections' handshakes) to the system.
// Under load the window's allocations are far above GOGC's headroom,
// which then applies as before, so collections are no more frequent.
//
// A process that goes quiet after a burst (a thousand connections opened
// at once, then nothing) would keep the burst's garbage, the stacks of its
// ended goroutines and its free pages until the runtime's two-minute
// forced collection and its slow scavenger: when less than a sixteenth of
// MinHeadroom was allocated in the last second and what a collection
// would free is over MinHeadroom and a quarter of the live heap, the
// Governor collects once and returns the freed memory to the system (at
// most once per ChurnWindow).
//
// With a memory target (Options.Target, `serve --memory-target`) it also
// holds the process's memory to it, as Redis's maxmemory does: the
// runtime's soft memory limit is set to the target, and after each
// collection the buffers' budget is lowered by what the process would
// need beyond the target (what is live, the allocator's unused slots, the
// stacks and the runtime's own, and the next collection's headroom), so
// the least recently active threads lose their history first, and raised
// back, by half the room at a time, up to --buffer-total-bytes when there
// is room again.
package memgov

import (
	"math"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// Options tunes a Governor; the zero value is usable.
type Options struct {
	// Interval is how often it looks for a new collection (default 100 ms).
	Interval time.Duration
	// MinHeadroom is the least the heap may grow between collections
	// (default 16 MiB), so that a small heap is not collected constantly.
	MinHeadroom int64
	// ChurnWindow bounds the headroom by what the process allocated in
	// that long (default 10 s; see the package doc).
	ChurnWindow time.Duration
	// Target, when more than 0, is the memory the process is held to
	// (see the package doc); the soft memory limit is set to it unless a
	// lower one is set.
	Target int64
}

// Buffers is what a Governor reads and steers: a server's replay
// buffers, a *server.MemoryLog (Server.Buffers).
type Buffers interface {
	// Used is what the replay buffers hold.
	Used() int64
	// TotalBytes is their budget now; SetTotalBytes changes it.
	TotalBytes() int64
	SetTotalBytes(n int64)
}

// The runtime metrics a Governor reads, by their index in sampleNames.
const (
	sCycles = iota
	sLive
	sTotal
	sReleased
	sFree
	sObjects
	sAllocs
	sStacks
	sGoroutines
	sStackStart
)

var sampleNames = [...]string{
	sCycles: "/gc/cycles/total:gc-cycles", sLive: "/gc/heap/live:bytes",
	sTotal: "/memory/classes/total:bytes", sReleased: "/memory/classes/heap/released:bytes",
	sFree: "/memory/classes/heap/free:bytes", sObjects: "/memory/classes/heap/objects:bytes",
	sAllocs: "/gc/heap/allocs:bytes", sStacks: "/memory/classes/heap/stacks:bytes",
	sGoroutines: "/sched/goroutines:goroutines", sStackStart: "/gc/stack/starting-size:bytes",
}

// Governor adjusts GOGC after each collection and, with a target, the
// buffers' budget; see the package doc. Its goroutine runs until Stop.
type Governor struct {
	buffers  Buffers
	budget   int64 // the buffers' budget at Start: the most a target gives back
	oldLimit int64 // the soft memory limit at Start
	opts     Options
	base     int // the GOGC in effect when it started, applied to the rest of the heap
	samples  []metrics.Sample
	cycles   uint64
	allocs   []int64   // bytes allocated so far, one reading per Interval over ChurnWindow (a ring)
	next     int       // where the next reading goes in allocs
	idleGC   time.Time // when it last collected a quiet process
	idleGCs  atomic.Int64
	percent  atomic.Int32
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// Start begins governing the collector and the buffers' budget. With
// GOGC off it leaves GOGC alone.
func Start(buffers Buffers, opts Options) *Governor {
	if opts.Interval <= 0 {
		opts.Interval = 100 * time.Millisecond
	}
	if opts.MinHeadroom <= 0 {
		opts.MinHeadroom = 16 << 20
	}
	if opts.ChurnWindow <= 0 {
		opts.ChurnWindow = 10 * time.Second
	}
	g := &Governor{buffers: buffers, budget: buffers.TotalBytes(), opts: opts, stop: make(chan struct{}), done: make(chan struct{}),
		samples: make([]metrics.Sample, len(sampleNames)),
		allocs:  make([]int64, 0, max(int(opts.ChurnWindow/opts.Interval), 1)+1)}
	for i, name := range sampleNames {
		g.samples[i].Name = name
	}
	g.oldLimit = debug.SetMemoryLimit(-1) // reads it
	if opts.Target > 0 && opts.Target < g.oldLimit {
		debug.SetMemoryLimit(opts.Target)
	}
	gogc := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(gogc)
	if gogc[0].Value.Kind() == metrics.KindUint64 {
		g.base = int(int64(gogc[0].Value.Uint64())) // GOGC=off reads as -1
	}
	g.percent.Store(int32(g.base))
	go g.loop()
	return g
}

// Percent is the GOGC it set last.
func (g *Governor) Percent() int {
	return int(g.percent.Load())
}

// Stop ends the goroutine and puts back what it changed: the GOGC, and
// with a target the soft memory limit and the buffers' budget, of Start.
func (g *Governor) Stop() {
	g.stopOnce.Do(func() {
		close(g.stop)
		<-g.done
		if g.base > 0 {
			debug.SetGCPercent(g.base)
		}
		if g.opts.Target > 0 {
			debug.SetMemoryLimit(g.oldLimit)
			g.buffers.SetTotalBytes(g.budget)
		}
	})
}

func (g *Governor) loop() {
	defer close(g.done)
	if g.base <= 0 && g.opts.Target <= 0 {
		<-g.stop
		return
	}
	t := time.NewTicker(g.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
			g.adjust()
		}
	}
}

// churn records the bytes allocated so far (one reading per Interval)
// and returns what was allocated over the last ChurnWindow, or -1 until a
// whole window was read.
func (g *Governor) churn(allocated int64) int64 {
	if len(g.allocs) < cap(g.allocs) {
		g.allocs = append(g.allocs, allocated)
		return -1
	}
	oldest := g.allocs[g.next] // the reading a whole window ago
	g.allocs[g.next] = allocated
	g.next = (g.next + 1) % len(g.allocs)
	return allocated - oldest
}

// allocatedOver is what was allocated over the last d (its readings),
// or -1 until that many readings were taken.
func (g *Governor) allocatedOver(d time.Duration) int64 {
	k := max(int(d/g.opts.Interval), 1)
	n := len(g.allocs)
	if n <= k {
		return -1
	}
	last := (g.next - 1 + n) % n // the reading just taken (next is 0 while the ring fills)
	return g.allocs[last] - g.allocs[(last-k+n)%n]
}

// QuietCollections is how many collections it ran for a quiet process.
func (g *Governor) QuietCollections() int64 { return g.idleGCs.Load() }

// QuietCollect reports whether a process that allocated recent bytes over
// the last second (less than 0: not known yet), and would free freeable
// bytes of its heap and stacks in a collection, with live bytes live at
// the last one, should collect now: it is quiet (less than a sixteenth
// of minHeadroom allocated), and there is more to free than minHeadroom
// and a quarter of the live heap.
func QuietCollect(recent, freeable, live, minHeadroom int64) bool {
	return recent >= 0 && recent < minHeadroom/16 && freeable > max(minHeadroom, live/4)
}

// adjust sets GOGC, and with a target the buffers' budget, from the
// heap of the last collection and the allocations of the last
// ChurnWindow: GOGC at every reading (an idle process collects no more,
// and its heap's goal is what the runtime returns memory to the system
// against), the budget once per collection.
func (g *Governor) adjust() {
	metrics.Read(g.samples)
	for _, s := range g.samples {
		if s.Value.Kind() != metrics.KindUint64 {
			return // a runtime without these metrics: leave everything alone
		}
	}
	v := func(i int) int64 { return int64(g.samples[i].Value.Uint64()) }
	cycles, live := uint64(v(sCycles)), v(sLive)
	churn := g.churn(v(sAllocs))
	if g.base > 0 && cycles > 0 && time.Since(g.idleGC) >= g.opts.ChurnWindow {
		// Garbage, stacks of ended goroutines, and free pages the runtime
		// has not returned yet.
		freeable := v(sObjects) - live + max(v(sStacks)-v(sGoroutines)*v(sStackStart), 0) + v(sFree)
		if QuietCollect(g.allocatedOver(min(time.Second, g.opts.ChurnWindow)), freeable, live, g.opts.MinHeadroom) {
			debug.FreeOSMemory() // a collection, and the memory it frees back to the system now
			g.idleGC = time.Now()
			g.idleGCs.Add(1)
			return // read again after the collection, at the next reading
		}
	}
	buffered := g.buffers.Used()
	if g.base > 0 && cycles > 0 {
		p := GCPercent(g.base, live, buffered, g.opts.MinHeadroom, churn)
		if p != g.Percent() {
			debug.SetGCPercent(p)
			g.percent.Store(int32(p))
		}
	}
	if cycles == g.cycles {
		return
	}
	g.cycles = cycles
	if g.opts.Target > 0 {
		// What the process holds that a collection cannot give back: the
		// live heap, and besides objects the allocator's unused slots,
		// stacks and the runtime's own (free pages it can return).
		other := max(v(sTotal)-v(sReleased)-v(sFree)-v(sObjects), 0)
		headroom := headroom(max(g.base, 0), live, buffered, g.opts.MinHeadroom, churn)
		cur := g.buffers.TotalBytes()
		if next := BufferLimit(g.opts.Target, g.budget, cur, live+other+headroom, buffered); next != cur {
			g.buffers.SetTotalBytes(next)
		}
	}
}

// BufferLimit is the buffers' next budget: with need bytes of memory
// wanted (what is held, plus the next collection's headroom) against a
// target, buffered bytes in the buffers under a budget of cur, it takes
// what the target is passed by from the buffers, and gives back half the
// room left once there is more than a sixteenth of the target, never
// above budget nor under a sixty-fourth of it (nor under 1 byte).
func BufferLimit(target, budget, cur, need, buffered int64) int64 {
	if budget <= 0 {
		return budget // no budget to steer (0 would mean none at all)
	}
	floor := max(budget/64, 1) // never 0: a MemoryLog reads 0 as no budget
	next := cur
	switch over := need - target; {
	case over > 0:
		next = min(cur, buffered) - over
	case -over > target/16 && cur < budget:
		next = cur + min(-over/2, math.MaxInt64-cur)
	}
	return min(max(next, floor), budget)
}

// GCPercent is the GOGC that gives a heap of live bytes, buffered of them
// replay buffers, a headroom of base percent of the rest (at least
// minHeadroom), and at most churn bytes (what was allocated over the
// churn window; less than 0: not known yet): between 1 and base.
func GCPercent(base int, live, buffered, minHeadroom, churn int64) int {
	if live <= 0 || base <= 0 {
		return base
	}
	h := headroom(base, live, buffered, minHeadroom, churn)
	return int(min(max(h*100/live, 1), int64(base)))
}

// headroom is how much the heap may grow before the next collection: base
// percent of what is live outside the buffers, at most churn (when 0 or
// more), at least minHeadroom.
func headroom(base int, live, buffered, minHeadroom, churn int64) int64 {
	buffered = min(max(buffered, 0), live)
	h := (live - buffered) * int64(base) / 100
	if churn >= 0 {
		h = min(h, churn)
	}
	return max(h, minHeadroom)
}

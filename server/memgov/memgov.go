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
package memgov

import (
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
}

// Governor adjusts GOGC after each collection; see the package doc. Its
// goroutine runs until Stop.
type Governor struct {
	buffered func() int64
	opts     Options
	base     int // the GOGC in effect when it started, applied to the rest of the heap
	samples  []metrics.Sample
	cycles   uint64
	percent  atomic.Int32
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// Start begins governing the collector. buffered reports the bytes the
// replay buffers hold (server.Server.BufferedBytes). With GOGC off it
// changes nothing.
func Start(buffered func() int64, opts Options) *Governor {
	if opts.Interval <= 0 {
		opts.Interval = 100 * time.Millisecond
	}
	if opts.MinHeadroom <= 0 {
		opts.MinHeadroom = 16 << 20
	}
	g := &Governor{buffered: buffered, opts: opts, stop: make(chan struct{}), done: make(chan struct{}),
		samples: []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/gc/heap/live:bytes"}}}
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

// Stop ends the goroutine and puts back the GOGC in effect at Start.
func (g *Governor) Stop() {
	g.stopOnce.Do(func() {
		close(g.stop)
		<-g.done
		if g.base > 0 {
			debug.SetGCPercent(g.base)
		}
	})
}

func (g *Governor) loop() {
	defer close(g.done)
	if g.base <= 0 {
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

// adjust sets GOGC from the live heap of the last collection, once per
// collection.
func (g *Governor) adjust() {
	metrics.Read(g.samples)
	if g.samples[0].Value.Kind() != metrics.KindUint64 || g.samples[1].Value.Kind() != metrics.KindUint64 {
		return // a runtime without these metrics: leave GOGC alone
	}
	cycles, live := g.samples[0].Value.Uint64(), int64(g.samples[1].Value.Uint64())
	if cycles == g.cycles {
		return
	}
	g.cycles = cycles
	p := GCPercent(g.base, live, g.buffered(), g.opts.MinHeadroom)
	if p != g.Percent() {
		debug.SetGCPercent(p)
		g.percent.Store(int32(p))
	}
}

// GCPercent is the GOGC that gives a heap of live bytes, buffered of them
// replay buffers, a headroom of base percent of the rest (at least
// minHeadroom): between 1 and base.
func GCPercent(base int, live, buffered, minHeadroom int64) int {
	if live <= 0 || base <= 0 {
		return base
	}
	buffered = min(max(buffered, 0), live)
	headroom := max((live-buffered)*int64(base)/100, minHeadroom)
	return int(min(max(headroom*100/live, 1), int64(base)))
}

// Package pace owns when a streaming connection writes. A connection's
// writer runs, on a goroutine of its own, only while the connection has
// something to send, so an idle connection keeps no writer goroutine; and
// a connection writes at most once per interval, so events that arrive
// close together leave in one write (one syscall) instead of one each.
//
// A connection that has not written for an interval writes at once, so
// pacing adds no delay to a quiet stream; under load it adds at most one
// interval, and in exchange the server's cost per event drops several
// times (syscalls dominate it) and so does the latency of a busy server.
//
// Each waiting connection is released when its own interval ends (a
// timer set for the earliest, starting those due within a sixteenth of
// an interval together), not with every other waiting connection at one
// shared release: a shared release starts thousands of writes at once,
// and the events of the last of them wait for all the others' writes
// besides their interval.
//
// The interval adapts, in 100-ms windows, to be the smallest that carries
// the load. What it reads in each window: the process's CPU use (a share
// of the CPU time it could have had, see cpuuse.Gauge; busy above 90%,
// averaged over three windows, since one window's figure swings with a
// collection or with what the machine does besides); the share of kicks
// that found their connection written to within the interval (the writes
// are gathering events); the runtime's scheduling latency (how long
// goroutines waited to run, 99th percentile); and how many events each
// write carried and how much of the CPU the writes took.
//
// At the configured interval, a busy process doubles it when behind:
// goroutines wait to run a quarter of the interval, or writes are
// gathering already, or the CPU has been at its limit for a second. A
// process near its limit that keeps up (a collection's burst of CPU, say,
// with many quiet conversations whose events come further apart than the
// interval) keeps it: a longer one would gather nothing and only delay
// every event.
//
// Above it, CPU use no longer says whether the load is carried: a node
// that carries all it is offered at 80 ms may read 100% in most windows,
// and one that does not at 40 ms reads the same (its producers, slowed,
// offer less). So a busy process doubles the interval only on two
// windows in a row of one of two signs: its writes gather next to
// nothing (a longer interval then costs no delay, and may gather), or
// goroutines wait to run half the interval or more (it does not keep up
// even gathering). A busy process whose writes gather and whose
// goroutines run on time carries its load and keeps the interval. It
// halves the interval when the halved one would fit in the CPU: its use
// plus the writes' share again for each write that would become two
// (halvedUse). Each interval above the configured one is kept three
// windows at least before it moves (the first drains the backlog of the
// one before), and when a halving is undone within five windows, the
// interval stays at least the one that carried the load for five seconds
// (floorMemory). After a quiet while it is back at the configured one.
package pace

import (
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentstream/agentstream/internal/cpuuse"
)

// MaxInterval bounds the adaptive interval.
const MaxInterval = 400 * time.Millisecond

// The CPU use (cpuuse.Gauge's share), averaged over the last
// busyWindows windows, above which the process is busy (a burst does not
// slow a server that keeps up); and the use under which, after a quiet
// while, the interval is back at the configured one.
const (
	busyAbove   = cpuuse.Busy
	busyWindows = 3
	idleBelow   = 0.6
)

// overloadWindows is how many windows whose average use is above
// busyAbove have the interval double even with no sign of being behind: a
// second at the limit is overload, whatever the signs say.
const overloadWindows = 10

// sparseShare is the share of a window's kicks that waited for the
// interval under which the writes gather next to nothing: a longer
// interval then costs no delay.
const sparseShare = 0.1

// gatherShare is the share of kicks in a window that, having found their
// connection written to within the interval (and so waited for it), has
// the interval double on its own: writes are being gathered.
const gatherShare = 0.25

// DefaultInterval is the transports' default interval: short enough to
// be invisible in a stream of tokens, long enough that a connection
// receiving a few hundred events a second writes a handful at a time.
const DefaultInterval = 5 * time.Millisecond

// Off is the interval that turns pacing off: every writer starts as soon
// as it is kicked.
const Off time.Duration = -1

// Pacer releases the writers that had to wait for their interval. One
// Pacer serves every connection of a handler; its timer runs only while
// some writer waits.
type Pacer struct {
	interval time.Duration // the configured interval
	epoch    time.Time     // monotonic base for Writer.last

	// The adaptive interval (nanoseconds), and when it was last adapted
	// (on the pacer's clock).
	cur, adapted atomic.Int64
	cpu          cpuuse.Gauge // guarded by mu
	sched        schedGauge   // guarded by mu
	uses         useHistory   // the last windows' CPU use, guarded by mu
	floor        floorMemory  // guarded by mu
	signs        signs        // guarded by mu
	settled      int          // windows since the interval changed, guarded by mu

	// Kicks since the last adaptation; waited counts those of them that
	// waited for the interval (guarded by mu, which wait holds anyway).
	kicks atomic.Uint64

	// Events written since the last adaptation (Delivered), and the time
	// the writes took (nanoseconds).
	events  atomic.Uint64
	writing atomic.Int64

	// Writes started since the last adaptation.
	runs atomic.Uint64

	mu      sync.Mutex
	waited  uint64
	due     dueQueue    // the writers waiting, by when their interval ends
	timer   *time.Timer // fires at armedAt while any writer waits
	armed   bool
	armedAt time.Duration // on the pacer's clock
}

// New returns a pacer with the given interval; 0 or less turns pacing off
// (every writer starts as soon as it is kicked).
func New(interval time.Duration) *Pacer {
	p := &Pacer{interval: max(interval, 0), epoch: time.Now()}
	p.cur.Store(int64(p.interval))
	return p
}

// Interval is the configured least time between two writes of one
// connection.
func (p *Pacer) Interval() time.Duration { return p.interval }

// Current is the interval in force now (see the package comment).
func (p *Pacer) Current() time.Duration { return time.Duration(p.cur.Load()) }

// adaptEvery is the least time between two adaptations of the interval:
// the window CPU use is measured over.
const adaptEvery = 100 * time.Millisecond

// adapt sets the interval from what the window since the last adaptation
// saw. The caller holds p.mu.
func (p *Pacer) adapt() {
	now := p.now()
	if p.interval <= 0 || now-time.Duration(p.adapted.Load()) < adaptEvery {
		return
	}
	since := now - time.Duration(p.adapted.Load())
	p.adapted.Store(int64(now))
	use, ok := p.cpu.Use()
	kicks, waited := p.kicks.Swap(0), p.waited
	p.waited = 0
	gathered := 0.0
	if kicks > 0 {
		gathered = float64(waited) / float64(kicks)
	}
	waits := p.sched.p99()
	runs, events := p.runs.Swap(0), p.events.Swap(0)
	writes := float64(p.writing.Swap(0)) / float64(since*time.Duration(runtime.GOMAXPROCS(0)))
	switch {
	case !ok:
	case since > 10*adaptEvery && use < idleBelow:
		p.set(p.interval) // quiet for a while: no pacing left over from a past overload
		p.uses = useHistory{}
		p.floor = floorMemory{}
	default:
		p.setFrom(window{
			use:    use,
			behind: waits >= p.interval/4 || gathered >= gatherShare,
			sparse: gathered < sparseShare,
			late:   waits >= p.Current()/2,
			batch:  float64(events) / float64(max(runs, 1)),
			writes: writes,
		})
	}
}

// window is what the pacer saw in one adaptation window.
type window struct {
	use    float64 // the CPU use, a share of what the process could have had
	behind bool    // goroutines waited to run a quarter interval, or writes were gathered
	sparse bool    // next to no kick waited for the interval (sparseShare)
	late   bool    // goroutines waited to run half the interval in force, or more
	batch  float64 // events per write (Delivered over the writes started)
	writes float64 // the time the writes took, a share of the cores the process may use
}

// halvedUse is what the process's CPU use would be, roughly, at half the
// interval, from a window at this one (use being the average of the
// windows at it): each write carrying batch events becomes min(2, batch)
// writes (a write that carries one event stays one), each costing what a
// write costs now; the rest of the work does not change. It errs high,
// since a write of fewer events costs less.
func halvedUse(use float64, w window) float64 {
	return use + w.writes*(min(2, max(w.batch, 1))-1)
}

// maybeAdapt adapts the interval if it is due (a writer is kicked while
// none waits, so release may not run for a while); now is the pacer's
// clock.
func (p *Pacer) maybeAdapt(now time.Duration) {
	if p.interval <= 0 || now-time.Duration(p.adapted.Load()) < adaptEvery {
		return
	}
	p.mu.Lock()
	p.adapt()
	p.mu.Unlock()
}

// setFrom moves the interval one step given what the last window saw
// (see the package comment for the rules and why). The caller holds
// p.mu.
func (p *Pacer) setFrom(win window) {
	cur := time.Duration(p.cur.Load())
	p.uses.add(win.use)
	f := &p.floor
	f.windows++
	p.settled++
	if p.settled > 1 {
		p.signs.add(win) // the first window at an interval drains the one before
	}
	var busy, climb, halve bool
	if cur > p.interval {
		if p.settled < settleWindows {
			return // the interval has not shown yet what it carries
		}
		// Judged by the windows at this interval only, the first left out.
		use := p.uses.mean(min(busyWindows, p.settled-1))
		busy = use > busyAbove
		climb = p.signs.sparse >= signWindows || p.signs.late >= signWindows
		halve = !win.late && halvedUse(use, win) < 1
	} else {
		busy = p.uses.over(busyWindows, busyAbove)
		climb = win.behind || p.uses.over(overloadWindows, busyAbove)
	}
	switch {
	case busy && climb && cur < MaxInterval:
		next := min(2*cur, MaxInterval)
		if f.halvedTo == cur && f.windows-f.halvedAt <= floorAfter {
			// Halved to cur a moment ago and busy again at once: the
			// interval it came from is the one that carries the load.
			f.at, f.until = next, f.windows+floorFor
		}
		p.set(next)
	case halve && (cur/2 >= f.at || f.windows >= f.until):
		f.halvedTo, f.halvedAt = max(cur/2, p.interval), f.windows
		p.set(f.halvedTo)
	}
}

// set changes the interval. The caller holds p.mu.
func (p *Pacer) set(d time.Duration) {
	p.cur.Store(int64(d))
	p.settled = 0
	p.signs = signs{}
}

// settleWindows is how many windows an interval above the configured one
// lasts at least: the first drains the backlog (or the held writes) of
// the interval before, and the next ones show what this one carries.
const settleWindows = 3

// signWindows is how many windows in a row a sign must show, above the
// configured interval, before the interval doubles on it: writes
// gathering next to nothing, or goroutines waiting half an interval to
// run. A single window's sign is often a collection or a burst the next
// window absorbs.
const signWindows = 2

// signs counts the windows in a row, at the interval in force, that
// showed each sign.
type signs struct {
	sparse int // windows whose writes gathered next to nothing (window.sparse)
	late   int // windows whose goroutines waited to run (window.late)
}

func (s *signs) add(w window) {
	s.sparse = count(s.sparse, w.sparse)
	s.late = count(s.late, w.late)
}

func count(n int, sign bool) int {
	if sign {
		return n + 1
	}
	return 0
}

// floorMemory keeps the interval from swinging between one that carries
// the load and half of it: a node that keeps up at some interval runs
// below the busy mark there (so the interval halves), and at half it is
// busy again (so it doubles), every few windows, and every event waits
// the longer interval in turn with the backlog of the shorter. When a
// halving is followed by a doubling within floorAfter windows, the
// interval does not go below the doubled one for floorFor windows.
type floorMemory struct {
	windows  int           // windows seen
	halvedTo time.Duration // the interval the last halving set
	halvedAt int           // the window it was set in
	at       time.Duration // the floor, while windows < until
	until    int
}

// floorAfter and floorFor: see floorMemory.
const (
	floorAfter = 5
	floorFor   = 50
)

// useHistory keeps the CPU use of the last overloadWindows windows.
type useHistory struct {
	use  [overloadWindows]float64
	n    int // windows recorded, up to len(use)
	next int // where the next one goes
}

func (h *useHistory) add(use float64) {
	h.use[h.next] = use
	h.next = (h.next + 1) % len(h.use)
	h.n = min(h.n+1, len(h.use))
}

// mean is the average use of the last k windows (those recorded, if
// fewer).
func (h *useHistory) mean(k int) float64 {
	k = min(k, h.n)
	if k == 0 {
		return 0
	}
	sum := 0.0
	for i := 1; i <= k; i++ {
		sum += h.use[(h.next-i+len(h.use))%len(h.use)]
	}
	return sum / float64(k)
}

// over reports whether the last k windows (all of them recorded) used
// more than limit on average.
func (h *useHistory) over(k int, limit float64) bool {
	return h.n >= k && h.mean(k) > limit
}

// schedGauge reads the runtime's scheduling latencies (how long
// goroutines waited to run) between two reads.
type schedGauge struct {
	sample [1]metrics.Sample
	last   []uint64 // the histogram's counts at the last read
}

// p99 is the 99th percentile of the scheduling latencies since the last
// read (0 at the first read, or with none).
func (g *schedGauge) p99() time.Duration {
	if g.sample[0].Name == "" {
		g.sample[0].Name = "/sched/latencies:seconds"
	}
	metrics.Read(g.sample[:])
	if g.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	h := g.sample[0].Value.Float64Histogram()
	first := len(g.last) != len(h.Counts)
	if first {
		g.last = make([]uint64, len(h.Counts))
	}
	var total uint64
	for i, c := range h.Counts {
		total += c - g.last[i]
	}
	defer copy(g.last, h.Counts)
	if first || total == 0 {
		return 0
	}
	need := total - total/100 // the 99th percentile's rank
	var seen uint64
	for i, c := range h.Counts {
		seen += c - g.last[i]
		if seen >= need {
			return time.Duration(max(h.Buckets[i], 0) * float64(time.Second)) // the bucket's lower bound (the first is -Inf)
		}
	}
	return 0
}

// Delivered counts n events written by one of the pacer's writers (the
// transports call it after each write): with the writes started, the
// events a write carries.
func (p *Pacer) Delivered(n int) {
	if p.interval > 0 { // read only to adapt the interval
		p.events.Add(uint64(n))
	}
}

// Epoch is the base of the pacer's monotonic clock.
func (p *Pacer) Epoch() time.Time { return p.epoch }

func (p *Pacer) now() time.Duration { return time.Since(p.epoch) }

// wait queues w until at, when its interval ends (on the pacer's clock).
// Each writer waits for its own interval, not for a release shared by
// all: a shared one would start every waiting connection's write at
// once, and on a busy node the events of the last of them would wait for
// all the others' writes besides their interval.
func (p *Pacer) wait(w *Writer, at time.Duration) {
	p.mu.Lock()
	p.due.push(w, at)
	p.waited++
	if !p.armed || at < p.armedAt {
		p.arm(at, p.now())
	}
	p.mu.Unlock()
}

// arm sets the timer to fire at at (now being the pacer's clock). The
// caller holds p.mu.
func (p *Pacer) arm(at, now time.Duration) {
	p.armed, p.armedAt = true, at
	d := max(at-now, 0)
	if p.timer == nil {
		p.timer = time.AfterFunc(d, p.release)
	} else {
		p.timer.Reset(d)
	}
}

// releaseSlack is how early, at most, a writer is started with others
// that are due: one timer firing starts every writer due within the slack
// (a sixteenth of the interval, at most a millisecond), rather than one
// firing each.
func releaseSlack(interval time.Duration) time.Duration {
	return min(interval/16, time.Millisecond)
}

// release starts the writers whose interval has ended, and sets the timer
// for the next one.
func (p *Pacer) release() {
	p.mu.Lock()
	p.adapt()
	now := p.now()
	var ready []*Writer
	for limit := now + releaseSlack(p.Current()); p.due.len() > 0 && p.due.first() <= limit; {
		ready = append(ready, p.due.pop())
	}
	p.armed = false
	if p.due.len() > 0 {
		p.arm(p.due.first(), now)
	}
	p.mu.Unlock()
	for _, w := range ready {
		w.release()
	}
}

// dueQueue is a min-heap of waiting writers by the end of their interval.
type dueQueue struct{ items []dueWriter }

type dueWriter struct {
	at time.Duration
	w  *Writer
}

func (q *dueQueue) len() int             { return len(q.items) }
func (q *dueQueue) first() time.Duration { return q.items[0].at }
func (q *dueQueue) less(i, j int) bool   { return q.items[i].at < q.items[j].at }
func (q *dueQueue) swap(i, j int)        { q.items[i], q.items[j] = q.items[j], q.items[i] }

func (q *dueQueue) push(w *Writer, at time.Duration) {
	q.items = append(q.items, dueWriter{at, w})
	for i := len(q.items) - 1; i > 0; {
		parent := (i - 1) / 2
		if !q.less(i, parent) {
			break
		}
		q.swap(i, parent)
		i = parent
	}
}

func (q *dueQueue) pop() *Writer {
	w := q.items[0].w
	last := len(q.items) - 1
	q.items[0] = q.items[last]
	q.items[last] = dueWriter{}
	q.items = q.items[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < last && q.less(l, m) {
			m = l
		}
		if r < last && q.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		q.swap(i, m)
		i = m
	}
	if cap(q.items) > 1024 && len(q.items) < cap(q.items)/4 {
		q.items = append([]dueWriter(nil), q.items...) // a burst's queue is not kept
	}
	return w
}

// Writer runs one connection's write function. It is safe to Kick from
// any goroutine; at most one run of the write function is under way at a
// time.
type Writer struct {
	p       *Pacer
	write   func() bool
	pending func() bool

	mu        sync.Mutex
	running   bool
	waiting   bool        // queued on the pacer
	hold      *time.Timer // set while a Hold lasts
	holds     int         // intervals the current Hold has lasted
	holdWhile func() bool
	stopped   bool
	wrote     bool
	last      time.Duration // when the last run ended, on the pacer's clock
	wg        sync.WaitGroup
}

// NewWriter returns a writer for one connection. write sends whatever is
// ready and reports false when the connection must end (the writer then
// stops for good); pending reports whether anything is ready to send.
// write never runs concurrently with itself; pending may run while a
// write does.
func (p *Pacer) NewWriter(write, pending func() bool) *Writer {
	return &Writer{p: p, write: write, pending: pending}
}

// Kick asks for a write: at once if the connection has not written within
// the interval, otherwise at the pacer's next release. Kicks while a write
// is running or queued are absorbed by it. Kick never blocks on I/O.
func (w *Writer) Kick() {
	now := w.p.now() // one clock read for both uses
	w.p.maybeAdapt(now)
	w.mu.Lock()
	if w.running || w.waiting || w.stopped || w.hold != nil {
		w.mu.Unlock()
		return
	}
	if w.p.interval > 0 {
		w.p.kicks.Add(1) // what the interval's adaptation reads (none without pacing)
		if cur := w.p.Current(); w.wrote && now-w.last < cur {
			w.waiting = true
			at := w.last + cur
			w.mu.Unlock()
			w.p.wait(w, at)
			return
		}
	}
	w.startLocked()
}

// Hold keeps the writer from starting for one interval from now, and then
// starts it if anything is pending: what is kicked meanwhile goes out
// together. A transport holds when a client subscribes, so that the
// replays of subscribes sent together leave as one merged stream rather
// than the first one alone (a client may act on its end before the others
// arrive). When the interval ends while the connection still has input to
// read (SetHoldWhile), the hold goes on, interval by interval, up to
// MaxHoldIntervals: subscribes sent together are answered together even
// when reading them takes longer than an interval. A write under way
// finishes; with pacing off Hold is a Kick.
func (w *Writer) Hold() { w.hold1(w.p.interval) }

// RunEndHold is how long HoldRunEnd holds at first.
const RunEndHold = 50 * time.Millisecond

// HoldRunEnd is Hold for a replay that holds the end of a run: a client
// that sent several subscribes together acts on the end it reads (the
// official SDK closes its projections), so the hold lasts RunEndHold
// first (at least an interval), however quickly the client's other
// subscribes are read: on a loaded machine they may reach the socket
// several milliseconds apart. Only joiners of runs that have ended wait.
func (w *Writer) HoldRunEnd() { w.hold1(max(RunEndHold, w.p.interval)) }

// StartedHold is how long a transport holds a run's end after it answered
// the command that started the run (HoldFor, ExtendHold).
const StartedHold = 200 * time.Millisecond

// HoldFor is Hold for d from now (at least an interval): a run's end
// that a client may still be about to subscribe for.
func (w *Writer) HoldFor(d time.Duration) { w.hold1(max(d, w.p.interval)) }

// ExtendHold restarts a hold under way for d from now; without one it
// does nothing.
func (w *Writer) ExtendHold(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.hold != nil && !w.stopped && w.p.interval > 0 {
		w.hold.Reset(max(d, w.p.interval))
	}
}

func (w *Writer) hold1(first time.Duration) {
	if w.p.interval <= 0 {
		w.Kick()
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	if w.hold != nil {
		if first > w.p.interval {
			w.hold.Reset(first) // a longer hold replaces a short one
		}
		return
	}
	w.holds = 1
	w.hold = time.AfterFunc(first, w.unhold)
}

// MaxHoldIntervals bounds a Hold that SetHoldWhile extends, in intervals.
const MaxHoldIntervals = 20

// SetHoldWhile has a Hold go on while busy reports true (the connection
// has input it has not read yet, or is carrying out a command). busy runs
// on a timer's goroutine and must not block.
func (w *Writer) SetHoldWhile(busy func() bool) {
	w.mu.Lock()
	w.holdWhile = busy
	w.mu.Unlock()
}

// unhold ends a Hold, or extends it by an interval while the connection
// is busy.
func (w *Writer) unhold() {
	w.mu.Lock()
	if busy := w.holdWhile; busy != nil && !w.stopped && w.holds < MaxHoldIntervals {
		w.mu.Unlock()
		if busy() {
			w.mu.Lock()
			if !w.stopped {
				w.holds++
				w.hold.Reset(w.p.interval)
				w.mu.Unlock()
				return
			}
			w.mu.Unlock()
		}
		w.mu.Lock()
	}
	w.hold = nil // the timer is not kept: an idle connection holds none
	w.mu.Unlock()
	if w.pending() {
		w.Kick()
	}
}

// release is the pacer starting a writer that waited.
func (w *Writer) release() {
	w.mu.Lock()
	w.waiting = false
	if w.running || w.stopped || w.hold != nil {
		w.mu.Unlock()
		return
	}
	w.startLocked()
}

// startLocked starts a run; it is called with w.mu held and releases it.
func (w *Writer) startLocked() {
	w.running = true
	w.wg.Add(1)
	w.mu.Unlock()
	go w.run()
}

// run writes, then stops; what arrived during the write is kicked again
// (and so waits for the interval like anything else).
func (w *Writer) run() {
	defer w.wg.Done()
	paced := w.p.interval > 0
	var start time.Duration
	if paced {
		start = w.p.now()
	}
	ok := w.write()
	end := w.p.now()
	if paced {
		w.p.runs.Add(1)
		w.p.writing.Add(int64(end - start))
	}
	w.mu.Lock()
	w.running = false
	w.wrote = true
	w.last = end
	if !ok {
		w.stopped = true
	}
	w.mu.Unlock()
	if ok && w.pending() {
		w.Kick()
	}
}

// Stop keeps the write function from being called again and waits for a
// run under way. It must not be called from the write function.
func (w *Writer) Stop() {
	w.mu.Lock()
	w.stopped = true
	if w.hold != nil {
		w.hold.Stop()
	}
	w.mu.Unlock()
	w.wg.Wait()
}

// buffers holds write buffers between runs, so that an idle connection
// keeps none of its own.
var buffers = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// GetBuffer returns an empty write buffer; give it back with PutBuffer
// once its bytes are written.
func GetBuffer() *[]byte { return buffers.Get().(*[]byte) }

// PutBuffer returns a buffer from GetBuffer. A buffer grown past 1 MiB by
// a burst is dropped rather than kept.
func PutBuffer(b *[]byte) {
	if cap(*b) > 1<<20 {
		return
	}
	*b = (*b)[:0]
	buffers.Put(b)
}

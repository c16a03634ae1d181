package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentstream/agentstream/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"
)

// DefaultWriteQueue is the most events a Log holds that Redis has not
// taken yet (LogOptions.WriteQueue's default).
const DefaultWriteQueue = 100_000

// DefaultWriteQueueBytes is the most bytes of events (their JSON) a Log
// holds that Redis has not taken yet (LogOptions.WriteQueueBytes'
// default): with events of a few hundred bytes the count bound comes
// first; with large ones this does, so that a node whose Redis is slow
// does not hold 100,000 large events.
const DefaultWriteQueueBytes = 64 << 20

// DefaultWriters is how many pipelined batches a Log keeps on their way to
// Redis at once (LogOptions.Writers' default).
const DefaultWriters = 4

// DefaultQueueWait is how long a publisher waits for room in a full write
// queue (LogOptions.QueueWait's default).
const DefaultQueueWait = 15 * time.Second

// LogOptions configure a Log. Zero fields take the defaults in their
// comments.
type LogOptions struct {
	// MaxEvents and MaxBytes cap each thread's events, in memory and,
	// approximately, in its Redis stream (server.DefaultBufferEvents,
	// server.DefaultBufferBytes): see streamTrim.
	MaxEvents, MaxBytes int
	// TotalBytes bounds the events kept in memory, all threads together
	// (none when 0); Redis keeps the rest.
	TotalBytes int64
	// Writers is how many batches may be on their way to Redis at once,
	// each from a writer of its own serving a share of the threads
	// (DefaultWriters); a thread's events keep their order.
	Writers int
	// WriteQueue is how many events may wait for Redis (DefaultWriteQueue),
	// shared evenly among the writers.
	// A publisher that finds it full waits for room (Redis is slower than
	// the node's publishers, or unreachable: they are slowed to its
	// pace), up to QueueWait; when that passes the event is refused
	// (Append's error, which the run's emitter returns) and counted. The
	// end of a run (its root lifecycle) is queued past the bound, never
	// refused for it: every client must see the run end.
	WriteQueue int
	// WriteQueueBytes bounds the same queue by the events' JSON
	// (DefaultWriteQueueBytes), shared evenly among the writers; a
	// publisher finding either bound reached waits as above. An event
	// larger than a writer's share is still queued when the queue is
	// empty.
	WriteQueueBytes int64
	// QueueWait is how long a publisher waits for room in a full write
	// queue, or for Redis to take a batch again while it fails
	// (DefaultQueueWait): the longest Redis outage a run outlives
	// unharmed. During an outage publishers wait (the run pauses, as
	// nothing it publishes could reach a client meanwhile); one that
	// waits longer is refused, and the run ends with that error, which
	// every client sees once Redis is back.
	QueueWait time.Duration
	// OnError, when set, hears of every failed Redis command.
	OnError func(error)
	// WriteGather is the least time between the starts of two batches of
	// one writer (none by default): a writer that sent one less than
	// WriteGather ago waits out the rest before it sends the next, unless
	// a full batch waits, so that a busy node sends fewer, larger batches. A writer that has been quiet sends at once: a quiet
	// thread's events gain no latency. Each batch costs Redis, and both
	// the writing node and the nodes that follow its threads, a few system
	// calls whatever it carries; at a few thousand events a second they
	// dominate the cost of an event. It trades latency for CPU: on the
	// many-conversations workload 2 ms saved about a fifth of the CPU per
	// delivery and added about 2 ms to the median latency (docs/capacity.md).
	WriteGather time.Duration
	// WriteTimeout bounds each pipelined batch (5s), ReadTimeout each read
	// (2s): the replays and the head of a thread created again. A batch
	// that fails is sent again, until Redis takes it (or the Log closes):
	// its events reach no client before.
	WriteTimeout, ReadTimeout time.Duration
	// DeliverFirst has the server deliver an event to this node's clients
	// when it is published, before Redis holds it, saving them a Redis
	// round trip of latency. Off (the default), the log writes through:
	// an event reaches a client, on any node, only once Redis holds it
	// (server.WriteThroughLog), so no client sees an event that Redis
	// then lost or gave to another writer under the same id.
	DeliverFirst bool
	// MaxProducers caps the producers whose last batch a thread's hash
	// keeps (server.DefaultMaxProducersPerThread); past it the one used
	// longest ago is forgotten.
	MaxProducers int
	// Publish also publishes each event on its thread's sharded channel
	// (SPUBLISH, in the same pipelined batch as its XADD), for the other
	// nodes' Live listeners.
	Publish bool
}

// Log is the server.DurableLog in Redis (see the package comment).
type Log struct {
	e    *Engine
	mem  *server.MemoryLog
	opts LogOptions

	queues  []*writeQueue // a thread's events all go through one, chosen by its id
	stop    chan struct{}
	writers sync.WaitGroup
	// onWritten hears of the events Redis holds, or refused (OnWritten).
	onWritten atomic.Pointer[func(thread string, events []*server.Event, err error, wait bool) bool]
	dropped   atomic.Uint64
	refused   atomic.Uint64
	retries   atomic.Uint64
	waits     atomic.Uint64
	written   atomic.Uint64
	batches   atomic.Uint64
	cmds      atomic.Uint64
}

// writeQueue is one writer's share of the threads: their events waiting
// for Redis, in order, and the goroutine that sends them in pipelined
// batches, one batch at a time. Several queues keep several batches on
// the wire (one round trip each) while each thread's events stay in
// order.
type writeQueue struct {
	mu       sync.Mutex
	pending  []entry // appended, not yet sent to Redis, in order
	bound    int     // the most events pending (its share of WriteQueue)
	bytes    int64   // the JSON of the events pending; guarded by mu
	maxBytes int64   // the most bytes pending (its share of WriteQueueBytes)
	wake     chan struct{}
	room     chan struct{} // closed (and replaced) when the writer takes a batch or Redis takes one again; guarded by mu
	// failing: Redis failed the batch on the wire, or has not answered it
	// within stallAfter, and has not taken it yet; publishers wait as for
	// a full queue. Guarded by mu.
	failing bool
	sentAt  time.Time    // when the batch on the wire was first sent (zero: none); guarded by mu
	stall   *time.Timer  // fires stallAfter after a batch is sent (markStalled); the writer's
	sending atomic.Int64 // events of the batch on the wire
	// lastSent is when the writer last started a batch; gatherTimer its
	// timer for WriteGather. The writer's.
	lastSent    time.Time
	gatherTimer *time.Timer
	// refused marks the threads whose events Redis refused (another writer
	// holds their sequence numbers): their events are refused until the
	// server reads the thread's head again (Head). Guarded by mu.
	refused map[string]bool
	done    *delivery // hands what Redis took to the server, off the writer

	expired map[string]time.Time   // when each thread's keys last got their TTL; the writer's
	ridGen  uint64                 // the Engine's ridGen when expired was last cleared; the writer's
	unsent  map[string]int         // per thread, events appended and not yet sent to Redis; guarded by mu
	trims   map[string]*streamTrim // per thread this node writes; guarded by mu
}

// queue is the write queue of thread's events.
func (l *Log) queue(thread string) *writeQueue {
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(thread); i++ {
		h = (h ^ uint32(thread[i])) * 16777619
	}
	return l.queues[h%uint32(len(l.queues))]
}

type entry struct {
	thread string
	e      *server.Event
	// minID is the oldest sequence number the thread's stream keeps once
	// the event is in (its XADD's MINID); exact when the byte cap set it.
	minID uint64
	exact bool
	by    *server.ProducedBy // a producer's event: written with its batch's record
	// eval: Redis did not hold the script that writes the entry when it
	// was last sent; it is sent with the script (EVAL) rather than its SHA.
	eval bool
}

// streamTrim keeps a thread's Redis stream within MaxEvents and MaxBytes.
// Redis trims streams by length or by id, not by size, so the node that
// writes a thread counts the bytes it appends and marks, about every
// MaxBytes/trimMarks bytes, the sequence number an event starts at; each
// XADD then carries MINID: the newer of the count cap's oldest event
// (seq - MaxEvents + 1) and the oldest mark whose events since fit in
// MaxBytes. The stream keeps between (1 - 1/trimMarks) MaxBytes and
// MaxBytes of what the node appended (plus, for the count cap, what
// Redis's approximate trimming leaves: whole nodes of the stream). What
// another node or an earlier process appended is trimmed by count only,
// until this node's own events push it out.
type streamTrim struct {
	total uint64 // bytes this node appended to the stream
	marks []trimMark
	// full says the bytes this node appended have passed the cap: only
	// then may the byte window trim. Until then the stream may hold
	// events this node never counted (another node's, or this process's
	// before a restart), which only the count window may trim.
	full bool
}

// trimMark: the event with sequence number seq starts after before bytes.
type trimMark struct{ seq, before uint64 }

// trimMarks is how many marks a thread's byte window keeps, about.
const trimMarks = 16

// minID returns the MINID of the XADD of event seq of size bytes (see
// streamTrim), and whether the byte cap set it. The caller holds q.mu.
func (q *writeQueue) minID(opts *LogOptions, thread string, seq uint64, size int) (uint64, bool) {
	var byCount uint64
	if n := uint64(opts.MaxEvents); seq > n {
		byCount = seq - n + 1
	}
	tr := q.trims[thread]
	if tr == nil {
		tr = &streamTrim{}
		q.trims[thread] = tr
	}
	maxBytes := uint64(opts.MaxBytes)
	if k := len(tr.marks); k == 0 || tr.total-tr.marks[k-1].before >= maxBytes/trimMarks || seq <= tr.marks[k-1].seq {
		if k > 0 && seq <= tr.marks[k-1].seq {
			tr.marks, tr.full = tr.marks[:0], false // the stream went back: a new epoch's first events
		}
		tr.marks = append(tr.marks, trimMark{seq: seq, before: tr.total})
	}
	tr.total += uint64(size)
	// The oldest mark whose events since fit; the newest event alone when
	// none does.
	i := 0
	for i < len(tr.marks) && tr.total-tr.marks[i].before > maxBytes {
		i++
	}
	byBytes := seq
	if i < len(tr.marks) {
		byBytes = tr.marks[i].seq
	}
	if i > 0 {
		tr.marks = append(tr.marks[:0], tr.marks[i:]...)
		tr.full = true
	}
	if tr.full && byBytes > byCount {
		return byBytes, true
	}
	return byCount, false
}

var (
	_ server.DurableLog  = (*Log)(nil)
	_ server.HeadsReader = (*Log)(nil)
)

// Log returns the engine's event log and starts its writers; Close it.
func (e *Engine) Log(opts LogOptions) *Log {
	if opts.MaxEvents <= 0 {
		opts.MaxEvents = server.DefaultBufferEvents
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = server.DefaultBufferBytes
	}
	if opts.WriteQueue <= 0 {
		opts.WriteQueue = DefaultWriteQueue
	}
	if opts.WriteQueueBytes <= 0 {
		opts.WriteQueueBytes = DefaultWriteQueueBytes
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 5 * time.Second
	}
	if opts.QueueWait <= 0 {
		opts.QueueWait = DefaultQueueWait
	}
	if opts.ReadTimeout <= 0 {
		opts.ReadTimeout = 2 * time.Second
	}
	if opts.Writers <= 0 {
		opts.Writers = DefaultWriters
	}
	opts.WriteGather = max(opts.WriteGather, 0)
	if opts.MaxProducers <= 0 {
		opts.MaxProducers = server.DefaultMaxProducersPerThread
	}
	l := &Log{e: e, mem: server.NewMemoryLog(opts.MaxEvents, opts.MaxBytes), opts: opts, stop: make(chan struct{})}
	l.mem.SetTotalBytes(opts.TotalBytes)
	for range opts.Writers {
		q := &writeQueue{bound: max(1, (opts.WriteQueue+opts.Writers-1)/opts.Writers),
			maxBytes: max(1, (opts.WriteQueueBytes+int64(opts.Writers)-1)/int64(opts.Writers)),
			wake:     make(chan struct{}, 1), room: make(chan struct{}), expired: map[string]time.Time{}, unsent: map[string]int{}, trims: map[string]*streamTrim{},
			refused: map[string]bool{}, done: newDelivery()}
		l.queues = append(l.queues, q)
		l.writers.Add(2)
		go l.writer(q)
		go l.deliverer(q)
	}
	return l
}

// OnWritten implements server.WriteThroughLog: fn hears of each thread's
// events once Redis holds them, in order, or of those Redis refused: from
// the writer when the thread is free, else from the writer's deliverer.
func (l *Log) OnWritten(fn func(thread string, events []*server.Event, err error, wait bool) bool) {
	l.onWritten.Store(&fn)
}

// WritesThrough implements server.WriteThroughLog: true unless
// LogOptions.DeliverFirst.
func (l *Log) WritesThrough() bool { return !l.opts.DeliverFirst }

// Close sends what is still pending to Redis (within 5 s) and stops the
// writers; what Redis did not take by then is never delivered.
func (l *Log) Close() {
	close(l.stop)
	l.writers.Wait()
}

// Stats are the log's counters.
type Stats struct {
	Written uint64 // events appended to Redis streams
	Batches uint64 // the pipelined round trips that carried them
	// Dropped counts the events refused because the write queue stayed
	// full for QueueWait (Redis slow or unreachable), and those still
	// unwritten when the Log closed.
	Dropped uint64
	// Refused counts the events Redis refused because another writer
	// holds their sequence numbers (a run lease taken over).
	Refused uint64
	Retries uint64 // batches sent again after Redis failed them
	Waits   uint64 // appends that waited: the write queue was full or Redis failing
	Pending int    // events not in Redis yet: waiting for the writer, or on the wire
	// PendingBytes is the JSON of the events waiting for the writer (what
	// LogOptions.WriteQueueBytes bounds).
	PendingBytes int64
	Commands     uint64 // Redis commands the writer sent (XADD, SPUBLISH, PEXPIRE)
}

// Stats returns the log's counters.
func (l *Log) Stats() Stats {
	p, b := 0, int64(0)
	for _, q := range l.queues {
		q.mu.Lock()
		p += len(q.pending) + int(q.sending.Load())
		b += q.bytes
		q.mu.Unlock()
	}
	return Stats{Written: l.written.Load(), Batches: l.batches.Load(), Dropped: l.dropped.Load(), Refused: l.refused.Load(), Retries: l.retries.Load(),
		Waits: l.waits.Load(), Pending: p, PendingBytes: b, Commands: l.cmds.Load()}
}

// Collectors are the log's Prometheus metrics: events written to Redis,
// refused, waits for room in the write queue, what is pending, and the
// commands and round trips the writer sent.
func (l *Log) Collectors() []prometheus.Collector {
	counter := func(name, help string, f func(Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f(l.Stats())) })
	}
	return []prometheus.Collector{
		counter("agentstream_redis_events_written_total", "Events appended to Redis streams.", func(s Stats) uint64 { return s.Written }),
		counter("agentstream_redis_events_dropped_total", "Events refused to their publisher because the write queue stayed full past --redis-queue-wait (Redis slow or unreachable), or unwritten at shutdown; no client saw them.", func(s Stats) uint64 { return s.Dropped }),
		counter("agentstream_redis_events_refused_total", "Events Redis refused because another node holds their sequence numbers (the thread's run lease was taken over); no client saw them.", func(s Stats) uint64 { return s.Refused }),
		counter("agentstream_redis_write_retries_total", "Batches of events sent to Redis again after it failed them.", func(s Stats) uint64 { return s.Retries }),
		counter("agentstream_redis_write_queue_waits_total", "Publishes that waited: the write queue was full (--redis-write-queue or --redis-write-queue-bytes) or Redis was failing its writes.", func(s Stats) uint64 { return s.Waits }),
		counter("agentstream_redis_write_batches_total", "Pipelined round trips that carried events to Redis.", func(s Stats) uint64 { return s.Batches }),
		counter("agentstream_redis_write_commands_total", "Redis commands the event writer sent (XADD, SPUBLISH, PEXPIRE).", func(s Stats) uint64 { return s.Commands }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentstream_redis_events_pending", Help: "Events not yet in Redis: queued, or on the wire."}, func() float64 { return float64(l.Stats().Pending) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentstream_redis_pending_bytes", Help: "The JSON of the events waiting for a Redis writer (bounded by --redis-write-queue-bytes)."}, func() float64 { return float64(l.Stats().PendingBytes) }),
	}
}

// Stores is the log with what it can do, for a server's EngineStores (the
// other stores left to the caller).
func (l *Log) Stores() server.EngineStores {
	return server.EngineStores{Log: l, Durable: l, Heads: l, Tails: l, Producers: l, Room: l, WriteThrough: l, Memory: l.Memory()}
}

// Memory is the in-memory part of the log (for its budget's metrics).
func (l *Log) Memory() *server.MemoryLog { return l.mem }

func (l *Log) fail(err error) {
	if err != nil && l.opts.OnError != nil && !rueidis.IsRedisNil(err) {
		l.opts.OnError(err)
	}
}

// ErrQueueFull is Append's error when Redis did not take events for
// QueueWait: the event is not published.
var ErrQueueFull = fmt.Errorf("%w: the write queue stayed full (Redis slow or unreachable)", ErrUnavailable)

// ErrSuperseded is Append's error, and OnWritten's, when another writer
// holds the thread's next sequence numbers in Redis: this node no longer
// writes the thread.
var ErrSuperseded = errors.New("redisstore: another node wrote the thread's stream past this node's events")

// Append implements server.EventLog: the event is queued for Redis and
// kept in memory; the server delivers it once Redis holds it (OnWritten).
// It never waits: the server waits for room first (WaitRoom), without the
// thread's lock. A queue past twice its bounds (a caller that did not
// wait) refuses the event at once (ErrQueueFull); the end of a run is
// queued past every bound.
func (l *Log) Append(_ context.Context, thread string, e *server.Event) error {
	return l.append(thread, e, nil)
}

// WaitRoom implements server.RoomWaiter: it returns once thread's write
// queue has room (see LogOptions.WriteQueue), or ErrQueueFull when it has
// had none for QueueWait, or ctx's error.
func (l *Log) WaitRoom(ctx context.Context, thread string) error {
	q := l.queue(thread)
	q.mu.Lock()
	if !q.mustWait() || q.refused[thread] {
		q.mu.Unlock()
		return nil // a refused thread's Append says why
	}
	l.waits.Add(1)
	t := time.NewTimer(l.opts.QueueWait)
	defer t.Stop()
	for q.mustWait() {
		room := q.room
		q.mu.Unlock()
		select {
		case <-room:
		case <-t.C:
			l.dropped.Add(1)
			return ErrQueueFull
		case <-l.stop:
			l.dropped.Add(1)
			return ErrQueueFull
		case <-ctx.Done():
			return ctx.Err()
		}
		q.mu.Lock()
	}
	q.mu.Unlock()
	return nil
}

// overshoot is how many events past twice its bound a write queue takes
// from publishers that found room at once (each appends the few events of
// one step under its thread's lock).
const overshoot = 1024

func (l *Log) append(thread string, e *server.Event, by *server.ProducedBy) error {
	q := l.queue(thread)
	q.mu.Lock()
	if q.refused[thread] {
		q.mu.Unlock()
		l.refused.Add(1)
		return ErrSuperseded
	}
	if !e.EndsRun() && (len(q.pending) >= 2*q.bound+overshoot || len(q.pending) > 0 && q.bytes >= 2*q.maxBytes) {
		q.mu.Unlock()
		l.dropped.Add(1)
		return ErrQueueFull
	}
	floor, exact := q.minID(&l.opts, thread, e.Seq, len(e.JSON()))
	q.pending = append(q.pending, entry{thread: thread, e: e, minID: floor, exact: exact, by: by})
	q.bytes += int64(len(e.JSON()))
	q.unsent[thread]++
	// In memory too, under q.mu: a refusal (send) drops both at once.
	// Replays read it once Redis holds it.
	_ = l.mem.Append(context.Background(), thread, e) // never fails
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return nil
}

// mustWait reports whether a publisher must wait: the queue holds its
// share of WriteQueue events or of WriteQueueBytes, or Redis fails the
// writer's batch. The caller holds q.mu.
func (q *writeQueue) mustWait() bool {
	return q.failing || len(q.pending) >= q.bound || len(q.pending) > 0 && q.bytes >= q.maxBytes
}

// stallAfter is how long a batch may go unanswered before publishers wait
// for Redis as for a failing one.
const stallAfter = time.Second

// markStalled is the stall timer's: a batch still unanswered stallAfter
// after it was sent makes publishers wait, as a failing one does (the
// writer clears it once Redis answers). A timer of an earlier batch finds
// a later one, sent less than stallAfter ago, and does nothing.
func (q *writeQueue) markStalled() {
	q.mu.Lock()
	if !q.sentAt.IsZero() && time.Since(q.sentAt) >= stallAfter {
		q.failing = true
	}
	q.mu.Unlock()
}

// setFailing records whether Redis fails the batch on the wire; when it
// takes it again, waiting publishers go on.
func (q *writeQueue) setFailing(failing bool) {
	q.mu.Lock()
	if !failing {
		q.sentAt = time.Time{}
	}
	if q.failing != failing {
		q.failing = failing
		if !failing {
			close(q.room)
			q.room = make(chan struct{})
		}
	}
	q.mu.Unlock()
}

// maxBatch is the most events one pipelined round trip carries.
const maxBatch = 512

// writer sends pending events to Redis in order, in pipelined batches:
// while one batch is on the wire the next gathers.
func (l *Log) writer(q *writeQueue) {
	defer l.writers.Done()
	defer q.done.close()
	defer func() {
		if q.stall != nil {
			q.stall.Stop()
		}
		if q.gatherTimer != nil {
			q.gatherTimer.Stop()
		}
	}()
	for {
		select {
		case <-q.wake:
		case <-l.stop:
			deadline := time.Now().Add(5 * time.Second)
			for l.flush(q, deadline) && time.Now().Before(deadline) {
			}
			q.mu.Lock()
			l.dropped.Add(uint64(len(q.pending)))
			q.pending = nil
			q.mu.Unlock()
			return
		}
		for l.gather(q) && l.flush(q, time.Time{}) {
		}
	}
}

// gather waits, before a batch, until WriteGather has passed since the
// writer's last batch started, unless a full batch is pending; it reports
// false when the Log is closing (the writer then sends what is left).
func (l *Log) gather(q *writeQueue) bool {
	wait := l.opts.WriteGather - time.Since(q.lastSent)
	if wait <= 0 {
		return true
	}
	q.mu.Lock()
	full := len(q.pending) >= maxBatch
	q.mu.Unlock()
	if full {
		return true
	}
	if q.gatherTimer == nil {
		q.gatherTimer = time.NewTimer(wait)
	} else {
		q.gatherTimer.Reset(wait)
	}
	select {
	case <-q.gatherTimer.C:
		return true
	case <-l.stop:
		return false
	}
}

// flush sends up to maxBatch pending events, and sends what Redis failed again until it takes it
// (or, once the Log is closing, until deadline). It reports whether more
// wait.
func (l *Log) flush(q *writeQueue, deadline time.Time) bool {
	q.mu.Lock()
	n := min(len(q.pending), maxBatch)
	batch := make([]entry, n)
	copy(batch, q.pending)
	for _, en := range batch {
		q.bytes -= int64(len(en.e.JSON()))
	}
	q.pending = q.pending[n:]
	if n > 0 {
		q.lastSent = time.Now()
		q.sentAt = q.lastSent
		close(q.room) // waiting publishers: there is room
		q.room = make(chan struct{})
		if q.stall == nil {
			q.stall = time.AfterFunc(stallAfter, q.markStalled)
		} else {
			q.stall.Reset(stallAfter)
		}
	}
	q.sending.Store(int64(n))
	defer q.sending.Store(0)
	if len(q.pending) == 0 {
		q.pending = nil // let a burst's backing array go
	}
	q.mu.Unlock()
	if n == 0 {
		return false
	}
	backoff := 20 * time.Millisecond
	failed := false
	for {
		retry := l.send(q, batch)
		if len(retry) == 0 {
			if failed {
				// Redis may be another instance now (restarted, a
				// replica promoted): the threads written from now on
				// record it (tail.go).
				l.e.ridGen.Add(1)
			}
			q.setFailing(false)
			break
		}
		failed = true
		q.setFailing(true)
		l.retries.Add(1)
		if !deadline.IsZero() && time.Now().After(deadline) {
			l.dropped.Add(uint64(len(retry)))
			l.settle(q, retry)
			break
		}
		var stop <-chan struct{}
		if deadline.IsZero() {
			stop = l.stop
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
			deadline = time.Now().Add(5 * time.Second) // closing: a last 5 s
		}
		backoff = min(2*backoff, time.Second)
		batch = retry
	}
	q.mu.Lock()
	more := len(q.pending) > 0
	q.mu.Unlock()
	return more
}

// settle counts batch's events as no longer unsent.
func (l *Log) settle(q *writeQueue, batch []entry) {
	q.mu.Lock()
	for _, en := range batch {
		if q.unsent[en.thread]--; q.unsent[en.thread] <= 0 {
			delete(q.unsent, en.thread)
		}
	}
	q.mu.Unlock()
}

// fate is what an entry of a batch came to: taken, to be sent again,
// refused, or to be checked (Redis says its id is taken: by this very
// event, sent before, or by another writer's). A thread's later entries
// share the worst fate of its earlier ones (the order is kept).
type fate int

const (
	taken fate = iota
	again
	refused
	check
)

// send writes batch in one pipelined round trip, each event published in
// the command that stores it (appendScript, producedScript), and hands
// what Redis took (or refused) to the deliverer. It returns what is to be
// sent again: for each thread, its events from the first that failed on,
// in order (a later one Redis took is found written when sent again).
func (l *Log) send(q *writeQueue, batch []entry) (retry []entry) {
	c := l.e.c
	segs := segmentsOf(batch)
	cmds := make(rueidis.Commands, 0, len(segs)+8)
	at := make([]int, len(segs)) // the index in cmds of each segment's command
	ttl := l.e.ttlMillis()
	renewEvery := min(time.Minute, l.e.ttl/3)
	now := time.Now()
	if g := l.e.ridGen.Load(); g != q.ridGen {
		q.ridGen = g
		clear(q.expired) // every thread records the new instance with its next events
	}
	for i, sg := range segs {
		en := batch[sg.from]
		k := l.e.key(en.thread, "events")
		at[i] = len(cmds)
		cmds = append(cmds, l.appendCommand(batch[sg.from:sg.to], k, now))
		// The TTLs are renewed once per renewal interval per thread, not
		// per event: a third of the TTL, at most a minute, so a stream
		// being written never expires, one recreated after it expired gets
		// its TTL in the batch that recreates it, and the thread's state
		// (its owner) lives as long as its stream.
		if at, ok := q.expired[en.thread]; !ok || now.Sub(at) > renewEvery {
			q.expired[en.thread] = now
			cmds = append(cmds, c.B().Pexpire().Key(k).Milliseconds(ttl).Build(),
				c.B().Pexpire().Key(l.e.key(en.thread, "state")).Milliseconds(ttl).Build(),
				c.B().Pexpire().Key(l.e.key(en.thread, "producers")).Milliseconds(ttl).Build(),
				c.B().Pexpire().Key(l.e.key(en.thread, "record")).Milliseconds(ttl).Build())
			cmds = append(cmds, c.B().Eval().Script(recordWriterScript).Numkeys(1).Key(l.e.key(en.thread, "writer")).Arg(itoa(uint64(ttl))).Build())
		}
	}
	if len(q.expired) > 4*maxBatch {
		for th, at := range q.expired {
			if now.Sub(at) > renewEvery {
				delete(q.expired, th)
			}
		}
	}
	l.cmds.Add(uint64(len(cmds)))
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.WriteTimeout)
	defer cancel()
	res := c.DoMulti(ctx, cmds...)
	l.batches.Add(1)
	fates := make([]fate, len(batch))
	var checks []int
	for i, sg := range segs {
		l.fatesOf(batch, sg, res[at[i]], fates, &checks)
	}
	if len(checks) > 0 {
		l.check(batch, checks, fates)
	}
	// A thread's events after one to be sent again are sent again too, and
	// those after one refused are refused: its order is kept.
	stuck := map[string]fate{}
	var settled []entry
	var order []string
	took := map[string][]*server.Event{}
	var gone map[string][]*server.Event
	for j, en := range batch {
		f := fates[j]
		if prev, ok := stuck[en.thread]; ok && prev > f {
			f = prev
		}
		switch f {
		case taken:
			if took[en.thread] == nil {
				order = append(order, en.thread)
			}
			took[en.thread] = append(took[en.thread], en.e)
			settled = append(settled, en)
		case again:
			stuck[en.thread] = again
			retry = append(retry, en)
		case refused:
			stuck[en.thread] = refused
			if gone == nil {
				gone = map[string][]*server.Event{}
			}
			gone[en.thread] = append(gone[en.thread], en.e)
			settled = append(settled, en)
		}
	}
	l.written.Add(uint64(len(settled) - countOf(gone)))
	if len(gone) > 0 {
		// The thread's events still queued are refused with them: none
		// may land after another writer's.
		q.mu.Lock()
		for th := range gone {
			q.refused[th] = true
			// Memory holds them too, and the ids will name other events:
			// the thread's events are read from Redis from now on.
			l.mem.Release(context.Background(), th)
		}
		kept := q.pending[:0]
		for _, en := range q.pending {
			if _, ok := gone[en.thread]; ok {
				gone[en.thread] = append(gone[en.thread], en.e)
				q.bytes -= int64(len(en.e.JSON()))
				settled = append(settled, en)
				continue
			}
			kept = append(kept, en)
		}
		clear(q.pending[len(kept):])
		q.pending = kept
		q.mu.Unlock()
		l.refused.Add(uint64(countOf(gone)))
	}
	l.settle(q, settled)
	fn := l.onWritten.Load()
	if !l.opts.DeliverFirst {
		for _, th := range order {
			q.done.hand(fn, th, took[th], nil)
		}
	}
	for th, evs := range gone {
		q.done.hand(fn, th, evs, ErrSuperseded)
	}
	return retry
}

// segment is a run of one thread's entries of a batch (batch[from:to])
// that one command writes: a producer's event alone (producedScript),
// else the thread's consecutive events of the batch with the same src
// (appendScript).
type segment struct{ from, to int }

// segmentsOf cuts batch into segments, in order. A batch is ordered by
// publication, so each thread's events are consecutive runs between other
// threads' only when one publisher is fast; the batch is reordered so that
// each thread's events are together, keeping their order (the threads are
// independent of each other).
func segmentsOf(batch []entry) []segment {
	if len(batch) > 1 {
		// Stable: each thread's events keep their order, and threads
		// keep the order of their first event.
		first := make(map[string]int, 8)
		for i, en := range batch {
			if _, ok := first[en.thread]; !ok {
				first[en.thread] = i
			}
		}
		if len(first) > 1 && len(first) < len(batch) {
			slices.SortStableFunc(batch, func(a, b entry) int { return first[a.thread] - first[b.thread] })
		}
	}
	var segs []segment
	for i, en := range batch {
		if n := len(segs); n > 0 && en.by == nil {
			last := &segs[n-1]
			prev := batch[last.to-1]
			if prev.thread == en.thread && prev.by == nil && prev.e.Source == en.e.Source {
				last.to = i + 1
				continue
			}
		}
		segs = append(segs, segment{i, i + 1})
	}
	return segs
}

// appendCommand is the command that writes run, the entries of one
// segment, to the stream k: producedScript for a producer's event,
// appendScript for the others (publishing each unless the Log does not
// publish). Scripts go by their SHA (EVALSHA), but for an entry sent again
// because Redis did not hold the script (EVAL, which loads it).
func (l *Log) appendCommand(run []entry, k string, now time.Time) rueidis.Completed {
	c := l.e.c
	en := run[0]
	live := "" // the channel to publish on; none without Publish
	if l.opts.Publish {
		live = l.e.key(en.thread, "live")
	}
	if en.by != nil {
		args := []string{itoa(en.e.Seq) + "-0", minIDMode(en.exact), itoa(en.minID), rueidis.BinaryString(en.e.JSON()), en.e.Source, en.by.Producer,
			producedMark(en.e, en.by, now.UnixMilli()), itoa(uint64(l.opts.MaxProducers)), live}
		keys := []string{k, l.e.key(en.thread, "producers")}
		if en.eval {
			return c.B().Eval().Script(producedScript).Numkeys(2).Key(keys...).Arg(args...).Build()
		}
		return c.B().Evalsha().Sha1(producedSHA).Numkeys(2).Key(keys...).Arg(args...).Build()
	}
	args := make([]string, 0, 2+4*len(run))
	args = append(args, live, en.e.Source)
	eval := false
	for _, r := range run {
		args = append(args, itoa(r.e.Seq)+"-0", minIDMode(r.exact), itoa(r.minID), rueidis.BinaryString(r.e.JSON()))
		eval = eval || r.eval
	}
	if eval {
		return c.B().Eval().Script(appendScript).Numkeys(1).Key(k).Arg(args...).Build()
	}
	return c.B().Evalsha().Sha1(appendSHA).Numkeys(1).Key(k).Arg(args...).Build()
}

// minIDMode is an XADD's MINID trimming: approximate (whole nodes of the
// stream, cheap) for the count cap; exact for the byte cap, where a node
// of large events would keep many times the cap.
func minIDMode(exact bool) string {
	if exact {
		return "="
	}
	return "~"
}

// fatesOf sets the fates of segment sg's entries from its command's
// result r; those to be checked are added to checks.
func (l *Log) fatesOf(batch []entry, sg segment, r rueidis.RedisResult, fates []fate, checks *[]int) {
	one := func(j int, err error) {
		switch {
		case err == nil:
			fates[j] = taken
		case isIDTaken(err):
			fates[j] = check
			*checks = append(*checks, j)
		case isTransient(err):
			l.fail(err)
			fates[j] = again
		default:
			l.fail(fmt.Errorf("thread %s: Redis refused event %d: %w", batch[j].thread, batch[j].e.Seq, err))
			fates[j] = refused
		}
	}
	err := r.Error()
	if err != nil && isNoScript(err) {
		for j := sg.from; j < sg.to; j++ {
			batch[j].eval = true // sent again with the script, which loads it
			fates[j] = again
		}
		return
	}
	if err == nil && batch[sg.from].by == nil {
		// appendScript's reply: one string per event tried.
		var msgs []string
		if msgs, err = r.AsStrSlice(); err == nil {
			for j := sg.from; j < sg.to; j++ {
				switch i := j - sg.from; {
				case i >= len(msgs): // not tried: an earlier event's error stopped the run
					fates[j] = again
				case msgs[i] == "":
					fates[j] = taken
				default:
					one(j, scriptError(msgs[i]))
				}
			}
			return
		}
	}
	for j := sg.from; j < sg.to; j++ {
		one(j, err)
	}
}

func countOf(m map[string][]*server.Event) int {
	n := 0
	for _, evs := range m {
		n += len(evs)
	}
	return n
}

// check decides the fate of the entries (indexes in batch) whose XADD Redis
// refused because their id is taken: taken when the stream holds this very
// event (a batch sent again after Redis had taken it), refused when it
// holds another (another writer's), again when it cannot be read.
func (l *Log) check(batch []entry, checks []int, fates []fate) {
	c := l.e.c
	cmds := make(rueidis.Commands, len(checks))
	for i, j := range checks {
		id := itoa(batch[j].e.Seq) + "-0"
		cmds[i] = c.B().Xrange().Key(l.e.key(batch[j].thread, "events")).Start(id).End(id).Build()
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.ReadTimeout)
	defer cancel()
	for i, r := range c.DoMulti(ctx, cmds...) {
		j := checks[i]
		entries, err := r.AsXRange()
		switch {
		case err != nil:
			l.fail(err)
			fates[j] = again
		case len(entries) == 1 && entries[0].FieldValues["e"] == string(batch[j].e.JSON()):
			fates[j] = taken
		case len(entries) == 0:
			// Trimmed away, or the stream went past it with this id
			// never written: another writer's stream either way.
			fates[j] = refused
		default:
			fates[j] = refused
		}
	}
}

// isIDTaken reports whether err is XADD's refusal of an id not above the
// stream's last.
func isIDTaken(err error) bool {
	var se scriptError
	if errors.As(err, &se) {
		return idTaken(string(se))
	}
	re, ok := rueidis.IsRedisErr(err)
	return ok && idTaken(re.Error())
}

// isTransient reports whether a failed command may succeed if sent again:
// the connection failed or timed out, or Redis is loading, busy, out of
// memory, a replica, or between cluster states.
func isTransient(err error) bool {
	var se scriptError
	if errors.As(err, &se) {
		return transientMsg(string(se))
	}
	re, ok := rueidis.IsRedisErr(err)
	if !ok {
		return true
	}
	return transientMsg(re.Error())
}

// delivery is a writer's hand-over of what Redis took to the server
// (OnWritten), on a goroutine of its own: the server takes the thread's
// lock to deliver, which a publisher may hold while it waits for room in
// the writer's queue; the writer must not wait for it.
type delivery struct {
	mu     sync.Mutex
	items  []written
	busy   bool // the deliverer holds items it has not delivered yet
	wake   chan struct{}
	closed bool
}

// hand delivers what Redis took through fn at once, from the writer, when
// nothing of the writer's waits for the deliverer and the thread is free;
// else it pushes it to the deliverer (a thread's order is kept either
// way).
func (d *delivery) hand(fn *func(string, []*server.Event, error, bool) bool, thread string, events []*server.Event, err error) {
	if fn == nil {
		return
	}
	d.mu.Lock()
	if len(d.items) == 0 && !d.busy && (*fn)(thread, events, err, false) {
		d.mu.Unlock()
		return
	}
	d.mu.Unlock()
	d.push(thread, events, err)
}

type written struct {
	thread string
	events []*server.Event
	err    error
}

func newDelivery() *delivery { return &delivery{wake: make(chan struct{}, 1)} }

func (d *delivery) push(thread string, events []*server.Event, err error) {
	d.mu.Lock()
	d.items = append(d.items, written{thread, events, err})
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *delivery) close() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// deliverer calls OnWritten's function with what q's writer handed over,
// in order, until the writer stops.
func (l *Log) deliverer(q *writeQueue) {
	defer l.writers.Done()
	d := q.done
	for range d.wake {
		d.mu.Lock()
		items, closed := d.items, d.closed
		d.items = nil
		d.busy = len(items) > 0
		d.mu.Unlock()
		if fn := l.onWritten.Load(); fn != nil {
			for _, w := range items {
				(*fn)(w.thread, w.events, w.err, true)
			}
		}
		d.mu.Lock()
		d.busy = false
		d.mu.Unlock()
		if closed {
			d.mu.Lock()
			rest := len(d.items)
			d.mu.Unlock()
			if rest == 0 {
				return
			}
			select {
			case d.wake <- struct{}{}:
			default:
			}
		}
	}
}

// After implements server.EventLog: events after seq, from Redis as far
// as memory does not hold them, then from memory.
func (l *Log) After(ctx context.Context, thread string, seq uint64, fn func(*server.Event) bool) error {
	stopped := false
	each := func(e *server.Event) bool {
		seq = e.Seq
		stopped = !fn(e)
		return !stopped
	}
	// The server reads without the thread's lock, so memory may let go of
	// its oldest events (appends trim it) between the look at its oldest
	// and the read: the stream has them, and is read again for them (a
	// few times at most: a hole the stream has too is the caller's to
	// announce).
	for round := 0; ; round++ {
		memOldest, _ := l.mem.Oldest(ctx, thread)
		if memOldest == 0 || memOldest > seq+1 {
			// Memory starts later than the cursor (or holds nothing): the
			// stream has what comes before.
			stop := uint64(0) // up to memory's oldest, exclusive
			if memOldest > 0 {
				stop = memOldest - 1
			}
			if _, err := l.fromRedis(ctx, thread, seq, stop, each); err != nil {
				return err // the events before memory's are not all there: a gap
			}
			if stopped || memOldest == 0 {
				return nil
			}
			seq = max(seq, memOldest-1)
		}
		if round == 3 {
			return l.mem.After(ctx, thread, seq, each)
		}
		if trimmed, err := l.mem.AfterHeld(ctx, thread, seq, each); err != nil || !trimmed {
			return err
		}
	}
}

// fromRedis calls fn for the stream's events after seq, up to stop (0: to
// the end), oldest first; it reports false when fn stopped, and an error
// when the stream could not be read.
func (l *Log) fromRedis(ctx context.Context, thread string, seq, stop uint64, fn func(*server.Event) bool) (bool, error) {
	if stop != 0 && stop <= seq {
		return true, nil
	}
	c := l.e.c
	k := l.e.key(thread, "events")
	start := "(" + itoa(seq) + "-0"
	end := "+"
	if stop != 0 {
		end = itoa(stop) + "-0"
	}
	ctx, cancel := context.WithTimeout(ctx, l.opts.ReadTimeout)
	defer cancel()
	for {
		entries, err := c.Do(ctx, c.B().Xrange().Key(k).Start(start).End(end).Count(1024).Build()).AsXRange()
		if err != nil {
			l.fail(err)
			return true, err
		}
		for _, en := range entries {
			ev, err := server.DecodeEvent([]byte(en.FieldValues["e"]))
			if err != nil {
				l.fail(err)
				continue
			}
			if !fn(ev) {
				return false, nil
			}
		}
		if len(entries) < 1024 {
			return true, nil
		}
		start = "(" + entries[len(entries)-1].ID
	}
}

// Oldest implements server.EventLog: the oldest event still held, in the
// stream or in memory.
func (l *Log) Oldest(ctx context.Context, thread string) (uint64, error) {
	m, _ := l.mem.Oldest(ctx, thread)
	if m == 1 {
		return 1, nil // nothing comes before the first event: no need to ask Redis
	}
	c := l.e.c
	ctx, cancel := context.WithTimeout(ctx, l.opts.ReadTimeout)
	defer cancel()
	entries, err := c.Do(ctx, c.B().Xrange().Key(l.e.key(thread, "events")).Start("-").End("+").Count(1).Build()).AsXRange()
	if err != nil {
		l.fail(err)
		return 0, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if len(entries) == 1 {
		if s, ok := seqOf(entries[0].ID); ok && (m == 0 || s < m) {
			return s, nil
		}
	}
	return m, nil
}

// Stored implements server.DurableLog: the stream's events after seq.
func (l *Log) Stored(ctx context.Context, thread string, seq uint64, fn func(*server.Event) bool) error {
	_, err := l.fromRedis(ctx, thread, seq, 0, fn)
	return err
}

// Flushed reports whether every event appended for the thread has been
// sent to Redis (written, or failed): a node gives up a thread's run lease
// only then, so that another node that takes it finds the run's end in
// the stream.
func (l *Log) Flushed(thread string) bool {
	q := l.queue(thread)
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.unsent[thread] == 0
}

// awaitFlushed waits, polling, until flushed (a Log's Flushed) reports
// thread's queued events all written to Redis, or ctx ends; it reports
// whether they were. A nil flushed has nothing to wait for.
func awaitFlushed(ctx context.Context, flushed func(string) bool, thread string) bool {
	if flushed == nil || flushed(thread) {
		return true
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !flushed(thread) {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// Cache implements server.DurableLog: an event another node wrote is kept
// in memory only.
func (l *Log) Cache(ctx context.Context, thread string, e *server.Event) {
	_ = l.mem.Append(ctx, thread, e)
}

// Len implements server.EventLog: the events held in memory.
func (l *Log) Len(ctx context.Context, thread string) int { return l.mem.Len(ctx, thread) }

// Release implements server.EventLog: the thread went idle, so its
// events leave memory; the stream keeps them.
func (l *Log) Release(ctx context.Context, thread string) {
	l.mem.Release(ctx, thread)
	q := l.queue(thread)
	q.mu.Lock()
	delete(q.trims, thread)
	q.mu.Unlock()
}

// Head implements server.DurableLog from the stream's newest entry, or
// from an event still on its way there.
func (l *Log) Head(ctx context.Context, thread string) (epoch string, seq uint64, err error) {
	h := l.Heads(ctx, []string{thread})[0]
	return h.Epoch, h.Seq, h.Err
}

// headsPerRoundTrip is how many streams' heads Heads reads in one
// pipelined round trip.
const headsPerRoundTrip = 1000

// Heads implements server.HeadsReader: Head for each thread, those not
// on their way to Redis read in pipelined round trips of
// headsPerRoundTrip (a node following thousands of threads catches up on
// them in a few round trips, not one each).
func (l *Log) Heads(ctx context.Context, threads []string) []server.Head {
	out := make([]server.Head, len(threads))
	var ask []int // indexes of the threads to read from Redis
	for i, th := range threads {
		if h, ok := l.pendingHead(th); ok {
			out[i] = h
		} else {
			ask = append(ask, i)
		}
	}
	for len(ask) > 0 {
		part := ask[:min(len(ask), headsPerRoundTrip)]
		ask = ask[len(part):]
		cmds := make(rueidis.Commands, len(part))
		for j, i := range part {
			cmds[j] = l.headCommand(threads[i])
		}
		rctx, cancel := context.WithTimeout(ctx, l.opts.ReadTimeout)
		for j, r := range l.e.c.DoMulti(rctx, cmds...) {
			out[part[j]] = l.headOf(r)
		}
		cancel()
	}
	return out
}

// pendingHead is the thread's last event still on its way to Redis, if
// any. The server reads the head to go on from where the stream stands:
// refusing the thread's events (another writer's ids) ends here.
func (l *Log) pendingHead(thread string) (server.Head, bool) {
	q := l.queue(thread)
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.refused, thread)
	for i := len(q.pending) - 1; i >= 0; i-- {
		if en := q.pending[i]; en.thread == thread {
			return server.Head{Epoch: en.e.Epoch(), Seq: en.e.Seq}, true
		}
	}
	return server.Head{}, false
}

// headCommand reads the thread stream's newest entry.
func (l *Log) headCommand(thread string) rueidis.Completed {
	c := l.e.c
	return c.B().Xrevrange().Key(l.e.key(thread, "events")).End("+").Start("-").Count(1).Build()
}

// headOf is the head headCommand's reply r names.
func (l *Log) headOf(r rueidis.RedisResult) server.Head {
	entries, err := r.AsXRange()
	if err != nil {
		l.fail(err)
		return server.Head{Err: err}
	}
	if len(entries) == 0 {
		return server.Head{}
	}
	ev, err := server.DecodeEvent([]byte(entries[0].FieldValues["e"]))
	if err != nil {
		l.fail(err)
		return server.Head{Err: err}
	}
	return server.Head{Epoch: ev.Epoch(), Seq: ev.Seq}
}

func seqOf(id string) (uint64, bool) {
	s, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

package redisstore

import (
	"context"
	"fmt"
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
	// the node's publishers: they are slowed to its pace), up to
	// QueueWait; when that passes, or while Redis fails, the event is
	// kept in memory only and counted as dropped, rather than making
	// publishers wait for an unreachable Redis. The end of a run (its root
	// lifecycle) is queued past the bound, never dropped for it: other
	// nodes would take a run without an end for one whose node died.
	WriteQueue int
	// WriteQueueBytes bounds the same queue by the events' JSON
	// (DefaultWriteQueueBytes), shared evenly among the writers; a
	// publisher finding either bound reached waits as above. An event
	// larger than a writer's share is still queued when the queue is
	// empty.
	WriteQueueBytes int64
	// QueueWait is how long a publisher waits for room in a full write
	// queue (WriteTimeout).
	QueueWait time.Duration
	// OnError, when set, hears of every failed Redis command.
	OnError func(error)
	// WriteTimeout bounds each pipelined batch (5s), ReadTimeout each read
	// (2s): the replays and the head of a thread created again.
	WriteTimeout, ReadTimeout time.Duration
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
	dropped atomic.Uint64
	waits   atomic.Uint64
	written atomic.Uint64
	batches atomic.Uint64
	cmds    atomic.Uint64
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
	room     chan struct{} // closed (and replaced) when the writer takes a batch; guarded by mu
	failing  atomic.Bool   // the last batch failed: a full queue drops at once
	sending  atomic.Int64  // events of the batch on the wire

	expired map[string]time.Time   // when each thread's keys last got their TTL; the writer's
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

var _ server.DurableLog = (*Log)(nil)

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
		opts.QueueWait = opts.WriteTimeout
	}
	if opts.ReadTimeout <= 0 {
		opts.ReadTimeout = 2 * time.Second
	}
	if opts.Writers <= 0 {
		opts.Writers = DefaultWriters
	}
	l := &Log{e: e, mem: server.NewMemoryLog(opts.MaxEvents, opts.MaxBytes), opts: opts, stop: make(chan struct{})}
	l.mem.SetTotalBytes(opts.TotalBytes)
	for range opts.Writers {
		q := &writeQueue{bound: max(1, (opts.WriteQueue+opts.Writers-1)/opts.Writers),
			maxBytes: max(1, (opts.WriteQueueBytes+int64(opts.Writers)-1)/int64(opts.Writers)),
			wake:     make(chan struct{}, 1), room: make(chan struct{}), expired: map[string]time.Time{}, unsent: map[string]int{}, trims: map[string]*streamTrim{}}
		l.queues = append(l.queues, q)
		l.writers.Add(1)
		go l.writer(q)
	}
	return l
}

// Close sends what is still pending to Redis (within 5 s) and stops the
// writers.
func (l *Log) Close() {
	close(l.stop)
	l.writers.Wait()
}

// Stats are the log's counters.
type Stats struct {
	Written uint64 // events appended to Redis streams
	Batches uint64 // the pipelined round trips that carried them
	Dropped uint64 // events not written to Redis (the queue stayed full, or Redis failed)
	Waits   uint64 // appends that waited for room in the write queue
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
	return Stats{Written: l.written.Load(), Batches: l.batches.Load(), Dropped: l.dropped.Load(), Waits: l.waits.Load(), Pending: p, PendingBytes: b, Commands: l.cmds.Load()}
}

// Collectors are the log's Prometheus metrics: events written to Redis,
// dropped from it, waits for room in the write queue, what is pending, and
// the commands and round trips the writer sent.
func (l *Log) Collectors() []prometheus.Collector {
	counter := func(name, help string, f func(Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f(l.Stats())) })
	}
	return []prometheus.Collector{
		counter("agentstream_redis_events_written_total", "Events appended to Redis streams.", func(s Stats) uint64 { return s.Written }),
		counter("agentstream_redis_events_dropped_total", "Events kept in memory only: the write queue stayed full past --redis-queue-wait, or Redis failed.", func(s Stats) uint64 { return s.Dropped }),
		counter("agentstream_redis_write_queue_waits_total", "Publishes that found the write queue full (--redis-write-queue or --redis-write-queue-bytes) and waited for room.", func(s Stats) uint64 { return s.Waits }),
		counter("agentstream_redis_write_batches_total", "Pipelined round trips that carried events to Redis.", func(s Stats) uint64 { return s.Batches }),
		counter("agentstream_redis_write_commands_total", "Redis commands the event writer sent (XADD, SPUBLISH, PEXPIRE).", func(s Stats) uint64 { return s.Commands }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentstream_redis_events_pending", Help: "Events not yet in Redis: queued, or on the wire."}, func() float64 { return float64(l.Stats().Pending) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentstream_redis_pending_bytes", Help: "The JSON of the events waiting for a Redis writer (bounded by --redis-write-queue-bytes)."}, func() float64 { return float64(l.Stats().PendingBytes) }),
	}
}

// Memory is the in-memory part of the log (for its budget's metrics).
func (l *Log) Memory() *server.MemoryLog { return l.mem }

func (l *Log) fail(err error) {
	if err != nil && l.opts.OnError != nil && !rueidis.IsRedisNil(err) {
		l.opts.OnError(err)
	}
}

// Append implements server.EventLog: the event is kept in memory at once
// and queued for Redis; when the queue is full it waits for room (see
// LogOptions.WriteQueue), at most QueueWait. An event it cannot queue is
// kept in memory only and counted (Stats.Dropped): Append reports no
// error, and what the publisher sees of a Redis that does not take its
// events is the engine's health (the server unavailable) rather than a
// failed emitter.
func (l *Log) Append(_ context.Context, thread string, e *server.Event) error {
	_ = l.mem.Append(context.Background(), thread, e) // never fails
	q := l.queue(thread)
	q.mu.Lock()
	if q.full() && !e.EndsRun() {
		l.waits.Add(1)
		var deadline <-chan time.Time
		for q.full() {
			if q.failing.Load() {
				q.mu.Unlock()
				l.dropped.Add(1)
				return nil
			}
			if deadline == nil {
				t := time.NewTimer(l.opts.QueueWait)
				defer t.Stop()
				deadline = t.C
			}
			room := q.room
			q.mu.Unlock()
			select {
			case <-room:
			case <-deadline:
				l.dropped.Add(1)
				return nil
			case <-l.stop:
				l.dropped.Add(1)
				return nil
			}
			q.mu.Lock()
		}
	}
	floor, exact := q.minID(&l.opts, thread, e.Seq, len(e.JSON()))
	q.pending = append(q.pending, entry{thread: thread, e: e, minID: floor, exact: exact})
	q.bytes += int64(len(e.JSON()))
	q.unsent[thread]++
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return nil
}

// full reports whether a publisher must wait for room: the queue holds its
// share of WriteQueue events or of WriteQueueBytes. The caller holds q.mu.
func (q *writeQueue) full() bool {
	return len(q.pending) >= q.bound || len(q.pending) > 0 && q.bytes >= q.maxBytes
}

// maxBatch is the most events one pipelined round trip carries.
const maxBatch = 512

// writer sends pending events to Redis in order, in pipelined batches:
// while one batch is on the wire the next gathers.
func (l *Log) writer(q *writeQueue) {
	defer l.writers.Done()
	for {
		select {
		case <-q.wake:
		case <-l.stop:
			deadline := time.Now().Add(5 * time.Second)
			for l.flush(q) && time.Now().Before(deadline) {
			}
			return
		}
		for l.flush(q) {
		}
	}
}

// flush sends up to maxBatch pending events; it reports whether more wait.
func (l *Log) flush(q *writeQueue) bool {
	q.mu.Lock()
	n := min(len(q.pending), maxBatch)
	batch := make([]entry, n)
	copy(batch, q.pending)
	for _, en := range batch {
		q.bytes -= int64(len(en.e.JSON()))
	}
	q.pending = q.pending[n:]
	if n > 0 {
		close(q.room) // waiting publishers: there is room
		q.room = make(chan struct{})
	}
	q.sending.Store(int64(n))
	defer q.sending.Store(0)
	if len(q.pending) == 0 {
		q.pending = nil // let a burst's backing array go
	}
	more := len(q.pending) > 0
	q.mu.Unlock()
	if n == 0 {
		return false
	}
	c := l.e.c
	cmds := make(rueidis.Commands, 0, 2*n)
	var isAdd []bool // which of cmds are XADDs (a command is recycled once sent: it cannot be asked)
	ttl := l.e.ttlMillis()
	renewEvery := min(time.Minute, l.e.ttl/3)
	now := time.Now()
	adds := 0
	for _, en := range batch {
		k := l.e.key(en.thread, "events")
		// Approximate trimming (whole nodes of the stream, cheap) for the
		// count cap; exact for the byte cap, where a node of large events
		// would keep many times the cap.
		id, floor, v := itoa(en.e.Seq)+"-0", itoa(en.minID), rueidis.BinaryString(en.e.JSON())
		var add rueidis.Completed
		if en.exact {
			add = c.B().Xadd().Key(k).Minid().Exact().Threshold(floor).Id(id).FieldValue().FieldValue("e", v).Build()
		} else {
			add = c.B().Xadd().Key(k).Minid().Almost().Threshold(floor).Id(id).FieldValue().FieldValue("e", v).Build()
		}
		cmds = append(cmds, add)
		isAdd = append(isAdd, true)
		adds++
		if l.opts.Publish {
			cmds = append(cmds, c.B().Spublish().Channel(l.e.key(en.thread, "live")).Message(rueidis.BinaryString(en.e.JSON())).Build())
			isAdd = append(isAdd, false)
		}
		// The TTL is renewed once per renewal interval per thread, not per
		// event: a third of the TTL, at most a minute, so a stream being
		// written never expires, and one recreated after it expired gets
		// its TTL in the batch that recreates it.
		if at, ok := q.expired[en.thread]; !ok || now.Sub(at) > renewEvery {
			q.expired[en.thread] = now
			cmds = append(cmds, c.B().Pexpire().Key(k).Milliseconds(ttl).Build())
			isAdd = append(isAdd, false)
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
	failed := uint64(0)
	for i, r := range c.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			l.fail(err)
			if isAdd[i] {
				failed++
			}
		}
	}
	q.failing.Store(failed > 0)
	q.mu.Lock()
	for _, en := range batch {
		if q.unsent[en.thread]--; q.unsent[en.thread] <= 0 {
			delete(q.unsent, en.thread)
		}
	}
	q.mu.Unlock()
	l.batches.Add(1)
	l.written.Add(uint64(adds) - failed)
	l.dropped.Add(failed)
	return more
}

// After implements server.EventLog: events after seq, from Redis as far
// as memory does not hold them, then from memory.
func (l *Log) After(ctx context.Context, thread string, seq uint64, fn func(*server.Event) bool) error {
	memOldest, _ := l.mem.Oldest(ctx, thread)
	if memOldest == 0 || memOldest > seq+1 {
		// Memory starts later than the cursor (or holds nothing): the
		// stream has what comes before.
		stop := uint64(0) // up to memory's oldest, exclusive
		if memOldest > 0 {
			stop = memOldest - 1
		}
		cont, err := l.fromRedis(ctx, thread, seq, stop, fn)
		if err != nil {
			return err // the events before memory's are not all there: a gap
		}
		if !cont || memOldest == 0 {
			return nil
		}
		seq = memOldest - 1
	}
	return l.mem.After(ctx, thread, seq, fn)
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
	c := l.e.c
	ctx, cancel := context.WithTimeout(ctx, l.opts.ReadTimeout)
	defer cancel()
	entries, err := c.Do(ctx, c.B().Xrange().Key(l.e.key(thread, "events")).Start("-").End("+").Count(1).Build()).AsXRange()
	if err != nil {
		l.fail(err)
		return 0, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	m, _ := l.mem.Oldest(ctx, thread)
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

// Cache implements server.DurableLog: an event another node wrote is kept
// in memory only.
func (l *Log) Cache(thread string, e *server.Event) {
	_ = l.mem.Append(context.Background(), thread, e)
}

// Len implements server.EventLog: the events held in memory.
func (l *Log) Len(thread string) int { return l.mem.Len(thread) }

// Release implements server.EventLog: the thread went idle, so its
// events leave memory; the stream keeps them.
func (l *Log) Release(thread string) {
	l.mem.Release(thread)
	q := l.queue(thread)
	q.mu.Lock()
	delete(q.trims, thread)
	q.mu.Unlock()
}

// Head implements server.DurableLog from the stream's newest entry, or
// from an event still on its way there.
func (l *Log) Head(ctx context.Context, thread string) (epoch string, seq uint64, err error) {
	q := l.queue(thread)
	q.mu.Lock()
	for i := len(q.pending) - 1; i >= 0; i-- {
		if en := q.pending[i]; en.thread == thread {
			q.mu.Unlock()
			return en.e.Epoch(), en.e.Seq, nil
		}
	}
	q.mu.Unlock()
	c := l.e.c
	ctx, cancel := context.WithTimeout(ctx, l.opts.ReadTimeout)
	defer cancel()
	entries, err := c.Do(ctx, c.B().Xrevrange().Key(l.e.key(thread, "events")).End("+").Start("-").Count(1).Build()).AsXRange()
	if err != nil {
		l.fail(err)
		return "", 0, err
	}
	if len(entries) == 0 {
		return "", 0, nil
	}
	ev, err := server.DecodeEvent([]byte(entries[0].FieldValues["e"]))
	if err != nil {
		l.fail(err)
		return "", 0, err
	}
	return ev.Epoch(), ev.Seq, nil
}

func seqOf(id string) (uint64, bool) {
	s, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"
)

// Producer ingest over Redis Streams: producers XADD entries to one
// stream, and the nodes append each entry's event to its thread.
//
//   - An entry has the fields `thread` (the thread's id) and `event` (one
//     protocol event as clients receive it, without seq and event_id,
//     params.timestamp optional), checked as the HTTP ingest checks them.
//   - The nodes read the stream through one consumer group, one node at a
//     time: the one holding the key PREFIX:{ingest:STREAM}:reader (taken
//     with SET NX PX, renewed every third of IngestOptions.LeaseTTL).
//     One reader at a time is what keeps each thread's entries in stream
//     order (two readers would append one thread's entries concurrently),
//     and a thread is appended to by the node holding its run lease, which
//     the reader takes per batch as the HTTP ingest does. The others stand
//     by and take over within LeaseTTL when the reader dies.
//   - An entry is acknowledged (XACK) only once its event is in the
//     thread's Redis stream (the log flushed it). A node that dies before
//     that leaves the entries pending in the group; the next reader claims
//     them (XAUTOCLAIM) before it reads new ones.
//   - Appended once: the thread's stream entry of an ingested event holds
//     the ingest entry's id (field `src`, written by the same XADD as the
//     event), so a reader taking up pending entries reads the newest `src`
//     of each of their threads and skips the entries up to it: they were
//     appended before the crash, only not acknowledged.
//   - An entry that is not valid (no thread, an event the schema refuses,
//     a thread id the server refuses) goes to the dead-letter stream with
//     its fields, the reason and its id, and is acknowledged. An entry
//     whose thread another node writes (a run goes on there), or that
//     fails for a reason that may pass (Redis away), stays pending with
//     the rest of its thread's entries, in order, and is tried again each
//     second; after MaxWait it goes to the dead-letter stream too.

// The defaults of IngestOptions.
const (
	DefaultIngestGroup     = "agentstream"
	DefaultIngestBatch     = 512
	DefaultIngestMaxWait   = time.Minute
	ingestSourceScanLength = 4096 // how far back a thread's stream is read for its last `src`
)

// IngestOptions configure a node's reading of the ingest stream.
type IngestOptions struct {
	// Stream is the key producers XADD to (required).
	Stream string
	// Group is the consumer group the nodes read it through
	// (DefaultIngestGroup), created at the stream's start when missing.
	Group string
	// DeadLetter is the stream refused entries go to (Stream + ":dead").
	DeadLetter string
	// Batch is how many entries are read at once (DefaultIngestBatch).
	Batch int
	// MaxEventBytes refuses larger events (to the dead-letter stream).
	MaxEventBytes int
	// Decoder checks the events (its limits: the HTTP ingest's).
	Decoder protocol.Decoder
	// LeaseTTL bounds how long a dead reader's turn lasts
	// (DefaultLeaseTTL).
	LeaseTTL time.Duration
	// MaxWait is how long an entry waits for its thread to take it
	// (another node writes it, or Redis is away) before it goes to the
	// dead-letter stream (DefaultIngestMaxWait).
	MaxWait time.Duration
	// OnError, when set, hears of failed Redis commands and of refused
	// entries.
	OnError func(error)
	// Entries, when set, reads the entries of other kinds than thread +
	// event (another wire's, such as a job's envelopes: jobs.IngestEntry):
	// handled is false for an entry it does not know, which is then read
	// as thread + event; reason refuses one it knows.
	Entries func(fields map[string]string) (thread string, event protocol.ProducerEvent, handled bool, reason string)
}

// Publisher appends a producer's batch to a thread: *server.Server.
type Publisher interface {
	Publish(ctx context.Context, threadID string, b server.ProducerBatch) (*server.PublishResult, error)
}

// IngestStats count what a node's ingest did.
type IngestStats struct {
	Appended    uint64 // entries whose event was appended
	Duplicates  uint64 // pending entries found appended already (a crash before XACK)
	DeadLetters uint64 // entries sent to the dead-letter stream
	Retries     uint64 // entries left pending to be tried again
	Reader      bool   // whether this node reads the stream now
}

// Ingest reads the ingest stream on one node (see above). Engine.Ingest
// makes it; Close stops it.
type Ingest struct {
	e     *Engine
	pub   Publisher
	opts  IngestOptions
	node  string
	flush func(thread string) bool

	appended, duplicates, deadLetters, retries atomic.Uint64
	reader                                     atomic.Bool

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// Ingest starts reading the ingest stream for pub (the node's server): it
// competes for the reader's turn with the other nodes and, while it holds
// it, appends the entries. Close it before the server.
func (e *Engine) Ingest(pub Publisher, opts IngestOptions) (*Ingest, error) {
	if opts.Stream == "" {
		return nil, errors.New("redisstore: the ingest stream needs a name")
	}
	if opts.Group == "" {
		opts.Group = DefaultIngestGroup
	}
	if opts.DeadLetter == "" {
		opts.DeadLetter = opts.Stream + ":dead"
	}
	if opts.Batch <= 0 {
		opts.Batch = DefaultIngestBatch
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = DefaultLeaseTTL
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = DefaultIngestMaxWait
	}
	if opts.MaxEventBytes <= 0 {
		opts.MaxEventBytes = 1 << 20
	}
	e.Stores()
	in := &Ingest{e: e, pub: pub, opts: opts, node: e.Node(), flush: e.parts.log.Flushed, stop: make(chan struct{}), done: make(chan struct{})}
	go in.loop()
	return in, nil
}

// Stats returns the ingest's counts.
func (in *Ingest) Stats() IngestStats {
	return IngestStats{Appended: in.appended.Load(), Duplicates: in.duplicates.Load(), DeadLetters: in.deadLetters.Load(),
		Retries: in.retries.Load(), Reader: in.reader.Load()}
}

// Collectors are the ingest's Prometheus metrics.
func (in *Ingest) Collectors() []prometheus.Collector {
	counter := func(name, help string, f func(IngestStats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f(in.Stats())) })
	}
	return []prometheus.Collector{
		counter("agentstream_redis_ingest_appended_total", "Entries of the Redis ingest stream whose event this node appended to its thread.", func(s IngestStats) uint64 { return s.Appended }),
		counter("agentstream_redis_ingest_duplicates_total", "Pending ingest entries found appended already (a reader died before acknowledging them): skipped.", func(s IngestStats) uint64 { return s.Duplicates }),
		counter("agentstream_redis_ingest_dead_letters_total", "Ingest entries refused into the dead-letter stream (not valid, or their thread did not take them within --ingest-max-wait).", func(s IngestStats) uint64 { return s.DeadLetters }),
		counter("agentstream_redis_ingest_retries_total", "Ingest entries left pending to be tried again (their thread was written by another node, or Redis failed).", func(s IngestStats) uint64 { return s.Retries }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentstream_redis_ingest_reader", Help: "1 while this node is the one reading the Redis ingest stream."}, func() float64 {
			if in.reader.Load() {
				return 1
			}
			return 0
		}),
	}
}

// Close stops reading and gives up the reader's turn (the entries this
// node holds stay pending for the next reader).
func (in *Ingest) Close() {
	in.once.Do(func() {
		close(in.stop)
		<-in.done
	})
}

func (in *Ingest) fail(err error) {
	if err != nil && in.opts.OnError != nil && !rueidis.IsRedisNil(err) {
		in.opts.OnError(err)
	}
}

func (in *Ingest) readerKey() string { return in.e.prefix + ":{ingest:" + in.opts.Stream + "}:reader" }

// takeTurnScript takes the reader's turn when free, renews it for its
// holder; 1 when ARGV[1] holds it.
var takeTurnScript = rueidis.NewLuaScript(`
local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
elseif v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0`)

// turn takes or renews the reader's turn.
func (in *Ingest) turn() bool {
	ctx, cancel := context.WithTimeout(context.Background(), in.opts.LeaseTTL/3)
	defer cancel()
	n, err := takeTurnScript.Exec(ctx, in.e.c, []string{in.readerKey()}, []string{in.node, strconv.FormatInt(in.opts.LeaseTTL.Milliseconds(), 10)}).AsInt64()
	in.fail(err)
	return err == nil && n == 1
}

// loop waits for the reader's turn and reads while it holds it.
func (in *Ingest) loop() {
	defer close(in.done)
	defer in.giveUp()
	for {
		if in.turn() {
			in.read()
		}
		select {
		case <-in.stop:
			return
		case <-time.After(in.opts.LeaseTTL / 3):
		}
	}
}

// giveUp deletes the reader's turn if this node holds it.
func (in *Ingest) giveUp() {
	in.reader.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	in.fail(releaseTurnScript.Exec(ctx, in.e.c, []string{in.readerKey()}, []string{in.node}).Error())
}

var releaseTurnScript = rueidis.NewLuaScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

// read is the reader's turn: the group's pending entries first (a dead
// reader's, this node's own from before), then new ones, until the turn
// is lost or the ingest stops.
func (in *Ingest) read() {
	in.reader.Store(true)
	defer in.reader.Store(false)
	// The turn is renewed by a goroutine of its own, so that a long batch
	// does not let it lapse; held ends when it could not be.
	held, lost := context.WithCancel(context.Background())
	var keeper sync.WaitGroup
	keeper.Add(1)
	go func() {
		defer keeper.Done()
		in.keepTurn(held, lost)
	}()
	defer func() {
		lost()
		keeper.Wait()
	}()
	if err := in.ensureGroup(); err != nil {
		in.fail(err)
		return
	}
	if err := in.claimPending("0"); err != nil {
		in.fail(err)
		return
	}
	r := &pass{in: in, held: held, blocked: map[string]bool{}, since: map[string]time.Time{}, applied: map[string]string{}}
	recheck := time.Now()                    // when this node's pending entries are read again (zero: none wait)
	orphans := time.Now().Add(orphanedAfter) // when entries left by a reader that lost its turn are claimed
	for {
		select {
		case <-in.stop:
			return
		case <-held.Done(): // another node reads now
			return
		default:
		}
		if time.Now().After(orphans) {
			if err := in.claimPending(strconv.FormatInt(orphanedAfter.Milliseconds(), 10)); err != nil {
				in.fail(err)
			} else if recheck.IsZero() {
				recheck = time.Now()
			}
			orphans = time.Now().Add(orphanedAfter / 4)
		}
		if !recheck.IsZero() && !time.Now().Before(recheck) {
			if err := r.pending(); err != nil {
				in.fail(err)
				return
			}
			recheck = time.Time{}
			if len(r.blocked) > 0 {
				recheck = time.Now().Add(time.Second)
			}
		}
		entries, err := in.readNew(min(in.opts.LeaseTTL/3, time.Second))
		if err != nil {
			in.fail(err)
			if !sleep(in.stop, time.Second) {
				return
			}
			continue
		}
		if len(entries) > 0 {
			r.apply(entries, false)
			if len(r.blocked) > 0 && recheck.IsZero() {
				recheck = time.Now().Add(time.Second)
			}
		}
	}
}

// orphanedAfter is how long an entry stays pending with a consumer before
// the reader claims it: entries of a reader that lost its turn (Redis
// away from it past its lease) and then died. A live reader settles its
// entries well within it (a batch waits at most 30 s for its writes).
const orphanedAfter = time.Minute

// keepTurn renews the reader's turn every third of its life until ctx
// ends, and ends it (lost) when the turn is another node's, or could not
// be renewed within its life.
func (in *Ingest) keepTurn(ctx context.Context, lost context.CancelFunc) {
	tick := time.NewTicker(in.opts.LeaseTTL / 3)
	defer tick.Stop()
	renewed := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if in.turn() {
			renewed = time.Now()
		} else if time.Since(renewed) > in.opts.LeaseTTL*2/3 {
			lost()
			return
		}
	}
}

func sleep(stop <-chan struct{}, d time.Duration) bool {
	select {
	case <-stop:
		return false
	case <-time.After(d):
		return true
	}
}

// ensureGroup creates the consumer group (and the stream) when missing,
// at the stream's start: entries producers added before any node ran are
// read too.
func (in *Ingest) ensureGroup() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := in.e.c.Do(ctx, in.e.c.B().XgroupCreate().Key(in.opts.Stream).Group(in.opts.Group).Id("0").Mkstream().Build()).Error()
	if err != nil && strings.Contains(err.Error(), "BUSYGROUP") {
		return nil
	}
	return err
}

// claimPending moves the group's entries pending for at least minIdle ms
// (all of them for "0": a dead reader's) to this node, so that the pending
// pass reads them in order.
func (in *Ingest) claimPending(minIdle string) error {
	start := "0-0"
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := in.e.c.Do(ctx, in.e.c.B().Xautoclaim().Key(in.opts.Stream).Group(in.opts.Group).Consumer(in.node).MinIdleTime(minIdle).Start(start).Count(int64(in.opts.Batch)).Justid().Build()).ToArray()
		cancel()
		if err != nil {
			return err
		}
		if len(res) < 1 {
			return nil
		}
		next, err := res[0].ToString()
		if err != nil {
			return err
		}
		if next == "0-0" {
			return nil
		}
		start = next
	}
}

// readNew reads entries no node was given yet, waiting up to block.
func (in *Ingest) readNew(block time.Duration) ([]rueidis.XRangeEntry, error) {
	ctx, cancel := context.WithTimeout(context.Background(), block+5*time.Second)
	defer cancel()
	res, err := in.e.c.Do(ctx, in.e.c.B().Xreadgroup().Group(in.opts.Group, in.node).Count(int64(in.opts.Batch)).Block(block.Milliseconds()).Streams().Key(in.opts.Stream).Id(">").Build()).AsXRead()
	if rueidis.IsRedisNil(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return res[in.opts.Stream], nil
}

// pass is a reader's turn's state: the threads whose entries wait (until
// the next pass over the pending entries), since when each has waited,
// and the last entry known appended to each thread (read from its stream
// once per turn, then kept as this node appends: it is the only writer).
type pass struct {
	in      *Ingest
	held    context.Context // ends when the turn is lost
	blocked map[string]bool
	since   map[string]time.Time
	applied map[string]string
}

// pending reads this node's pending entries (claimed ones included), in
// order, and applies them, skipping those found appended already.
func (r *pass) pending() error {
	in := r.in
	start := "0"
	clear(r.blocked) // each is tried again, in order, now
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := in.e.c.Do(ctx, in.e.c.B().Xreadgroup().Group(in.opts.Group, in.node).Count(int64(in.opts.Batch)).Streams().Key(in.opts.Stream).Id(start).Build()).AsXRead()
		cancel()
		if err != nil && !rueidis.IsRedisNil(err) {
			return err
		}
		entries := res[in.opts.Stream]
		if len(entries) == 0 {
			return nil
		}
		r.apply(entries, true)
		start = entries[len(entries)-1].ID
	}
}

// ingestEntry is an entry read: its id, thread and event.
type ingestEntry struct {
	id, thread string
	event      protocol.ProducerEvent
	fields     map[string]string
}

// apply appends a batch of entries: the invalid ones go to the dead-letter
// stream, the others to their threads in order (a thread's entries in one
// Publish), and every entry whose fate is settled is acknowledged once its
// thread's events are in Redis. recovered says the entries may have been
// appended before (pending ones): each thread's last `src` is read first.
func (r *pass) apply(entries []rueidis.XRangeEntry, recovered bool) {
	in := r.in
	var ack []string
	byThread := map[string][]ingestEntry{}
	var order []string
	for _, en := range entries {
		ie, reason := in.decode(en)
		if reason != "" {
			if in.deadLetter(en.ID, en.FieldValues, reason) {
				ack = append(ack, en.ID)
			}
			continue
		}
		th := ie.thread
		if r.blocked[th] {
			continue // after an entry of its thread that waits: stays pending, in order
		}
		if _, ok := byThread[th]; !ok {
			order = append(order, th)
		}
		byThread[th] = append(byThread[th], ie)
	}
	var written []string
	for _, th := range order {
		list := byThread[th]
		if r.held.Err() != nil {
			break // another node reads now: what is left stays pending for it
		}
		if recovered {
			last, known := r.applied[th]
			if !known {
				var err error
				if last, err = in.lastSource(th); err != nil {
					in.fail(err)
					r.wait(th, list)
					continue
				}
				r.applied[th] = last
			}
			n := 0
			for n < len(list) && !entryAfter(list[n].id, last) {
				n++
			}
			for _, ie := range list[:n] {
				ack = append(ack, ie.id)
			}
			in.duplicates.Add(uint64(n))
			list = list[n:]
			if len(list) == 0 {
				continue
			}
		}
		b := server.ProducerBatch{Events: make([]protocol.ProducerEvent, len(list)), Sources: make([]string, len(list))}
		for i, ie := range list {
			b.Events[i], b.Sources[i] = ie.event, ie.id
		}
		res, err := in.pub.Publish(context.Background(), th, b)
		done := 0
		if res != nil {
			done = len(res.Seqs)
		}
		for _, ie := range list[:done] {
			ack = append(ack, ie.id)
		}
		in.appended.Add(uint64(done))
		if done > 0 {
			written = append(written, th)
			r.applied[th] = list[done-1].id
		}
		if err == nil {
			delete(r.since, th)
			continue
		}
		if errors.Is(err, server.ErrThreadID) {
			// The thread (its id) is refused: none of its entries can go.
			for _, ie := range list[done:] {
				if in.deadLetter(ie.id, ie.fields, err.Error()) {
					ack = append(ack, ie.id)
				}
			}
			continue
		}
		in.fail(fmt.Errorf("ingest: thread %s: %w (its entries wait)", th, err))
		r.wait(th, list[done:])
	}
	in.waitWritten(written)
	in.ack(ack)
}

// wait leaves a thread's entries pending, to be tried again in order, or
// sends them to the dead-letter stream once the thread waited MaxWait.
func (r *pass) wait(th string, list []ingestEntry) {
	in := r.in
	since, ok := r.since[th]
	if !ok {
		since = time.Now()
		r.since[th] = since
	}
	if time.Since(since) > in.opts.MaxWait {
		var ack []string
		for _, ie := range list {
			if in.deadLetter(ie.id, ie.fields, fmt.Sprintf("thread %s did not take it within %v (another node writes the thread, or Redis was away)", th, in.opts.MaxWait)) {
				ack = append(ack, ie.id)
			}
		}
		in.ack(ack)
		delete(r.since, th)
		return
	}
	r.blocked[th] = true
	in.retries.Add(uint64(len(list)))
}

// decode checks an entry; reason says why it is refused.
func (in *Ingest) decode(en rueidis.XRangeEntry) (ingestEntry, string) {
	if en.FieldValues == nil {
		return ingestEntry{}, "the entry was deleted from the stream before it was read (a producer's XADD MAXLEN too low?)"
	}
	if in.opts.Entries != nil {
		th, ev, handled, reason := in.opts.Entries(en.FieldValues)
		if handled && reason != "" {
			return ingestEntry{}, reason
		}
		if handled {
			if err := server.ValidThreadID(th); err != nil {
				return ingestEntry{}, err.Error()
			}
			return ingestEntry{id: en.ID, thread: th, event: ev, fields: en.FieldValues}, ""
		}
	}
	th, ev := en.FieldValues["thread"], en.FieldValues["event"]
	switch {
	case th == "":
		return ingestEntry{}, "the entry has no thread field"
	case ev == "":
		return ingestEntry{}, "the entry has no event field"
	}
	events, errResp := in.opts.Decoder.ProducerEvents([][]byte{[]byte(ev)}, in.opts.MaxEventBytes)
	if errResp != nil {
		return ingestEntry{}, "event" + strings.TrimPrefix(errResp.Message, "[0]")
	}
	return ingestEntry{id: en.ID, thread: th, event: events[0], fields: en.FieldValues}, ""
}

// deadLetter sends a refused entry to the dead-letter stream: its fields,
// with `reason` and `source_id` (its id in the ingest stream). False when
// it could not: the entry stays pending, dead-lettered on a later pass.
func (in *Ingest) deadLetter(id string, fields map[string]string, reason string) bool {
	cmd := in.e.c.B().Xadd().Key(in.opts.DeadLetter).Id("*").FieldValue().FieldValue("reason", reason).FieldValue("source_id", id)
	for k, v := range fields {
		if k != "reason" && k != "source_id" {
			cmd = cmd.FieldValue(k, v)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := in.e.c.Do(ctx, cmd.Build()).Error(); err != nil {
		in.fail(err)
		return false
	}
	in.deadLetters.Add(1)
	in.fail(fmt.Errorf("ingest: entry %s refused (in %s): %s", id, in.opts.DeadLetter, reason))
	return true
}

// lastSource is the newest ingest entry id among the thread's last events
// ("" for none).
func (in *Ingest) lastSource(th string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	entries, err := in.e.c.Do(ctx, in.e.c.B().Xrevrange().Key(in.e.key(th, "events")).End("+").Start("-").Count(ingestSourceScanLength).Build()).AsXRange()
	if err != nil && !rueidis.IsRedisNil(err) {
		return "", err
	}
	for _, en := range entries {
		if src := en.FieldValues["src"]; src != "" {
			return src, nil
		}
	}
	return "", nil
}

// waitWritten waits until the log has sent the threads' events to Redis
// (bounded: what is not written by then stays pending and is found
// appended, or not, by the next pass over the pending entries).
func (in *Ingest) waitWritten(threads []string) {
	deadline := time.Now().Add(30 * time.Second)
	for _, th := range threads {
		for !in.flush(th) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
}

// ack acknowledges entries whose fate is settled.
func (in *Ingest) ack(ids []string) {
	for i := 0; i < len(ids); i += 1000 {
		part := ids[i:min(i+1000, len(ids))]
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		in.fail(in.e.c.Do(ctx, in.e.c.B().Xack().Key(in.opts.Stream).Group(in.opts.Group).Id(part...).Build()).Error())
		cancel()
	}
}

// entryAfter reports whether stream entry id a comes after b ("" is
// before every id).
func entryAfter(a, b string) bool {
	if b == "" {
		return true
	}
	am, as := splitID(a)
	bm, bs := splitID(b)
	return am > bm || am == bm && as > bs
}

func splitID(id string) (ms, seq uint64) {
	m, s, _ := strings.Cut(id, "-")
	ms, _ = strconv.ParseUint(m, 10, 64)
	seq, _ = strconv.ParseUint(s, 10, 64)
	return ms, seq
}

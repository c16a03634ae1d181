package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/internal/compact"
	"github.com/agentstream/agentstream/internal/keyrate"
	"github.com/agentstream/agentstream/internal/testhooks"
	"github.com/agentstream/agentstream/protocol"
)

// The defaults of Config's limits.
const (
	DefaultBufferEvents = 8192
	DefaultBufferBytes  = 16 << 20
	DefaultQueueBytes   = 8 << 20
	// DefaultQueueTotalBytes is Config.QueueTotalBytes' default.
	DefaultQueueTotalBytes = 256 << 20
	DefaultIdleRelease     = 10 * time.Minute
	DefaultReconnectGrace  = time.Minute

	DefaultMaxThreads              = 100_000
	DefaultMaxRunsPerMinute        = 600
	DefaultThreadTTL               = 24 * time.Hour
	DefaultMaxQueuedRuns           = 16
	DefaultMaxProducersPerThread   = 1024
	DefaultIngestAckTimeout        = 5 * time.Second
	DefaultMaxSessionSubscriptions = 64
	DefaultMaxCheckpoints          = 100
)

// DefaultBufferTotalBytes is Config.BufferTotalBytes' default: an eighth
// of the machine's memory, at least 64 MiB and at most 2 GiB (1 GiB when
// the machine's memory is unknown).
func DefaultBufferTotalBytes() int64 {
	m := physicalMemory()
	if m <= 0 {
		return 1 << 30
	}
	return min(max(m/8, 64<<20), 2<<30)
}

// Config configures a Server. Zero fields take the defaults in their
// comments.
type Config struct {
	// BufferEvents caps each thread's replay buffer by count
	// (DefaultBufferEvents, 8192).
	BufferEvents int
	// BufferBytes caps each thread's replay buffer by encoded size
	// (DefaultBufferBytes, 16 MiB).
	BufferBytes int
	// BufferTotalBytes is the budget of all the replay buffers together
	// (DefaultBufferTotalBytes), each event counting its encoded JSON plus
	// EventOverhead. Past it, the buffers of the threads that published
	// least recently are dropped first; a subscriber whose cursor they
	// held gets the events.missed notice. It applies to the in-memory Log
	// the server makes, not to a Log given here.
	BufferTotalBytes int64
	// QueueBytes caps each session's queue of unread events, replays
	// included (DefaultQueueBytes, 8 MiB); a session that falls further
	// behind is ended.
	QueueBytes int
	// QueueTotalBytes caps the bytes queued to all sessions together
	// (DefaultQueueTotalBytes, 256 MiB): past it, a session that has more
	// than its share queued (the total over the sessions with a queue) is
	// ended as a slow consumer, its queue dropped, before any other, so
	// the slowest readers are cut first. Queues count in whole steps of
	// 16 KiB, so readers that keep up cost the shared count nothing.
	QueueTotalBytes int64
	// IdleRelease is how long a thread with no run and no subscription
	// keeps its replay buffer (DefaultIdleRelease, 10 minutes). Its state
	// and checkpoints stay.
	IdleRelease time.Duration
	// ReconnectGrace is how long subscriptions of a dropped session stay
	// restorable with subscription.reconnect (DefaultReconnectGrace, 1
	// minute).
	ReconnectGrace time.Duration
	// MaxThreads caps the threads held at once (DefaultMaxThreads,
	// 100,000); a command or subscription that would create one more is
	// refused with resource_exhausted.
	MaxThreads int
	// MaxThreadsPerPrincipal caps the threads one principal may have
	// created and that this node holds (a tenth of MaxThreads when 0), so
	// that no principal can take every thread slot; admins are exempt. A
	// request over it is refused with resource_exhausted.
	MaxThreadsPerPrincipal int
	// MaxRunsPerMinute caps the runs one principal may start a minute on
	// this node (DefaultMaxRunsPerMinute, 600; bursts of as many), admins
	// exempt; a run.start over it is refused with resource_exhausted.
	MaxRunsPerMinute int
	// ThreadTTL is how long a thread with no run and no subscription is
	// kept at all (DefaultThreadTTL, 24 hours): then it is forgotten, its
	// state and checkpoints deleted from the StateStore too. With the
	// in-memory store that is the thread's whole history.
	ThreadTTL time.Duration
	// MaxQueuedRuns caps the runs waiting behind a thread's active run
	// (multitask_strategy enqueue) (DefaultMaxQueuedRuns, 16).
	MaxQueuedRuns int
	// WorkerLease is how long a remote worker may send nothing (a batch or
	// a heartbeat) before it is taken for lost and its runs fail
	// (DefaultWorkerLease, 15 s).
	WorkerLease time.Duration
	// MaxWorkers caps the remote workers connected at once
	// (DefaultMaxWorkers, 1,024).
	MaxWorkers int
	// MaxRunsPerWorker caps the runs one worker serves at once, whatever
	// it asks for (DefaultMaxRunsPerWorker, 64).
	MaxRunsPerWorker int
	// MaxQueuedWorkerRuns caps the runs of one assistant waiting for a
	// free worker (DefaultMaxQueuedWorkerRuns, 256); past it run.start is
	// refused (resource_exhausted).
	MaxQueuedWorkerRuns int
	// MaxProducersPerThread caps the producers a thread remembers the
	// last batch of, for idempotency (Publish); past it the one used
	// longest ago is forgotten (DefaultMaxProducersPerThread, 1,024).
	MaxProducersPerThread int
	// MaxStoreItems caps the items the long-term store (the Platform
	// API's /store) holds, of every principal (DefaultMaxStoreItems,
	// 1,000,000); a new item past it is refused (counted as limit
	// store_items).
	MaxStoreItems int
	// ThreadExpiryCheck is how often the threads whose TTL (the Platform
	// API's thread ttl) ran out are deleted (DefaultThreadExpiryCheck,
	// 30 s).
	ThreadExpiryCheck time.Duration
	// MaxAssistants caps the assistants the Platform API's clients
	// create (its /assistants; DefaultMaxAssistants, 100,000); a new one
	// past it is refused (counted as limit assistants).
	MaxAssistants int
	// MaxThreadMetadataBytes caps a thread record's metadata, as JSON,
	// after a creation, copy or change (DefaultMaxThreadMetadataBytes,
	// 64 KiB); past it the change is refused (ErrTooLarge, counted as
	// limit thread_metadata_bytes).
	MaxThreadMetadataBytes int
	// MaxStateBytes caps a thread's values, as JSON, after a client's
	// change of them (UpdateState; DefaultMaxStateBytes, 4 MiB); past it
	// the change is refused (ErrTooLarge, counted as limit state_bytes).
	MaxStateBytes int
	// IngestAckTimeout bounds how long Publish waits for a SyncedLog (the
	// disk engine) to sync a producer's batch before it answers
	// (DefaultIngestAckTimeout, 5 s); past it the batch is refused as
	// unavailable (counted as limit ingest_ack): it is appended, and may
	// be kept, but is not acknowledged, and the producer's retry with the
	// same producer and batch number appends nothing twice. It bounds
	// the Platform API's writes too: past it one is answered 503 (counted
	// as limit write_ack), made but not acknowledged as kept.
	IngestAckTimeout time.Duration
	// IngestFastAck answers a producer's batch once it is appended,
	// without waiting for a SyncedLog to sync it: lower latency, and a
	// crash may lose batches that were acknowledged (at most the disk
	// engine's commit interval, more while its writer is behind).
	IngestFastAck bool
	// MaxSessionSubscriptions caps the subscriptions of one session, that
	// is one connection (DefaultMaxSessionSubscriptions, 64).
	MaxSessionSubscriptions int
	// MaxCheckpoints caps the checkpoints the default in-memory StateStore
	// keeps per thread, the oldest dropped first (DefaultMaxCheckpoints,
	// 100). It does not apply to a State given here.
	MaxCheckpoints int
	// Stores are the stores threads are kept in and what they can do,
	// when there is no Engine (whose stores are used instead): a nil Log
	// is an in-memory one capped by BufferEvents and BufferBytes, a nil
	// State an in-memory one capped by MaxCheckpoints and MaxThreads.
	Stores EngineStores
	// Engine, when set, keeps threads beyond this process and shares them
	// with the other nodes that use it (redisstore.Engine): New takes its
	// stores and starts it, Close closes it.
	Engine Engine
	// Upstream, when set, is a server the assistants run on (edge mode,
	// package edge): the commands on a thread's runs and state go to it,
	// and it feeds the threads' logs (Mirror).
	Upstream Upstream
	// Now is the clock (time.Now); tests replace it.
	Now func() time.Time
	// NewID makes run, interrupt, checkpoint and subscription ids
	// (random); tests replace it for stable ids.
	NewID func(prefix string) string
}

func (c Config) withDefaults() Config {
	if c.BufferEvents <= 0 {
		c.BufferEvents = DefaultBufferEvents
	}
	if c.BufferBytes <= 0 {
		c.BufferBytes = DefaultBufferBytes
	}
	if c.QueueBytes <= 0 {
		c.QueueBytes = DefaultQueueBytes
	}
	if c.QueueTotalBytes <= 0 {
		c.QueueTotalBytes = DefaultQueueTotalBytes
	}
	if c.IdleRelease <= 0 {
		c.IdleRelease = DefaultIdleRelease
	}
	if c.ReconnectGrace <= 0 {
		c.ReconnectGrace = DefaultReconnectGrace
	}
	if c.MaxThreads <= 0 {
		c.MaxThreads = DefaultMaxThreads
	}
	if c.MaxThreadsPerPrincipal <= 0 {
		c.MaxThreadsPerPrincipal = max(1, c.MaxThreads/10)
	}
	if c.MaxRunsPerMinute <= 0 {
		c.MaxRunsPerMinute = DefaultMaxRunsPerMinute
	}
	if c.ThreadTTL <= 0 {
		c.ThreadTTL = DefaultThreadTTL
	}
	if c.MaxQueuedRuns <= 0 {
		c.MaxQueuedRuns = DefaultMaxQueuedRuns
	}
	if c.WorkerLease <= 0 {
		c.WorkerLease = DefaultWorkerLease
	}
	if c.MaxWorkers <= 0 {
		c.MaxWorkers = DefaultMaxWorkers
	}
	if c.MaxRunsPerWorker <= 0 {
		c.MaxRunsPerWorker = DefaultMaxRunsPerWorker
	}
	if c.MaxQueuedWorkerRuns <= 0 {
		c.MaxQueuedWorkerRuns = DefaultMaxQueuedWorkerRuns
	}
	if c.MaxProducersPerThread <= 0 {
		c.MaxProducersPerThread = DefaultMaxProducersPerThread
	}
	if c.IngestAckTimeout <= 0 {
		c.IngestAckTimeout = DefaultIngestAckTimeout
	}
	if c.MaxStoreItems <= 0 {
		c.MaxStoreItems = DefaultMaxStoreItems
	}
	if c.MaxAssistants <= 0 {
		c.MaxAssistants = DefaultMaxAssistants
	}
	if c.ThreadExpiryCheck <= 0 {
		c.ThreadExpiryCheck = DefaultThreadExpiryCheck
	}
	if c.MaxThreadMetadataBytes <= 0 {
		c.MaxThreadMetadataBytes = DefaultMaxThreadMetadataBytes
	}
	if c.MaxStateBytes <= 0 {
		c.MaxStateBytes = DefaultMaxStateBytes
	}
	if c.MaxSessionSubscriptions <= 0 {
		c.MaxSessionSubscriptions = DefaultMaxSessionSubscriptions
	}
	if c.MaxCheckpoints <= 0 {
		c.MaxCheckpoints = DefaultMaxCheckpoints
	}
	if c.BufferTotalBytes <= 0 {
		c.BufferTotalBytes = DefaultBufferTotalBytes()
	}
	if c.Stores.State == nil {
		st := NewMemoryState()
		st.MaxCheckpoints = c.MaxCheckpoints
		st.MaxRecords = c.MaxThreads
		c.Stores.memoryState(st)
	}
	if c.Stores.Log == nil {
		l := NewMemoryLog(c.BufferEvents, c.BufferBytes)
		l.SetTotalBytes(c.BufferTotalBytes)
		c.Stores.memoryLog(l)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.NewID == nil {
		c.NewID = randomID
	}
	return c
}

// ErrServerClosed is returned by operations on a closed Server.
var ErrServerClosed = errors.New("server: closed")

// Server is agentstream's core: threads, their runs and event streams,
// the registered assistants, and one command dispatcher every transport
// uses. All its methods are safe for concurrent use.
type Server struct {
	down atomic.Pointer[unavailableErr] // set while the engine's store cannot be reached (setUnavailable)

	cfg Config
	// st are the stores and what they can do (Config.Stores, or the
	// engine's, with the in-memory defaults): its Watcher (nil: none), its
	// Cluster (nil: one node), its Detached (nil: dropped sessions'
	// subscriptions are restorable on this node only, from detached), its
	// Durable, Tails and Producers (nil: producers' batches are
	// remembered in memory only).
	st EngineStores
	// writeThrough: the log is a WriteThroughLog; events reach
	// subscribers when its store holds them (Server.written).
	writeThrough bool
	// syncs is the log as a SyncedLog when producers' acks wait for it
	// (nil: it is not one, or Config.IngestFastAck).
	syncs SyncedLog

	mu         sync.Mutex
	threads    map[string]*thread
	created    map[string]int   // live threads per principal that created them (MaxThreadsPerPrincipal)
	runs       *keyrate.Limiter // MaxRunsPerMinute, per principal
	queued     atomic.Int64     // bytes queued to open sessions (QueueTotalBytes)
	queuing    atomic.Int64     // open sessions with something queued
	assistants map[string]Assistant
	workers    *Workers                // remote workers and the runs they serve
	detached   map[string]*detachedSub // subscriptions of dropped sessions, by id, awaiting reconnect
	threadsHW  compact.Tracker         // high-water marks of threads and detached,
	detachedHW compact.Tracker         // so that the sweeper gives their memory back
	closed     bool
	nextSubID  atomic.Uint64

	runsWG  sync.WaitGroup // every run goroutine
	running atomic.Int64   // how many there are
	stop    chan struct{}  // closed by Close: ends the janitor
	// hooks are the resources' (ResourceHost); runHooks their run hooks,
	// read without a lock as runs change.
	hooks    resourceHooks
	runHooks atomic.Pointer[[]func(RunRecord)]
	janitor  sync.WaitGroup

	metrics counters
}

// counters count what the server did; read them with [Server.Metrics].
type counters struct {
	refused   refusals
	published atomic.Uint64
	// ingested counts events producers published (Publish); their
	// batches taken before, appending nothing, count in ingestDuplicates.
	ingested         atomic.Uint64
	ingestDuplicates atomic.Uint64
	// workersLost counts remote workers lost (lease run out, not reading
	// what they were sent); their runs failed.
	workersLost   atomic.Uint64
	slowConsumers atomic.Uint64
	gaps          atomic.Uint64
	epochBumps    atomic.Uint64
	replays       atomic.Uint64
	subscribes    atomic.Uint64
	refills       atomic.Uint64
	commands      atomic.Uint64
	denied        atomic.Uint64
}

// MetricsSnapshot is a copy of the counters.
type MetricsSnapshot struct {
	EventsPublished uint64 // events appended to thread streams
	SlowConsumers   uint64 // subscriptions ended because they fell behind
	// StreamGaps counts the holes in a thread's stream announced to live
	// subscribers (events another node published that the store lost).
	StreamGaps uint64
	// EpochBumps counts the threads this node took over in a new epoch
	// because their store may have lost what the previous writer wrote.
	EpochBumps uint64
	// Ingested counts the events producers published (Publish), and
	// IngestDuplicates the batches sent again that appended nothing.
	Ingested         uint64
	IngestDuplicates uint64
	// WorkersLost counts the remote workers lost (their runs failed).
	WorkersLost uint64
	// Workers is how many remote workers are registered now, and
	// QueuedWorkerRuns how many runs wait for a free one.
	Workers, QueuedWorkerRuns int
	Replays                   uint64 // subscriptions that started with a replay
	Subscribes                uint64 // subscriptions made (restored ones included)
	// ReplayRefills counts the parts of replays longer than a session's
	// queue read from the log as their readers made room.
	ReplayRefills uint64
	Commands      uint64 // commands dispatched
	// Denied counts the times Authorize refused a principal a thread.
	Denied uint64
	// Refused counts, per limit, what the server refused because of it.
	Refused map[Limit]uint64
	// BufferTrimmed counts the events the total buffer budget dropped, and
	// BufferUsed is what the buffers count against it now (both 0 with a
	// Log that is not the in-memory one).
	BufferTrimmed uint64
	BufferUsed    int64
	// BufferUndecodable counts buffered events a replay could not rebuild
	// from their JSON and skipped: a bug if ever more than 0.
	BufferUndecodable uint64
}

// New returns a running Server, its engine (Config.Engine) started. Close
// it to stop its runs and its engine.
func New(cfg Config) *Server {
	if cfg.Engine != nil {
		cfg.Stores = cfg.Engine.Stores()
	}
	cfg = cfg.withDefaults()
	stores := cfg.Stores
	s := &Server{
		cfg:        cfg,
		st:         stores,
		threads:    map[string]*thread{},
		created:    map[string]int{},
		assistants: map[string]Assistant{},
		detached:   map[string]*detachedSub{},
		stop:       make(chan struct{}),
	}
	s.runs = keyrate.New(float64(s.cfg.MaxRunsPerMinute)/60, s.cfg.MaxRunsPerMinute)
	if !s.cfg.IngestFastAck {
		s.syncs = stores.Synced
	}
	if wt := stores.WriteThrough; wt != nil {
		s.writeThrough = wt.WritesThrough()
		wt.OnWritten(s.written)
	}
	s.workers = newWorkerHub(s)
	s.janitor.Add(2)
	// Idle threads' buffers and expired dropped sessions; remote workers
	// whose lease ran out, checked four times a lease.
	go s.every(sweepInterval(s.cfg.IdleRelease), s.sweep)
	go s.every(max(s.cfg.WorkerLease/4, 10*time.Millisecond), func() { s.workers.expire(s.cfg.Now()) })
	if cfg.Engine != nil {
		if err := cfg.Engine.Start(host{s}); err != nil {
			s.setUnavailable(fmt.Errorf("starting the engine: %w", err))
		}
	}
	return s
}

// Metrics returns the server's counters.
func (s *Server) Metrics() MetricsSnapshot {
	m := MetricsSnapshot{
		EventsPublished:  s.metrics.published.Load(),
		SlowConsumers:    s.metrics.slowConsumers.Load(),
		StreamGaps:       s.metrics.gaps.Load(),
		EpochBumps:       s.metrics.epochBumps.Load(),
		Ingested:         s.metrics.ingested.Load(),
		IngestDuplicates: s.metrics.ingestDuplicates.Load(),
		WorkersLost:      s.metrics.workersLost.Load(),
		Replays:          s.metrics.replays.Load(),
		Subscribes:       s.metrics.subscribes.Load(),
		ReplayRefills:    s.metrics.refills.Load(),
		Commands:         s.metrics.commands.Load(),
		Denied:           s.metrics.denied.Load(),
		Refused:          s.metrics.refused.snapshot(),
	}
	m.Workers, m.QueuedWorkerRuns = s.workers.counts()
	if l := s.st.Memory; l != nil {
		m.BufferTrimmed, m.BufferUsed, m.BufferUndecodable = l.Trimmed(), l.Used(), l.Undecodable()
	}
	return m
}

// Buffers is the in-memory replay buffers of the log (the MemoryLog
// itself, or the one a durable log keeps: EngineStores.Memory), nil with
// a log that keeps none. Their budget (Config.BufferTotalBytes at the
// start) moves while the server runs: a memory governor lowers it to keep
// the process within a memory target (server/memgov); lowered below what
// they hold, the least recently active threads' buffers are dropped at
// once.
func (s *Server) Buffers() *MemoryLog { return s.st.Memory }

// Register adds an assistant under id; a later registration replaces it.
func (s *Server) Register(id string, a Assistant) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.assistants[id] = a
}

// Assistants lists the registered assistant ids.
func (s *Server) Assistants() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.assistants))
	for id := range s.assistants {
		out = append(out, id)
	}
	for _, id := range s.workers.assistantIDs() {
		if _, ok := s.assistants[id]; !ok {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// localAssistant is the assistant registered in process under id.
func (s *Server) localAssistant(id string) (Assistant, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.assistants[id]
	return a, ok
}

func (s *Server) assistant(id string) (Assistant, bool) {
	s.mu.Lock()
	a, ok := s.assistants[id]
	s.mu.Unlock()
	if !ok && s.workers.serves(id) {
		return remoteAssistant{hub: s.workers, id: id}, true
	}
	return a, ok
}

// thread returns the thread id, creating it when create is set (within
// the limits: a valid id, at most MaxThreads). A durable log's head (a
// round trip to Redis) is read before the server's lock is taken, so that
// creating threads does not serialize on it.
func (s *Server) thread(id string, create bool) (*thread, error) {
	return s.threadFor(id, create, nil)
}

// threadFor is thread, creating a thread on behalf of p: the thread
// counts against p's MaxThreadsPerPrincipal until it is forgotten.
func (s *Server) threadFor(id string, create bool, p *auth.Principal) (*thread, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrServerClosed
	}
	t := s.threads[id]
	s.mu.Unlock()
	if t != nil || !create {
		return t, nil
	}
	if err := ValidThreadID(id); err != nil {
		s.metrics.refused.add(LimitThreadID)
		return nil, err
	}
	h := s.head(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrServerClosed
	}
	if t := s.threads[id]; t != nil {
		return t, nil // made meanwhile
	}
	if len(s.threads) >= s.cfg.MaxThreads {
		s.metrics.refused.add(LimitThreads)
		return nil, fmt.Errorf("%w: %d threads, the most this server keeps (--max-threads)", ErrTooManyThreads, len(s.threads))
	}
	if p != nil && !p.Admin && s.created[p.Subject] >= s.cfg.MaxThreadsPerPrincipal {
		s.metrics.refused.add(LimitPrincipalThreads)
		return nil, fmt.Errorf("%w: principal %q has created %d threads this server holds, its most (--max-threads-per-principal)", ErrQuota, p.Subject, s.created[p.Subject])
	}
	t = newThread(s, id, h)
	if p != nil {
		t.creator = p.Subject
		s.created[p.Subject]++
	}
	s.threads[id] = t
	if s.st.Watcher != nil {
		s.st.Watcher.Watch(id)
	}
	s.threadsHW.Grew(len(s.threads))
	return t, nil
}

// uncreate takes a forgotten thread off its creator's count; s.mu held.
func (s *Server) uncreate(t *thread) {
	if t.creator == "" {
		return
	}
	if s.created[t.creator]--; s.created[t.creator] <= 0 {
		delete(s.created, t.creator)
	}
}

// streamHead is where a thread's stream stands in a durable log.
type streamHead struct {
	epoch string
	seq   uint64
	ok    bool
}

func (s *Server) head(id string) streamHead {
	d := s.st.Durable
	if d == nil {
		return streamHead{}
	}
	epoch, seq, err := d.Head(context.Background(), id)
	return streamHead{epoch, seq, err == nil && epoch != ""}
}

// lockThread returns thread id locked, creating it as thread does. A
// thread the sweeper is forgetting is not returned: the caller gets the
// one that replaces it.
func (s *Server) lockThread(id string) (*thread, error) { return s.lockHeld(id, false) }

// lockHeld locks thread id's lock, and first its writer lock when
// writing, retrying when the sweeper is forgetting the thread it found.
func (s *Server) lockHeld(id string, writing bool) (*thread, error) {
	for {
		t, err := s.thread(id, true)
		if err != nil {
			return nil, err
		}
		if writing {
			t.wmu.Lock()
		}
		t.mu.Lock()
		if !t.evicted {
			return t, nil
		}
		t.mu.Unlock()
		if writing {
			t.wmu.Unlock()
		}
		runtime.Gosched() // the sweeper is taking it out of the map
	}
}

// lockThreadForRun returns thread id locked as lockThread does, with its
// writer lock (wmu) held too, and, when it has no active run, the values a
// run started now starts from (nil for none), read with only wmu held: no
// value changes before the caller, who unlocks both, starts its run.
func (s *Server) lockThreadForRun(ctx context.Context, id string) (*thread, map[string]any, error) {
	t, err := s.lockThreadWriting(id)
	if err != nil || t.run != nil {
		return t, nil, err
	}
	t.unlockForStore()
	values, _, err := s.st.State.Values(ctx, id)
	t.relockAfterStore()
	if err != nil {
		t.mu.Unlock()
		t.wmu.Unlock()
		return nil, nil, storeError(err)
	}
	return t, maps.Clone(values), nil
}

// lockThreadWriting returns thread id locked as lockThread does, with its
// writer lock (wmu) held too: the caller may let mu go for the store's
// I/O (unlockForStore) and take it again. It unlocks both.
func (s *Server) lockThreadWriting(id string) (*thread, error) { return s.lockHeld(id, true) }

// HasThread reports whether thread id exists: this node holds it, or the
// StateStore has its state (an error says the store could not tell).
func (s *Server) HasThread(ctx context.Context, id string) (bool, error) {
	s.mu.Lock()
	_, ok := s.threads[id]
	s.mu.Unlock()
	if ok {
		return true, nil
	}
	ok, err := s.st.State.Exists(ctx, id)
	if err != nil {
		return false, storeError(err)
	}
	return ok, nil
}

// LastSeq is the sequence number of the last event of thread id.
func (s *Server) LastSeq(id string) uint64 {
	t, _ := s.thread(id, false)
	if t == nil {
		// Not held now: a durable log's head says where it is (after a
		// restart, say), without making the thread.
		return s.head(id).seq
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.acked
}

// ThreadState is what GET /threads/{id}/state reports.
type ThreadState struct {
	Values     map[string]any
	Interrupts []PendingInterrupt
	Checkpoint *CheckpointRecord
	Status     string // idle, running or interrupted
}

// PendingInterrupt is an interrupt waiting for input.respond.
type PendingInterrupt struct {
	ID        string
	Namespace channels.Namespace
	Payload   any
}

// State returns thread id's state; ok is false for an unknown thread, and
// an error says the StateStore could not be read (ErrUnavailable).
func (s *Server) State(ctx context.Context, id string) (st ThreadState, ok bool, err error) {
	t, _ := s.thread(id, false)
	if t == nil {
		exists, err := s.st.State.Exists(ctx, id)
		if err != nil {
			return ThreadState{}, false, storeError(err)
		}
		if !exists {
			return ThreadState{}, false, nil
		}
	}
	st = ThreadState{Status: "idle"}
	v, ok, err := s.st.State.Values(ctx, id)
	if err != nil {
		return ThreadState{}, false, storeError(err)
	}
	if ok {
		st.Values = v
	}
	cps, err := s.st.State.Checkpoints(ctx, id)
	if err != nil {
		return ThreadState{}, false, storeError(err)
	}
	if len(cps) > 0 {
		cp := cps[0]
		st.Checkpoint = &cp
	}
	if t != nil && s.runActive(id) {
		st.Status, st.Interrupts = s.runState(id)
	} else if c := s.st.Cluster; c != nil {
		// The run, if any, is on the node that holds the thread's lease.
		if holder, err := c.Holder(id); err == nil && holder != "" && holder != c.Node() {
			if status, ints, err := c.ForwardRunState(context.Background(), holder, id); err == nil {
				st.Status, st.Interrupts = status, ints
			}
		}
	}
	return st, true, nil
}

// runState is the status of this node's run of thread id (idle, running
// or interrupted) and its pending interrupts.
func (s *Server) runState(id string) (status string, interrupts []PendingInterrupt) {
	status = "idle"
	t, _ := s.thread(id, false)
	if t == nil {
		return status, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.run != nil {
		status = t.run.status
		for _, in := range t.run.pendingList() {
			interrupts = append(interrupts, PendingInterrupt{ID: in.id, Namespace: in.ns, Payload: in.payload})
		}
	}
	return status, interrupts
}

// Close cancels every run, ends every subscription and waits for the runs
// to return, or for ctx to end. It is safe to call more than once.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stop)
	threads := s.threadList()
	s.mu.Unlock()
	for _, t := range threads {
		t.mu.Lock()
		if t.run != nil {
			t.run.cancel(errServerClosing)
		}
		for _, r := range t.queued {
			r.cancel(errServerClosing)
		}
		sessions := t.sessionList()
		t.mu.Unlock()
		for _, ss := range sessions {
			ss.end(ErrServerClosed)
		}
	}
	s.workers.closeAll()
	s.janitor.Wait()
	done := make(chan struct{})
	go func() {
		s.runsWG.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("server: %d runs still stopping: %w", s.running.Load(), ctx.Err())
	}
	s.closeResources(ctx) // after the runs, whose last changes they write
	if s.cfg.Engine != nil {
		// After the runs, whose last events the engine flushes.
		err = errors.Join(err, s.cfg.Engine.Close())
	}
	return err
}

var errServerClosing = errors.New("server shutting down")

// every calls fn every interval until Close; the janitor owns it.
func (s *Server) every(interval time.Duration, fn func()) {
	defer s.janitor.Done()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			fn()
		}
	}
}

func sweepInterval(idle time.Duration) time.Duration {
	iv := idle / 4
	if iv > time.Minute {
		iv = time.Minute
	}
	if iv < 10*time.Millisecond {
		iv = 10 * time.Millisecond
	}
	return iv
}

func init() { testhooks.Sweep = func(srv any) { srv.(*Server).sweep() } }

// sweep releases the replay buffers of threads idle for longer than
// IdleRelease, forgets threads idle for longer than ThreadTTL (their state
// too) and dropped sessions past their grace period. The server does it by
// itself periodically; tests call it directly (testhooks.Sweep from other
// packages').
func (s *Server) sweep() {
	now := s.cfg.Now()
	s.mu.Lock()
	threads := s.threadList()
	for id, d := range s.detached {
		if now.After(d.expires) {
			delete(s.detached, id)
		}
	}
	s.detached = compact.Shrink(s.detached, &s.detachedHW)
	s.mu.Unlock()
	for _, t := range threads {
		t.mu.Lock()
		forget := t.idle(now.Add(-s.cfg.ThreadTTL))
		if forget {
			t.evicted = true
		} else if t.idle(now.Add(-s.cfg.IdleRelease)) {
			s.st.Log.Release(context.Background(), t.id)
		}
		t.mu.Unlock()
		if forget {
			s.unhold(t)
			s.st.Log.Release(context.Background(), t.id)
			_ = s.st.State.Delete(context.Background(), t.id) // what it cannot delete, the store expires (Redis) or keeps
		}
	}
}

// unhold takes an evicted thread out of the threads this node holds.
func (s *Server) unhold(t *thread) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.threads[t.id] == t {
		delete(s.threads, t.id)
		s.uncreate(t)
		if s.st.Watcher != nil {
			s.st.Watcher.Unwatch(t.id)
		}
		s.threads = compact.Shrink(s.threads, &s.threadsHW)
	}
}

// Threads is the number of threads held.
func (s *Server) Threads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.threads)
}

// Subscriptions is the number of open subscriptions, all threads.
func (s *Server) Subscriptions() int {
	s.mu.Lock()
	threads := s.threadList()
	s.mu.Unlock()
	n := 0
	for _, t := range threads {
		t.mu.Lock()
		n += t.nsubs
		t.mu.Unlock()
	}
	return n
}

// bufferedEvents is how many events thread id holds for replay.
func (s *Server) bufferedEvents(id string) int {
	t, _ := s.thread(id, false)
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return s.st.Log.Len(context.Background(), id)
}

// errorResponse builds a protocol error for a command.
func errorResponse(id uint64, code protocol.ErrorCode, format string, args ...any) *protocol.ErrorResponse {
	return protocol.NewError(&id, code, format, args...)
}

// threadList is the threads held, for going over them without the
// server's lock; the caller holds s.mu.
func (s *Server) threadList() []*thread {
	threads := make([]*thread, 0, len(s.threads))
	for _, t := range s.threads {
		threads = append(threads, t)
	}
	return threads
}

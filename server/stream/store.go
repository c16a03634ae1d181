package stream

import (
	"context"
	"time"

	"github.com/agentstream/agentstream/channels"
)

// EventLog keeps each thread's recent events for replay, in sequence
// order, within its caps. The server appends with the thread's lock held,
// so appends for one thread never overlap, and reads without it; a shared
// log (Redis streams) lets a node replay what another published. The
// in-memory one is [NewMemoryLog]. Every method takes the context of what
// it serves; those that can reach a store return its error: a replay that
// cannot be read fails the subscription (unavailable), an append that is
// not kept fails the emitter.
type EventLog interface {
	// Append adds an event (its Seq above every other of the thread's);
	// an error says the log did not keep it. It must not wait for a
	// store: a log that writes one hands the event to its writer (which
	// keeps each thread's order) and, when that writer's queue is bounded,
	// says so as a RoomWaiter.
	Append(ctx context.Context, thread string, e *Event) error
	// After calls fn for each event of the thread after seq, oldest first,
	// until fn returns false; an error says the events could not all be
	// read (fn may have had some).
	After(ctx context.Context, thread string, seq uint64, fn func(*Event) bool) error
	// Oldest is the sequence number of the oldest event kept, 0 for none.
	Oldest(ctx context.Context, thread string) (uint64, error)
	// Len is how many events the thread has kept.
	Len(ctx context.Context, thread string) int
	// Release drops the thread's events (the thread went idle).
	Release(ctx context.Context, thread string)
}

// DurableLog is an EventLog that outlives the process (a Redis stream):
// a thread the server creates again (after a restart, or on another node)
// continues its stream, with the same epoch and the next sequence number,
// so cursors handed out before stay valid.
type DurableLog interface {
	EventLog
	// Head returns the epoch and the last sequence number the log holds
	// for the thread ("" and 0 when it holds nothing), or why the store
	// could not say.
	Head(ctx context.Context, thread string) (epoch string, seq uint64, err error)
	// Cache keeps an event another node published (and wrote) for local
	// replays, without writing it again.
	Cache(ctx context.Context, thread string, e *Event)
	// Stored calls fn for the events the store itself holds after seq
	// (what other nodes wrote included), oldest first, until fn returns
	// false; an error says the store could not be read to the end.
	Stored(ctx context.Context, thread string, seq uint64, fn func(*Event) bool) error
}

// HeadsReader is a DurableLog that reads the heads of many threads at
// once (in one round trip to its store, where Head takes one each): a
// node catching up on thousands of followed threads uses it.
type HeadsReader interface {
	// Heads returns, for each thread, what Head returns for it, in order.
	Heads(ctx context.Context, threads []string) []Head
}

// Head is what DurableLog.Head returns for one thread.
type Head struct {
	Epoch string
	Seq   uint64
	Err   error
}

// TailClaimer is a DurableLog that knows when a stream's store may have
// lost the tail of what its last writer wrote (the store restarted from an
// older copy): a node taking over the writing of a thread then goes on in
// a new epoch, so no id a client saw names another event.
type TailClaimer interface {
	// ClaimTail returns the epoch in which the caller, taking over the
	// writing of thread, must go on: "" for the stream's own, or another
	// (proposed, or one an earlier takeover chose) when the tail may be
	// lost.
	ClaimTail(ctx context.Context, thread, proposed string) (string, error)
}

// RoomWaiter is an EventLog whose Append hands events to a bounded queue
// for its store (Redis's write queue, the disk's group commit): WaitRoom
// returns once the queue has room for another event of thread, or, when
// the store has made none within the log's own bound on the wait, the
// error that refuses the event, or ctx's. The server waits here before it
// takes the thread's lock, so a stalled store holds up only the
// publishers waiting for it: commands, subscriptions and reads of the
// thread go on. The queue may pass its bound by the few events that
// publishers which found room append at once.
type RoomWaiter interface {
	WaitRoom(ctx context.Context, thread string) error
}

// SyncedLog is a DurableLog that writes its store behind Append (in group
// commits, as the disk engine does): WaitSynced returns once every event
// appended before the call is where a crash cannot lose it, or with ctx's
// error, or the store's. The server waits for it before it acknowledges
// a producer's batch (Config.IngestFastAck turns that off).
type SyncedLog interface {
	WaitSynced(ctx context.Context) error
}

// WriteThroughLog is a DurableLog whose store is the one truth of what
// clients see: Append queues the event for the store, and the server
// delivers it to subscribers (this node's included) only when the log
// calls back (OnWritten) once the store holds it. An event the store
// never takes is never seen by anyone, so its sequence number names
// nothing a client holds.
type WriteThroughLog interface {
	DurableLog
	// OnWritten sets what the log calls, in sequence order for each
	// thread, with a thread's events once the store holds them; err set
	// says the store refused them because another writer holds those
	// sequence numbers (the thread was taken over): events is then what
	// will never be delivered. With wait false (the log's writer, which a
	// publisher may be waiting on) fn must not block: it does nothing and
	// returns false when the thread is busy, and the log calls it again,
	// with wait true, from a goroutine that may block.
	OnWritten(fn func(thread string, events []*Event, err error, wait bool) (done bool))
	// WritesThrough reports whether the log delivers through OnWritten
	// (a log that can be configured either way); when false the server
	// delivers at publish, and OnWritten hears only of refusals.
	WritesThrough() bool
}

// DetachedStore keeps the subscriptions of dropped sessions for a while
// beyond the node that served them (an engine's EngineStores.Detached), so
// that subscription.reconnect restores them on any node. Its methods take
// the context of the command they serve and return the store's error.
type DetachedStore interface {
	// Keep records a dropped session's subscription id for ttl.
	Keep(ctx context.Context, id string, d DetachedSubscription, ttl time.Duration) error
	// Take returns the subscription id of thread and forgets it; ok is
	// false when there is none (never kept, expired, or taken).
	Take(ctx context.Context, thread, id string) (d DetachedSubscription, ok bool, err error)
}

// DetachedSubscription is a dropped session's subscription: its thread,
// its filter, and the last event the session read.
type DetachedSubscription struct {
	Thread string
	Filter channels.Filter
	Last   Cursor
}

// Watcher follows threads for a node of a cluster (an engine's, see
// EngineStores).
// Watch and Unwatch must not block on the network for long: the server
// calls them with its lock held.
type Watcher interface {
	Watch(thread string)
	Unwatch(thread string)
}

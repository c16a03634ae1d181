// Package server is agentstream's core: threads, runs, event streams and
// the command dispatcher behind every transport, producers' batches
// ([Server.Publish]) and the remote workers that serve assistants from
// other processes ([Server.Workers], worker.go).
//
// # Model
//
// A thread is the durable key of a conversation, created by its first
// run.start (or a subscription). Every event
// published on it gets the next sequence number (seq 1, 2, 3, ... never
// reused, never renumbered per connection; its event_id is "EPOCH-SEQ",
// see [Cursor]) and goes into a replay buffer capped by count and by bytes
// ([Config.BufferEvents], [Config.BufferBytes]). A thread idle for
// [Config.IdleRelease], with no run and no subscriber, releases its buffer;
// its state and checkpoints stay in the [StateStore].
//
// A run executes a registered [Assistant]. Its [RunContext] has emitters
// for every channel that keep the protocol's lifecycles (a misuse is an
// ErrLifecycle error, never an invalid stream), Interrupt for human input,
// and state saving. The server emits the root lifecycle (started, running,
// interrupted, completed or failed) itself.
//
// # Commands
//
// [Server.Do] carries out every command but the subscription ones, which
// need a connection scope: a [Session]. Every success carries
// meta.applied_through_seq. Semantics worth knowing:
//
//   - run.start on an interrupted thread resumes it, the input answering
//     every pending interrupt; on a running thread it injects the input
//     (RunContext.Injected) unless multitask_strategy says otherwise:
//     reject refuses, enqueue queues a run, interrupt and rollback cancel
//     the active run (rollback also restores the state it started from) and
//     start the new one;
//   - run.cancel (an extension) is idempotent; the run ends with a failed
//     lifecycle event whose `cancelled` is true;
//   - input.respond answers one or several interrupts at once, or none when
//     any is unknown or already answered (no_such_interrupt); input.answered
//     is published as the run resumes; `update` is merged into the state;
//     `goto` is accepted but has no effect on Go assistants, which have no
//     graph nodes to jump to;
//   - state.fork forks on the same thread: the state goes back to the
//     checkpoint's and a new run starts with the given input;
//   - state is kept for the root namespace.
//
// # Sessions and subscriptions
//
// Every reader is a [Session]: a WebSocket connection, an SSE stream
// ([Server.Subscribe] opens a session with one subscription) or an
// in-process client. A session's subscriptions each take a filter and a
// cursor, and first get an events.missed notice when the cursor is older
// than the buffer (or from another epoch of the stream: reset), the current state when they select the values channel,
// then the buffered events after the cursor, then live events: replay and
// live delivery meet with no gap and no duplicate. The session merges its
// subscriptions into one stream in sequence order, each event once (a new
// subscription's replay is merged with what is still unread), which the
// transport reads and writes. Publishing never blocks on a reader: each
// session has one queue bounded by [Config.QueueBytes], and one that
// overflows with live events is ended with a [SlowConsumerError] naming
// the last event queued, to resume from. A replay longer than the queue
// is paced by its reader: read from the log a queue's worth at a time as
// the reader makes room, live events following once it has caught up. Matching uses an index by channel and
// namespace prefix ([channels.Index]), so subscriptions that do not match
// cost nothing, and a session's subscriptions share their entries, so its
// cost per event does not grow with their number.
package server

package server

import (
	"context"
	"time"

	"github.com/agentstream/agentstream/protocol"
)

// Engine keeps a server's threads beyond its process, so that several
// server processes (nodes) share them: their events, state and owners,
// the events published on other nodes, and the lease that lets one node
// at a time run a thread's runs. redisstore.Engine is one; a server with
// none keeps everything in memory.
//
// New calls Stores, then Start; Close calls the engine's Close after the
// server's runs have stopped. An embedder sets Config.Engine and nothing
// else; one that brings only its own stores sets Config.Stores.
type Engine interface {
	// Stores returns what the server keeps threads in and what each can
	// do; a nil Log or State takes the in-memory one. New calls it once,
	// first, and uses it instead of Config.Stores.
	Stores() EngineStores
	// Start begins the engine's own work for the server (following the
	// events other nodes publish, renewing leases, watching its store's
	// health) through host, which it may use until Close returns. New
	// calls it once, after Stores; a server whose engine fails to start
	// is unavailable with that error (Server.Unavailable).
	Start(host EngineHost) error
	// Close stops the engine and flushes what it has not written yet.
	Close() error
}

// EngineStores are the stores a server keeps threads in (an engine's,
// Engine.Stores, or Config.Stores), and what each can do beyond its
// interface. Every capability is a field the engine sets: the server
// never probes a store for one, so a store that has a capability the
// engine does not name here is not used for it. A nil member takes the
// in-memory store, with the in-memory store's capabilities.
type EngineStores struct {
	// Log keeps each thread's events.
	Log EventLog
	// State keeps values, checkpoints and owners.
	State StateStore
	// Watcher is told when this node starts and stops holding a thread,
	// so that it can follow the events other nodes publish on it.
	Watcher Watcher
	// Cluster shares runs with the other nodes; Workers, when it can, also
	// tells which nodes' remote workers serve an assistant.
	Cluster Cluster
	Workers WorkerDirectory
	// Detached keeps dropped sessions' subscriptions where every node
	// finds them (subscription.reconnect on any node).
	Detached DetachedStore

	// What Log can do (each nil when it cannot).
	//
	// Durable lets other nodes replay the log; Heads reads many threads'
	// last sequence numbers at once; Tails claims a thread's stream for
	// one epoch; Producers remembers producers' batches with their
	// events; Room is waited for, without the thread's lock, before an
	// append (a bounded write queue); Synced is waited for before a
	// producer's batch is acknowledged; WriteThrough delivers events once its store holds
	// them; Memory is the in-memory buffer the log keeps (the log itself
	// for the in-memory one), whose budget a memory governor moves.
	Durable      DurableLog
	Heads        HeadsReader
	Tails        TailClaimer
	Producers    ProducerLog
	Room         RoomWaiter
	Synced       SyncedLog
	WriteThrough WriteThroughLog
	Memory       *MemoryLog

	// What State can do (each nil when it cannot).
	//
	// Catalog keeps thread records (the Platform API's threads); Index
	// finds them by metadata without reading them all; Deleter deletes a
	// thread with its records; Runs keeps run records; Items keeps the
	// store's items; Synced syncs what State wrote before an answer
	// acknowledges it.
	Catalog     ThreadCatalog
	Index       IndexedCatalog
	Deleter     ThreadDeleter
	Runs        RunCatalog
	Items       ItemStore
	StateSynced SyncedState
}

// MemoryStores names the in-memory stores' capabilities: a MemoryLog
// (log) and a MemoryState (state), for Config.Stores.
func MemoryStores(log *MemoryLog, state *MemoryState) EngineStores {
	var st EngineStores
	if log != nil {
		st.memoryLog(log)
	}
	if state != nil {
		st.memoryState(state)
	}
	return st
}

// memoryLog makes l the log, with its capabilities and no others.
func (st *EngineStores) memoryLog(l *MemoryLog) {
	st.Log, st.Memory = l, l
	st.Durable, st.Heads, st.Tails, st.Producers, st.Room, st.Synced, st.WriteThrough = nil, nil, nil, nil, nil, nil, nil
}

// memoryState makes m the state store, with its capabilities and no
// others.
func (st *EngineStores) memoryState(m *MemoryState) {
	st.State, st.Catalog, st.Index, st.Runs, st.Items, st.Deleter, st.StateSynced = m, m, m, m, m, nil, nil
}

// EngineHost is how an engine reaches the server it was started for
// (Engine.Start): the events, commands and failures that come from other
// nodes or from the engine's store, by concern: IngestHost for the log's
// side (another node's events), RunHost for the cluster's (leases, runs,
// forwarded commands), and the store's health. It is not part of
// Server's API. Its methods are safe for concurrent use.
type EngineHost interface {
	IngestHost
	RunHost
	// SetUnavailable says the engine's store cannot be reached (err) or
	// is back (nil): streams end, and commands and subscriptions are
	// refused as unavailable while it is gone.
	SetUnavailable(err error)
	// EndCutRun ends the run of a thread that the engine's store shows
	// open (its root lifecycle neither completed nor failed) while no
	// process runs it: the server stopped while it ran (kill -9, a crash)
	// and started again. Its open messages and tool calls end (code
	// run_cut) and its root fails (ErrRunCut), so that clients waiting on
	// it see it end. It reports whether there was such a run.
	EndCutRun(thread string) bool
}

// IngestHost is what an engine's log side calls: it delivers what other
// nodes published.
type IngestHost interface {
	// Ingest delivers an event another node published on the thread to
	// this node's subscribers, in sequence order, each once; events
	// missing before it are read from the durable log first. A thread
	// this node does not hold is ignored.
	Ingest(thread string, e *Event)
	// CatchUp delivers what the threads' durable log holds beyond the
	// last event this node has of each (what another node published
	// while the subscriptions to them were being made), reading their
	// heads at once when the log can (HeadsReader). An error says the log
	// could not be read for some.
	CatchUp(threads ...string) error
	// RemoteRuns lists the threads this node follows whose run, on
	// another node, has started and not ended (those to catch up on, and
	// to fail when their node is lost), leaving out, when quiet is above
	// zero, those from which an event arrived within quiet (a run whose
	// events still arrive needs no catching up: its next event fills any
	// gap before it).
	RemoteRuns(quiet time.Duration) []string
}

// RunHost is what an engine's Cluster calls: the runs of this node and of
// the nodes it follows.
type RunHost interface {
	// DoForwarded carries out a command another node forwarded here, the
	// node that runs the thread's runs.
	DoForwarded(ctx context.Context, thread string, cmd *protocol.ClientCommand) (*protocol.CommandResponse, error)
	// RunActive reports whether this node runs a run of the thread or has
	// one queued: the engine keeps the thread's lease while it does.
	RunActive(thread string) bool
	// RunState is this node's run of the thread, for a state read on
	// another node.
	RunState(thread string) (status string, interrupts []PendingInterrupt)
	// RemoteRuns: as IngestHost's.
	RemoteRuns(quiet time.Duration) []string
	// FailLostRun ends, for every node's clients, the run of a node that
	// died, unless the stream shows it ended or this node received one of
	// its events within quiet (its node is alive, late to renew); the
	// caller holds the thread's lease (the dead node's expired). It
	// reports what it found: LostRunUnsure asks the caller to look again
	// later (it keeps the thread among those to look at).
	FailLostRun(thread string, quiet time.Duration) LostRun
	// Fence stops this node's run of the thread: its lease was lost.
	Fence(thread string)
	// WorkerRoom is, per assistant that workers connected to this node
	// serve, how many more runs they take at once (less the runs waiting
	// for one of them: it may be below zero), for a WorkerDirectory.
	WorkerRoom() map[string]int
}

// host is the EngineHost of a Server.
type host struct{ s *Server }

var _ EngineHost = host{}

func (h host) Ingest(thread string, e *Event)  { h.s.ingest(thread, e) }
func (h host) CatchUp(threads ...string) error { return h.s.catchUp(threads...) }
func (h host) RunActive(thread string) bool    { return h.s.runActive(thread) }
func (h host) RemoteRuns(quiet time.Duration) []string {
	return h.s.remoteRuns(quiet)
}
func (h host) Fence(thread string)        { h.s.fence(thread) }
func (h host) SetUnavailable(err error)   { h.s.setUnavailable(err) }
func (h host) WorkerRoom() map[string]int { return h.s.workers.room() }
func (h host) RunState(thread string) (string, []PendingInterrupt) {
	return h.s.runState(thread)
}

func (h host) FailLostRun(thread string, quiet time.Duration) LostRun {
	return h.s.failLostRun(thread, true, quiet, nodeLost)
}

func (h host) EndCutRun(thread string) bool {
	return h.s.failLostRun(thread, true, 0, runCut) == LostRunFailed
}

func (h host) DoForwarded(ctx context.Context, thread string, cmd *protocol.ClientCommand) (*protocol.CommandResponse, error) {
	return result(h.s.do(forwarded(ctx), thread, cmd))
}

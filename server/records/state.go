package records

import (
	"context"
	"time"

	"github.com/agentstream/agentstream/channels"
)

// StateStore keeps what outlives a thread's event buffer: its current
// values, its checkpoints and its owner (with authentication on, the
// principal that first used it). Implementations are safe for concurrent
// use. Every method takes the context of the command or run it serves
// (its cancellation abandons the call) and returns the store's error,
// which the server hands on: a command fails with unavailable, a run's
// emitter gets it. The in-memory one is [NewMemoryState]; a Redis one
// lets several server processes share threads.
type StateStore interface {
	// Exists reports whether the thread has any state or checkpoint.
	Exists(ctx context.Context, thread string) (bool, error)
	// Values returns the thread's current values; ok is false when it has
	// none. The map must not be modified.
	Values(ctx context.Context, thread string) (values map[string]any, ok bool, err error)
	// SetValues replaces the thread's values.
	SetValues(ctx context.Context, thread string, values map[string]any) error
	// AddCheckpoint records a checkpoint.
	AddCheckpoint(ctx context.Context, thread string, cp CheckpointRecord) error
	// Checkpoints lists the thread's checkpoints, newest first.
	Checkpoints(ctx context.Context, thread string) ([]CheckpointRecord, error)
	// Checkpoint finds one checkpoint by id; ok is false when there is
	// none.
	Checkpoint(ctx context.Context, thread, id string) (cp CheckpointRecord, ok bool, err error)
	// Owner returns the principal that owns the thread; ok is false when
	// nobody does yet.
	Owner(ctx context.Context, thread string) (owner string, ok bool, err error)
	// ClaimOwner makes principal the thread's owner unless it has one,
	// atomically, and returns the owner it has then.
	ClaimOwner(ctx context.Context, thread, principal string) (owner string, err error)
	// Delete forgets the thread's values, checkpoints and owner (the
	// server forgets threads idle for server.Config.ThreadTTL).
	Delete(ctx context.Context, thread string) error
}

// CheckpointRecord is a saved checkpoint: its envelope and the values it
// captured.
type CheckpointRecord struct {
	ID        string
	ParentID  string
	Step      int64
	Source    string // input, loop, update or fork
	Namespace channels.Namespace
	Node      string
	Time      time.Time
	Values    map[string]any
	Metadata  map[string]any
}

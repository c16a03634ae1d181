package records

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/agentstream/agentstream/internal/jsonval"
	"github.com/agentstream/agentstream/protocol"
)

// ThreadRecord is what a thread says of itself beyond its events and
// state, as the LangGraph Platform API shows it: when it was made and last
// changed, and the metadata and config its client gave it. A thread made
// by the protocol (a run.start, a subscription) has none until a Platform
// client asks for it: it then gets one dated from then.
type ThreadRecord struct {
	ID        string
	Owner     string // the principal that owns it ("" without authentication)
	CreatedAt time.Time
	UpdatedAt time.Time
	Metadata  map[string]any
	Config    map[string]any
	// TTL, when more than 0, is how long the thread lives after its
	// record last changed (UpdatedAt): the Platform API's thread ttl, its
	// strategy delete.
	TTL time.Duration
}

// Expired reports whether the record's TTL has run out at now.
func (r ThreadRecord) Expired(now time.Time) bool {
	return r.TTL > 0 && !now.Before(r.UpdatedAt.Add(r.TTL))
}

// ThreadCatalog is a StateStore that keeps ThreadRecords, and forgets a
// thread's with the rest of it (Delete). The in-memory and disk engines'
// stores are.
type ThreadCatalog interface {
	// Record returns the thread's record; ok is false when it has none.
	Record(ctx context.Context, thread string) (rec ThreadRecord, ok bool, err error)
	// SetRecord writes a thread's record.
	SetRecord(ctx context.Context, rec ThreadRecord) error
	// Records calls fn with every record, in no set order, until fn
	// returns false.
	Records(ctx context.Context, fn func(ThreadRecord) bool) error
}

// ThreadDeleter is a StateStore that deletes a thread for good on demand
// (DeleteThread) where its Delete, the one idle threads get, leaves the
// thread to expire (Redis).
type ThreadDeleter interface {
	DeleteThread(ctx context.Context, thread string) error
}

// SyncedState is a StateStore whose writes reach the disk after they
// return (the disk engine writes values, checkpoints and run records
// without a sync, synced with its next group commit): SyncState returns
// once every write that returned before the call is synced, so that an
// answer acknowledging them outlives a crash. A store whose writes are
// as durable as they will be when they return has no SyncState.
type SyncedState interface {
	SyncState(ctx context.Context) error
}

// NewestCheckpointer is a StateStore that reads a thread's newest
// checkpoint alone, without its values (NewestCheckpoint; ok false when
// it has none), where Checkpoints reads them all: what a change of the
// values needs to name its parent and step.
type NewestCheckpointer interface {
	NewestCheckpoint(ctx context.Context, thread string) (cp CheckpointRecord, ok bool, err error)
}

// CheckpointPatcher is a StateStore that merges metadata into a thread's
// newest checkpoint's (the Platform API's threads.patchState); ok is
// false when the thread has none. The caller keeps runs off the thread
// meanwhile.
type CheckpointPatcher interface {
	PatchNewestCheckpoint(ctx context.Context, thread string, metadata map[string]any) (cp CheckpointRecord, ok bool, err error)
}

// MergedMetadata is have with patch's members over it, a new map (never
// nil): what a CheckpointPatcher writes.
func MergedMetadata(have, patch map[string]any) map[string]any {
	md := maps.Clone(have)
	if md == nil {
		md = map[string]any{}
	}
	maps.Copy(md, patch)
	return md
}

// ErrNoCatalog refuses the Platform API's thread routes on an engine whose
// StateStore keeps no ThreadRecords.
var ErrNoCatalog = coded(protocol.ErrorCodeNotSupported, ReasonNotServed, "server: this engine keeps no thread records (the LangGraph Platform API's threads)")

// ErrThreadExists refuses to create a thread that exists (if_exists
// raise).
var ErrThreadExists = coded(protocol.ErrorCodeInvalidArgument, ReasonConflict, "server: the thread exists")

// ErrThreadDeleted ends the sessions of a thread that was deleted.
var ErrThreadDeleted = errors.New("server: the thread was deleted")

// ErrThreadBusy refuses to delete a thread while a run of it goes on.
var ErrThreadBusy = coded(protocol.ErrorCodeInvalidArgument, ReasonThreadBusy, "server: the thread has an active run")

func orEmptyMap(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return maps.Clone(m)
}

// NewUUID returns a random (version 4) UUID, the form of the Platform
// API's thread ids.
func NewUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// MetadataMatches reports whether have holds every member of want with an
// equal value (a search's selection by metadata or values; JSON values:
// reflect.DeepEqual of their decoded forms, numbers compared as numbers).
func MetadataMatches(have, want map[string]any) bool {
	for k, w := range want {
		h, ok := have[k]
		if !ok || !jsonval.Equal(h, w) {
			return false
		}
	}
	return true
}

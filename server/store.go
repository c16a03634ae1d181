package server

import (
	"crypto/rand"
	"encoding/hex"
	"maps"
	"sync"
	"time"

	"github.com/agentstream/agentstream/channels"
)

// StateStore keeps what outlives a thread's event buffer: its current
// values and its checkpoints. Implementations are safe for concurrent use.
// The in-memory one is [NewMemoryState]; a Redis one lets several server
// processes share threads.
type StateStore interface {
	// Exists reports whether the thread has any state or checkpoint.
	Exists(thread string) bool
	// Values returns the thread's current values; ok is false when it has
	// none. The map must not be modified.
	Values(thread string) (values map[string]any, ok bool)
	// SetValues replaces the thread's values.
	SetValues(thread string, values map[string]any)
	// AddCheckpoint records a checkpoint.
	AddCheckpoint(thread string, cp CheckpointRecord)
	// Checkpoints lists the thread's checkpoints, newest first.
	Checkpoints(thread string) []CheckpointRecord
	// Checkpoint finds one checkpoint by id.
	Checkpoint(thread, id string) (CheckpointRecord, bool)
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

// FanOut carries published events to the other nodes of a cluster.
// Publish must not block the publisher. A single process needs none.
type FanOut interface {
	Publish(thread string, e *Event)
}

// MemoryState is the in-memory StateStore.
type MemoryState struct {
	mu      sync.Mutex
	threads map[string]*memThread
}

type memThread struct {
	values      map[string]any
	checkpoints []CheckpointRecord // oldest first
}

var _ StateStore = (*MemoryState)(nil)

// NewMemoryState returns an empty in-memory store.
func NewMemoryState() *MemoryState { return &MemoryState{threads: map[string]*memThread{}} }

func (m *MemoryState) get(thread string) *memThread {
	t := m.threads[thread]
	if t == nil {
		t = &memThread{}
		m.threads[thread] = t
	}
	return t
}

// Exists implements StateStore.
func (m *MemoryState) Exists(thread string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.threads[thread]
	return ok
}

// Values implements StateStore.
func (m *MemoryState) Values(thread string) (map[string]any, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.threads[thread]
	if t == nil || t.values == nil {
		return nil, false
	}
	return t.values, true
}

// SetValues implements StateStore.
func (m *MemoryState) SetValues(thread string, values map[string]any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.get(thread).values = maps.Clone(values)
}

// AddCheckpoint implements StateStore.
func (m *MemoryState) AddCheckpoint(thread string, cp CheckpointRecord) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.get(thread)
	t.checkpoints = append(t.checkpoints, cp)
}

// Checkpoints implements StateStore.
func (m *MemoryState) Checkpoints(thread string) []CheckpointRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.threads[thread]
	if t == nil {
		return nil
	}
	out := make([]CheckpointRecord, len(t.checkpoints))
	for i, cp := range t.checkpoints {
		out[len(out)-1-i] = cp
	}
	return out
}

// Checkpoint implements StateStore.
func (m *MemoryState) Checkpoint(thread, id string) (CheckpointRecord, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t := m.threads[thread]; t != nil {
		for _, cp := range t.checkpoints {
			if cp.ID == id {
				return cp, true
			}
		}
	}
	return CheckpointRecord{}, false
}

func randomID(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

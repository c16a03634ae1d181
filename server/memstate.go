package server

import (
	"context"
	"maps"
	"sync"

	"github.com/agentstream/agentstream/internal/compact"
)

// MemoryState is the in-memory StateStore.
type MemoryState struct {
	// MaxCheckpoints, when more than 0, caps the checkpoints kept per
	// thread: the oldest go first. Set it before use.
	MaxCheckpoints int

	mu      sync.Mutex
	threads map[string]*memThread
	hw      compact.Tracker
}

type memThread struct {
	owner       string
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
		m.hw.Grew(len(m.threads))
	}
	return t
}

// Exists implements StateStore.
func (m *MemoryState) Exists(_ context.Context, thread string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.threads[thread]
	return ok, nil
}

// Values implements StateStore.
func (m *MemoryState) Values(_ context.Context, thread string) (map[string]any, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.threads[thread]
	if t == nil || t.values == nil {
		return nil, false, nil
	}
	return t.values, true, nil
}

// SetValues implements StateStore.
func (m *MemoryState) SetValues(_ context.Context, thread string, values map[string]any) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.get(thread).values = maps.Clone(values)
	return nil
}

// AddCheckpoint implements StateStore.
func (m *MemoryState) AddCheckpoint(_ context.Context, thread string, cp CheckpointRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.get(thread)
	t.checkpoints = append(t.checkpoints, cp)
	if n := m.MaxCheckpoints; n > 0 && len(t.checkpoints) > n {
		drop := len(t.checkpoints) - n
		clear(t.checkpoints[:drop]) // let their values go
		t.checkpoints = t.checkpoints[drop:]
	}
	return nil
}

// Owner implements StateStore.
func (m *MemoryState) Owner(_ context.Context, thread string) (string, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t := m.threads[thread]; t != nil && t.owner != "" {
		return t.owner, true, nil
	}
	return "", false, nil
}

// ClaimOwner implements StateStore.
func (m *MemoryState) ClaimOwner(_ context.Context, thread, principal string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.get(thread)
	if t.owner == "" {
		t.owner = principal
	}
	return t.owner, nil
}

// Delete implements StateStore.
func (m *MemoryState) Delete(_ context.Context, thread string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.threads, thread)
	m.threads = compact.Shrink(m.threads, &m.hw)
	return nil
}

// Checkpoints implements StateStore.
func (m *MemoryState) Checkpoints(_ context.Context, thread string) ([]CheckpointRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.threads[thread]
	if t == nil {
		return nil, nil
	}
	out := make([]CheckpointRecord, len(t.checkpoints))
	for i, cp := range t.checkpoints {
		out[len(out)-1-i] = cp
	}
	return out, nil
}

// Checkpoint implements StateStore.
func (m *MemoryState) Checkpoint(_ context.Context, thread, id string) (CheckpointRecord, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t := m.threads[thread]; t != nil {
		for _, cp := range t.checkpoints {
			if cp.ID == id {
				return cp, true, nil
			}
		}
	}
	return CheckpointRecord{}, false, nil
}

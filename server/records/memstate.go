package records

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/agentstream/agentstream/internal/compact"
)

// MemoryState is the in-memory StateStore.
type MemoryState struct {
	// MaxCheckpoints, when more than 0, caps the checkpoints kept per
	// thread: the oldest go first. Set it before use.
	MaxCheckpoints int
	// MaxRecords, when more than 0, caps the thread records kept (the
	// Platform API's threads): past it SetRecord of a new thread fails
	// with ErrTooManyThreads. Set it before use.
	MaxRecords int

	mu      sync.Mutex
	threads map[string]*memThread
	records map[string]*ThreadRecord
	runs    map[string][]RunRecord // per thread, oldest first, at most maxMemoryRuns
	runOf   map[string]string      // run id -> its thread, for the runs kept
	runOfHW compact.Tracker
	runsHW  compact.Tracker
	index   *RecordIndex          // the records' metadata
	items   map[string]*StoreItem // by ItemPath
	itemHW  compact.Tracker
	hw      compact.Tracker
	recHW   compact.Tracker
}

type memThread struct {
	owner       string
	values      map[string]any
	checkpoints []CheckpointRecord // oldest first
}

var (
	_ StateStore     = (*MemoryState)(nil)
	_ ThreadCatalog  = (*MemoryState)(nil)
	_ RunCatalog     = (*MemoryState)(nil)
	_ ItemStore      = (*MemoryState)(nil)
	_ IndexedCatalog = (*MemoryState)(nil)
)

// NewMemoryState returns an empty in-memory store.
func NewMemoryState() *MemoryState {
	return &MemoryState{threads: map[string]*memThread{}, records: map[string]*ThreadRecord{}, runs: map[string][]RunRecord{}, runOf: map[string]string{}, items: map[string]*StoreItem{}, index: NewRecordIndex()}
}

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
	delete(m.records, thread)
	m.records = compact.Shrink(m.records, &m.recHW)
	m.index.Delete(thread)
	for _, r := range m.runs[thread] {
		delete(m.runOf, r.ID)
	}
	m.runOf = compact.Shrink(m.runOf, &m.runOfHW)
	delete(m.runs, thread)
	m.runs = compact.Shrink(m.runs, &m.runsHW)
	return nil
}

// maxMemoryRuns is how many runs of a thread the in-memory store lists
// (the oldest forgotten first).
const maxMemoryRuns = 100

// SetRun implements RunCatalog.
func (m *MemoryState) SetRun(_ context.Context, rec RunRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	runs := m.runs[rec.Thread]
	for i := range runs {
		if runs[i].ID == rec.ID {
			runs[i] = rec
			return nil
		}
	}
	if runs == nil && m.MaxRecords > 0 && len(m.runs) >= m.MaxRecords {
		return nil // as many threads with runs as the store keeps threads
	}
	runs = append(runs, rec)
	m.runOf[rec.ID] = rec.Thread
	m.runOfHW.Grew(len(m.runOf))
	if len(runs) > maxMemoryRuns {
		for _, old := range runs[:len(runs)-maxMemoryRuns] {
			delete(m.runOf, old.ID)
		}
		runs = slices.Delete(runs, 0, len(runs)-maxMemoryRuns)
		m.runOf = compact.Shrink(m.runOf, &m.runOfHW)
	}
	m.runs[rec.Thread] = runs
	m.runsHW.Grew(len(m.runs))
	return nil
}

// RunThread implements RunCatalog.
func (m *MemoryState) RunThread(_ context.Context, run string) (string, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	thread, ok := m.runOf[run]
	return thread, ok, nil
}

// DeleteRun implements RunCatalog.
func (m *MemoryState) DeleteRun(_ context.Context, thread, run string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.runs[thread] = slices.DeleteFunc(m.runs[thread], func(r RunRecord) bool { return r.ID == run })
	if m.runOf[run] == thread {
		delete(m.runOf, run)
		m.runOf = compact.Shrink(m.runOf, &m.runOfHW)
	}
	if len(m.runs[thread]) == 0 {
		delete(m.runs, thread)
		m.runs = compact.Shrink(m.runs, &m.runsHW)
	}
	return nil
}

// Runs implements RunCatalog.
func (m *MemoryState) Runs(_ context.Context, thread string) ([]RunRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := slices.Clone(m.runs[thread])
	slices.Reverse(out)
	return out, nil
}

// Record implements ThreadCatalog.
func (m *MemoryState) Record(_ context.Context, thread string) (ThreadRecord, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.records[thread]
	if r == nil {
		return ThreadRecord{}, false, nil
	}
	return *r, true, nil
}

// SetRecord implements ThreadCatalog.
func (m *MemoryState) SetRecord(_ context.Context, rec ThreadRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.records[rec.ID]; !ok && m.MaxRecords > 0 && len(m.records) >= m.MaxRecords {
		return fmt.Errorf("%w: %d thread records, the most this server keeps in memory (--max-threads)", ErrTooManyThreads, len(m.records))
	}
	m.records[rec.ID] = &rec
	m.recHW.Grew(len(m.records))
	m.index.Set(rec)
	return nil
}

// RecordsMatching implements IndexedCatalog.
func (m *MemoryState) RecordsMatching(_ context.Context, metadata map[string]any, fn func(ThreadRecord) bool) (bool, error) {
	ids, ok := m.index.Candidates(metadata)
	if !ok {
		return false, nil
	}
	m.mu.Lock()
	recs := make([]*ThreadRecord, 0, len(ids))
	for _, id := range ids {
		if r := m.records[id]; r != nil {
			recs = append(recs, r)
		}
	}
	m.mu.Unlock()
	for _, r := range recs {
		if !fn(*r) {
			break
		}
	}
	return true, nil
}

// Records implements ThreadCatalog.
func (m *MemoryState) Records(_ context.Context, fn func(ThreadRecord) bool) error {
	// The records as they are now (a record is replaced whole, never
	// changed): fn runs without m.mu, free to read the store.
	m.mu.Lock()
	recs := make([]*ThreadRecord, 0, len(m.records))
	for _, r := range m.records {
		recs = append(recs, r)
	}
	m.mu.Unlock()
	for _, r := range recs {
		if !fn(*r) {
			return nil
		}
	}
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

// NewestCheckpoint implements NewestCheckpointer.
func (m *MemoryState) NewestCheckpoint(_ context.Context, thread string) (CheckpointRecord, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.threads[thread]
	if t == nil || len(t.checkpoints) == 0 {
		return CheckpointRecord{}, false, nil
	}
	return t.checkpoints[len(t.checkpoints)-1], true, nil
}

// PatchNewestCheckpoint implements CheckpointPatcher.
func (m *MemoryState) PatchNewestCheckpoint(_ context.Context, thread string, metadata map[string]any) (CheckpointRecord, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.threads[thread]
	if t == nil || len(t.checkpoints) == 0 {
		return CheckpointRecord{}, false, nil
	}
	cp := &t.checkpoints[len(t.checkpoints)-1]
	cp.Metadata = MergedMetadata(cp.Metadata, metadata)
	return *cp, true, nil
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

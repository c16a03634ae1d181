package server

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/agentstream/agentstream/protocol"
)

// RunRecord is a run as the LangGraph Platform API lists it: its thread,
// assistant, status (pending, running, success, error, interrupted) and
// what it was started with.
type RunRecord struct {
	ID, Thread, Assistant string
	Status                string
	MultitaskStrategy     string
	Input                 any
	Config, Metadata      map[string]any
	CreatedAt, UpdatedAt  time.Time
	// After is the sequence number of the thread's last event before the
	// run started (its events follow it); 0 too while it is queued.
	After uint64
}

// RunCatalog is a StateStore that keeps the runs of each thread (the
// in-memory, disk and Redis engines' do), forgetting them with the
// thread.
type RunCatalog interface {
	// SetRun writes a run's record (a new one, or its new status).
	SetRun(ctx context.Context, rec RunRecord) error
	// Runs lists a thread's runs, newest first.
	Runs(ctx context.Context, thread string) ([]RunRecord, error)
	// DeleteRun forgets a run's record (none is no error).
	DeleteRun(ctx context.Context, thread, run string) error
	// RunThread finds the thread of a run it keeps (the Agent Protocol's
	// routes name a run alone); ok is false when it keeps none.
	RunThread(ctx context.Context, run string) (thread string, ok bool, err error)
}

// The Platform's run statuses.
const (
	RunPending     = "pending"
	RunRunning     = "running"
	RunSuccess     = "success"
	RunError       = "error"
	RunInterrupted = "interrupted"
)

// runRecorder writes run records in the order runs change, off the
// threads' locks, on a goroutine of its own (stopped by Close once the
// runs have ended); a record that finds its queue full is dropped
// (counted).
type runRecorder struct {
	mu      sync.Mutex
	ch      chan recorded
	closed  bool
	done    chan struct{}
	dropped uint64
}

const runRecordQueue = 4096

// recorded is a record to write, or (done set) a mark to close once what
// was queued before it is written.
type recorded struct {
	rec  RunRecord
	done chan struct{}
}

func (s *Server) startRunRecorder() {
	rc := s.st.Runs
	if rc == nil {
		return
	}
	r := &runRecorder{ch: make(chan recorded, runRecordQueue), done: make(chan struct{})}
	s.runRecs = r
	go func() {
		defer close(r.done)
		for it := range r.ch {
			if it.done != nil {
				close(it.done)
				continue
			}
			_ = rc.SetRun(context.Background(), it.rec) // a store that fails loses the record, not the run
		}
	}()
}

// stopRunRecorder writes what is queued and stops the recorder.
func (s *Server) stopRunRecorder(ctx context.Context) {
	r := s.runRecs
	if r == nil {
		return
	}
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.ch)
	}
	r.mu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
	}
}

// recordRun queues run r's record with status. The caller holds t.mu.
func (s *Server) recordRun(r *run, status string) {
	rr := s.runRecs
	if rr == nil {
		return
	}
	now := s.cfg.Now().UTC()
	if r.createdAt.IsZero() {
		r.createdAt = now
	}
	rec := RunRecord{ID: r.id, Thread: r.t.id, Assistant: r.assistantID, Status: status, MultitaskStrategy: r.strategy,
		Input: r.input, Config: r.config, Metadata: r.metadata, CreatedAt: r.createdAt, UpdatedAt: now, After: r.after}
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.closed {
		return
	}
	select {
	case rr.ch <- recorded{rec: rec}:
	default:
		rr.dropped++
	}
}

// SyncRunRecords waits until the run records queued before the call are
// written (or ctx ends): a read that follows sees them.
func (s *Server) SyncRunRecords(ctx context.Context) {
	rr := s.runRecs
	if rr == nil {
		return
	}
	done := make(chan struct{})
	rr.mu.Lock()
	if rr.closed {
		rr.mu.Unlock()
		return
	}
	select {
	case rr.ch <- recorded{done: done}:
	case <-ctx.Done():
		rr.mu.Unlock()
		return
	}
	rr.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// endStatus is the Platform's status of a run that ended with lifecycle
// status st (cancelled: stopped from outside).
func endStatus(st protocol.AgentStatus, cancelled bool) string {
	switch {
	case st == protocol.AgentStatusCompleted:
		return RunSuccess
	case cancelled:
		return RunInterrupted
	}
	return RunError
}

// Runs lists thread id's runs, newest first (ErrNoCatalog on an engine
// that keeps none).
func (s *Server) Runs(ctx context.Context, id string) ([]RunRecord, error) {
	rc := s.st.Runs
	if rc == nil {
		return nil, ErrNoCatalog
	}
	runs, err := rc.Runs(ctx, id)
	if err != nil {
		return nil, storeError(err)
	}
	return runs, nil
}

// RunEnded reports whether run runID of the thread is neither this
// node's active run nor queued on it.
func (s *Server) RunEnded(thread, runID string) bool {
	t, _ := s.thread(thread, false)
	if t == nil {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.run != nil && t.run.id == runID {
		return false
	}
	for _, q := range t.queued {
		if q.id == runID {
			return false
		}
	}
	return true
}

// DeleteRun forgets run runID of thread (the Platform's runs.delete); a
// run that is queued, running or interrupted is ErrThreadBusy (cancel it
// first).
func (s *Server) DeleteRun(ctx context.Context, thread, runID string) error {
	rc := s.st.Runs
	if rc == nil {
		return ErrNoCatalog
	}
	if t, _ := s.thread(thread, false); t != nil {
		t.mu.Lock()
		busy := t.run != nil && t.run.id == runID && !t.run.ended
		for _, q := range t.queued {
			busy = busy || q.id == runID
		}
		t.mu.Unlock()
		if busy {
			return fmt.Errorf("%w: the run goes on; cancel it first", ErrThreadBusy)
		}
	}
	s.SyncRunRecords(ctx) // its last record written before it is deleted
	if err := rc.DeleteRun(ctx, thread, runID); err != nil {
		return storeError(err)
	}
	return nil
}

// RollbackRun cancels run runID of thread as multitask_strategy rollback
// does: the thread's values go back to what they were when it started.
// found is false when the run is neither active nor queued.
func (s *Server) RollbackRun(thread, runID string) (found bool) {
	t, _ := s.thread(thread, false)
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.run; r != nil && r.id == runID && !r.ended {
		r.cancel(errRollback)
		return true
	}
	for i, q := range t.queued {
		if q.id == runID {
			q.endCause = errRollback
			t.queued = slices.Delete(t.queued, i, i+1)
			return true
		}
	}
	return false
}

// DeleteOnCompletion deletes thread once run runID has ended and no run
// waits behind it (the Platform's stateless runs, on_completion delete).
// A run that ended already has its thread deleted now.
func (s *Server) DeleteOnCompletion(ctx context.Context, thread, runID string) error {
	if t, _ := s.thread(thread, false); t != nil {
		t.mu.Lock()
		marked := false
		if r := t.run; r != nil && r.id == runID && !r.ended {
			r.temporary, marked = true, true
		}
		for _, q := range t.queued {
			if q.id == runID {
				q.temporary, marked = true, true
			}
		}
		t.mu.Unlock()
		if marked {
			return nil
		}
	}
	_, err := s.DeleteThread(ctx, thread)
	return err
}

// ActiveRun is the id of thread's active run (running or waiting on
// interrupts) on this node; ok is false when it has none.
func (s *Server) ActiveRun(thread string) (runID string, ok bool) {
	t, _ := s.thread(thread, false)
	if t == nil {
		return "", false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.run == nil || t.run.ended {
		return "", false
	}
	return t.run.id, true
}

// RunWaits reports whether run runID of thread is waiting for its
// interrupts to be answered (the Platform's runs.wait and join answer
// then, as its runs end there).
func (s *Server) RunWaits(thread, runID string) bool {
	t, _ := s.thread(thread, false)
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.run
	return r != nil && r.id == runID && !r.ended && r.status == statusInterrupted && len(r.pending) > 0
}

// FindRun finds run runID by its id alone (the Agent Protocol's routes):
// its record; ok is false when no thread keeps it.
func (s *Server) FindRun(ctx context.Context, runID string) (RunRecord, bool, error) {
	rc := s.st.Runs
	if rc == nil {
		return RunRecord{}, false, ErrNoCatalog
	}
	s.SyncRunRecords(ctx)
	thread, ok, err := rc.RunThread(ctx, runID)
	if err != nil || !ok {
		return RunRecord{}, false, storeErrorOrNil(err)
	}
	runs, err := rc.Runs(ctx, thread)
	if err != nil {
		return RunRecord{}, false, storeError(err)
	}
	for _, r := range runs {
		if r.ID == runID {
			return r, true, nil
		}
	}
	return RunRecord{}, false, nil
}

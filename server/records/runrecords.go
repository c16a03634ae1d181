package records

import (
	"context"
	"time"
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
	// Error is why a run of status error failed, when the server knows
	// more than its stream says (a run cut by a crash or a lost node).
	Error string
}

// Open reports whether the record says the run runs or is queued (it
// has not ended, nor does it wait on its interrupts).
func (r RunRecord) Open() bool { return r.Status == RunRunning || r.Status == RunPending }

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

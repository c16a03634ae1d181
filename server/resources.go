package server

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/agentstream/agentstream/auth"
)

// ResourceHost is what a resource of the Platform API (the thread
// catalog and run records of package server/threads, the store's items of
// package server/items, and those to come) uses of the server it sits on:
// the stores and limits, the questions only the thread/run core can
// answer, and the run-lifecycle hook. A resource is a package of its own
// on this interface and on the engine interface it keeps its data in
// (ThreadCatalog, RunCatalog, ItemStore); it is not part of Server's API
// for transports. Its methods are safe for concurrent use.
type ResourceHost interface {
	// Stores are the server's stores and what they can do.
	Stores() EngineStores
	// Config is the server's configuration, its defaults applied.
	Config() Config
	// Refused counts a refusal because of limit (MetricsSnapshot.Refused).
	Refused(limit Limit)
	// SizeOK is nil when v is at most max bytes as JSON; otherwise it
	// counts the refusal and is ErrTooLarge naming what and the flag.
	SizeOK(v any, max int, limit Limit, what, flag string) error
	// Shared returns the server's one value under key, made by make on
	// the first call: a resource's state, one per server however many
	// transports use it.
	Shared(key any, make func() any) any
	// OnRun calls fn with a run's record each time the run's status
	// changes (pending, running, interrupted, and its end), under the
	// thread's lock: fn must not block. Runs started before the call are
	// heard from their next change.
	OnRun(fn func(RunRecord))
	// OnRunCut calls fn each time the core ends, for every node's
	// clients, the run of a thread that no process runs any more (the
	// server was killed and started again, or the run's node was lost),
	// under the thread's lock: fn must not block. The runs cut before the
	// call (those the engine found open at start) are told at once, up to
	// maxPendingCuts of them.
	OnRunCut(fn func(RunCut))
	// OnClose calls fn when the server closes, after its runs stopped
	// (whose last changes fn may still be writing) and before its engine.
	OnClose(fn func(ctx context.Context))
	// Authorize is Server.Authorize.
	Authorize(p *auth.Principal, threadID string, create bool) error
	// ThreadExists reports whether the thread has state or history, or a
	// run or events on this node.
	ThreadExists(ctx context.Context, id string) (bool, error)
	// RunStatus is the thread's run as the Platform shows it: idle,
	// running or interrupted (on this node or, with a cluster, the node
	// that runs it), and its pending interrupts.
	RunStatus(thread string) (status string, interrupts []PendingInterrupt)
	// Run is run runID of the thread as this node has it.
	Run(thread, runID string) LiveRun
	// ActiveRun is the id of the thread's active run (running or waiting
	// on interrupts) on this node; ok is false when it has none.
	ActiveRun(thread string) (runID string, ok bool)
	// RollbackRun cancels run runID as multitask_strategy rollback does:
	// the thread's values go back to what they were when it started.
	// found is false when the run is neither active nor queued.
	RollbackRun(thread, runID string) (found bool)
	// AfterRun calls fn once run runID has ended with no run waiting
	// behind it, on the run's goroutine, the thread's lock let go (how a
	// thread is deleted on completion); marked is false when the run is
	// neither active nor queued (it ended), and fn is not called.
	AfterRun(thread, runID string, fn func()) (marked bool)
	// Release ends the thread on this node before its data is deleted:
	// its sessions end (ErrThreadDeleted) and its buffer goes. A thread
	// with a run active on this node, or queued, is ErrThreadBusy.
	Release(id string) error
	// WhileIdle calls fn with no run starting on the thread meanwhile;
	// a thread whose run goes on (but one waiting for its interrupts'
	// answers) is ErrThreadBusy, and fn is not called.
	WhileIdle(thread string, fn func() error) error
}

// RunCut is a run the core ended because no process runs it any more
// (ResourceHost.OnRunCut): the runs of Thread that started before event
// Seq (the failed lifecycle event that ends it, at At) and had not ended
// are cut, for Err. Unseen says none of the cut run's events reached the
// store (its record is all there is of it): only the records still
// running or queued end, not one that waits on its interrupts.
type RunCut struct {
	Thread string
	Seq    uint64
	At     time.Time
	Err    error
	Unseen bool
}

// maxPendingCuts is how many cut runs the server keeps for run-cut hooks
// added later (OnRunCut): the engine ends those it finds at start before
// a resource can listen.
const maxPendingCuts = 4096

// LiveRun is a run as this node has it (ResourceHost.Run).
type LiveRun struct {
	// Current: it is the thread's run, still finishing if it ended;
	// Active: it is and has not ended; Queued: it waits behind another.
	Current, Active, Queued bool
	// Waits: it is active and waits for its interrupts to be answered.
	Waits bool
}

// Ended reports whether the run is neither the thread's nor queued here.
func (r LiveRun) Ended() bool { return !r.Current && !r.Queued }

// Resources is the server's ResourceHost, for the resource packages.
func (s *Server) Resources() ResourceHost { return resourceHost{s} }

// resourceHost is a Server's ResourceHost.
type resourceHost struct{ s *Server }

// resourceHooks are what the resources asked of the server.
type resourceHooks struct {
	// sharedMu is held while a shared value is made, which may add hooks
	// (under mu).
	sharedMu sync.Mutex
	shared   map[any]any
	mu       sync.Mutex
	// onClose: the resources' closers. (The run hooks are
	// Server.runHooks, replaced whole under mu.)
	onClose []func(context.Context)
	// onCut: the run-cut hooks; cuts: the runs cut while none listened,
	// for the first that does (at most maxPendingCuts).
	onCut []func(RunCut)
	cuts  []RunCut
}

func (h resourceHost) Stores() EngineStores { return h.s.st }
func (h resourceHost) Config() Config       { return h.s.cfg }
func (h resourceHost) Refused(l Limit)      { h.s.metrics.refused.add(l) }
func (h resourceHost) SizeOK(v any, max int, limit Limit, what, flag string) error {
	return h.s.sizeOK(v, max, limit, what, flag)
}

func (h resourceHost) Shared(key any, make func() any) any {
	r := &h.s.hooks
	r.sharedMu.Lock()
	defer r.sharedMu.Unlock()
	if v, ok := r.shared[key]; ok {
		return v
	}
	if r.shared == nil {
		r.shared = map[any]any{}
	}
	v := make()
	r.shared[key] = v
	return v
}

func (h resourceHost) OnRun(fn func(RunRecord)) {
	r := &h.s.hooks
	r.mu.Lock()
	defer r.mu.Unlock()
	var hooks []func(RunRecord) // a new slice: runChanged reads the old one without the lock
	if old := h.s.runHooks.Load(); old != nil {
		hooks = slices.Clone(*old)
	}
	hooks = append(hooks, fn)
	h.s.runHooks.Store(&hooks)
}

func (h resourceHost) OnRunCut(fn func(RunCut)) {
	r := &h.s.hooks
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onCut = append(r.onCut, fn)
	for _, c := range r.cuts {
		fn(c)
	}
	r.cuts = nil
}

// runCut tells the run-cut hooks (ResourceHost.OnRunCut) of c, or keeps
// it for the first. The caller holds c's thread's lock.
func (s *Server) runCut(c RunCut) {
	r := &s.hooks
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.onCut) == 0 {
		if len(r.cuts) < maxPendingCuts {
			r.cuts = append(r.cuts, c)
		}
		return
	}
	for _, fn := range r.onCut {
		fn(c)
	}
}

func (h resourceHost) OnClose(fn func(context.Context)) {
	r := &h.s.hooks
	r.mu.Lock()
	r.onClose = append(r.onClose, fn)
	r.mu.Unlock()
}

func (h resourceHost) Authorize(p *auth.Principal, id string, create bool) error {
	return h.s.Authorize(p, id, create)
}

func (h resourceHost) ThreadExists(ctx context.Context, id string) (bool, error) {
	return h.s.threadExists(ctx, id)
}

func (h resourceHost) RunStatus(thread string) (string, []PendingInterrupt) {
	return h.s.runState(thread)
}

func (h resourceHost) Run(thread, runID string) LiveRun {
	var lr LiveRun
	t, _ := h.s.thread(thread, false)
	if t == nil {
		return lr
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.run; r != nil && r.id == runID {
		lr.Current = true
	}
	if r := t.run; r != nil && r.id == runID && !r.ended {
		lr.Active = true
		lr.Waits = r.status == statusInterrupted && len(r.pending) > 0
	}
	for _, q := range t.queued {
		lr.Queued = lr.Queued || q.id == runID
	}
	return lr
}

func (h resourceHost) ActiveRun(thread string) (string, bool) {
	t, _ := h.s.thread(thread, false)
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

func (h resourceHost) RollbackRun(thread, runID string) bool {
	t, _ := h.s.thread(thread, false)
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

func (h resourceHost) AfterRun(thread, runID string, fn func()) bool {
	t, _ := h.s.thread(thread, false)
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	marked := false
	if r := t.run; r != nil && r.id == runID && !r.ended {
		r.afterwards, marked = fn, true
	}
	for _, q := range t.queued {
		if q.id == runID {
			q.afterwards, marked = fn, true
		}
	}
	return marked
}

func (h resourceHost) Release(id string) error {
	s := h.s
	if s.runActive(id) {
		return fmt.Errorf("%w: cancel it first", ErrThreadBusy)
	}
	t, _ := s.thread(id, false)
	if t == nil {
		return nil
	}
	t.mu.Lock()
	if t.run != nil || len(t.queued) > 0 {
		t.mu.Unlock()
		return fmt.Errorf("%w: cancel it first", ErrThreadBusy)
	}
	t.evicted, t.deleted = true, true
	sessions := t.sessionList()
	for _, ss := range sessions {
		ss.leave(t)
	}
	t.mu.Unlock()
	for _, ss := range sessions {
		ss.end(ErrThreadDeleted)
	}
	s.unhold(t)
	return nil
}

func (h resourceHost) WhileIdle(thread string, fn func() error) error {
	t, _ := h.s.thread(thread, false)
	if t == nil {
		return fn()
	}
	// Runs start, and interrupts are answered, holding the writer lock:
	// fn runs with it, without the thread's lock (its store's I/O holds
	// up no reader).
	t.wmu.Lock()
	defer t.wmu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.run; r != nil && (r.over() || len(r.pending) == 0) {
		return ErrThreadBusy
	}
	t.unlockForStore()
	defer t.relockAfterStore()
	return fn()
}

// runChanged tells the run hooks (ResourceHost.OnRun) run r's status. The
// caller holds r's thread's lock.
func (s *Server) runChanged(r *run, status string) {
	hooks := s.runHooks.Load()
	if hooks == nil || len(*hooks) == 0 {
		return
	}
	now := s.cfg.Now().UTC()
	if r.createdAt.IsZero() {
		r.createdAt = now
	}
	rec := RunRecord{ID: r.id, Thread: r.t.id, Assistant: r.assistantID, Status: status, MultitaskStrategy: r.strategy,
		Input: r.input, Config: r.config, Metadata: r.metadata, CreatedAt: r.createdAt, UpdatedAt: now, After: r.after}
	for _, fn := range *hooks {
		fn(rec)
	}
}

// closeResources runs the resources' closers (ResourceHost.OnClose), the
// last added first.
func (s *Server) closeResources(ctx context.Context) {
	r := &s.hooks
	r.mu.Lock()
	closers := r.onClose
	r.onClose = nil
	r.mu.Unlock()
	for i := len(closers) - 1; i >= 0; i-- {
		closers[i](ctx)
	}
}

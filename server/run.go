package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
)

// Assistant is Go code a run executes. Run returns when the run is done;
// an error fails the run. Cancellation (run.cancel, a superseding run,
// server shutdown) reaches it through ctx, and every emitter then fails.
type Assistant interface {
	Run(ctx context.Context, rc *RunContext) error
}

// AssistantFunc adapts a function to Assistant.
type AssistantFunc func(ctx context.Context, rc *RunContext) error

// Run calls f.
func (f AssistantFunc) Run(ctx context.Context, rc *RunContext) error { return f(ctx, rc) }

// Errors the emitters return instead of emitting an invalid stream.
var (
	// ErrRunEnded: the run is over (finished or cancelled); nothing more
	// can be emitted for it.
	ErrRunEnded = coded(protocol.ErrorCodeNoSuchRun, ReasonConflict, "server: the run has ended")
	// ErrLifecycle: the call breaks a lifecycle rule of the protocol (a
	// block started while another is open, a delta outside a block, a
	// message finished twice, ...). The message says which.
	ErrLifecycle = errors.New("server: protocol lifecycle violated")
	// ErrRunCancelled is the cause of a run's context ended by run.cancel.
	ErrRunCancelled = errors.New("run cancelled")
)

// Run statuses.
const (
	statusPending     = "pending"
	statusRunning     = "running"
	statusInterrupted = "interrupted"
)

// run is one execution of an assistant on a thread. Its fields are guarded
// by the thread's mu.
type run struct {
	id string
	// unkept is the first write of the run's state (values, a
	// checkpoint) that its store refused: the run ends failed with it,
	// whatever its assistant returns, since what it answers is not kept.
	unkept      atomic.Pointer[error]
	t           *thread
	assistantID string
	assistant   Assistant
	input       any
	config      map[string]any
	metadata    map[string]any
	status      string

	ctx      context.Context
	cancelFn context.CancelCauseFunc
	ended    bool
	inbox    chan any // injected input; buffered, see injectCapacity
	pending  []*interrupt
	openMsgs map[string]*MessageWriter // by namespace+node: one message at a time
	openTool map[string]*ToolCall
	openSubs map[string]*Subagent
	extra    map[string]any // {"run_id": id}, carried by every message event
	before   map[string]any // values at the start, for multitask_strategy rollback
	endCause error          // why the run was stopped from outside, if it was
	strategy string         // the multitask strategy it was started with
	// forkParent is the checkpoint a fork (state.fork) started from: the
	// parent of the run's first checkpoint, so that the thread's history
	// branches there (taken by that checkpoint, under the writer lock).
	forkParent string
	// afterwards is called once it ended with no run waiting behind it
	// (ResourceHost.AfterRun: the thread deleted on completion).
	afterwards func()
	after      uint64    // the thread's last seq before it started (RunRecord.After)
	createdAt  time.Time // when its record was first written
	// rawOpen: the messages and tool calls a worker's events opened and
	// did not end, to close at the run's end.
	rawOpen map[string]openItem
}

// injectCapacity bounds the input waiting for an assistant to read it; a
// run.start or input.inject beyond it is refused rather than blocking.
const injectCapacity = 64

type interrupt struct {
	id      string
	ns      channels.Namespace
	payload any
	answer  chan any // one slot: answered once
}

func (r *run) pendingList() []*interrupt { return r.pending }

// over reports whether the run ended or was cancelled (and is winding
// down): it publishes nothing more and takes no more input. The caller
// holds the thread's lock.
func (r *run) over() bool { return r.ended || r.ctx.Err() != nil }

func (r *run) cancel(cause error) {
	if r.endCause == nil {
		r.endCause = cause
	}
	if r.cancelFn != nil {
		r.cancelFn(cause)
	}
}

// startRun makes run r the thread's active run and starts its goroutine;
// before is the thread's values now (the run's rollback point), which the
// caller read holding t.wmu, as it still does. The caller holds t.mu.
func (t *thread) startRun(r *run, before map[string]any) error {
	ctx, cancel := context.WithCancelCause(context.Background())
	r.ctx, r.cancelFn = ctx, cancel
	r.status = statusRunning
	r.before = before
	t.run = r
	r.after = t.seq
	t.srv.runChanged(r, RunRunning)
	if _, err := t.publishLifecycle(nil, protocol.AgentStatusStarted, r.assistantID, nil, ""); err != nil {
		return err
	}
	if _, err := t.publishLifecycle(nil, protocol.AgentStatusRunning, r.assistantID, nil, ""); err != nil {
		return err
	}
	t.srv.runsWG.Add(1)
	t.srv.running.Add(1)
	go t.execute(r)
	return nil
}

// execute runs the assistant and ends the run. It owns the run's
// goroutine; the thread's next queued run starts when it returns.
func (t *thread) execute(r *run) {
	defer t.srv.runsWG.Done()
	defer t.srv.running.Add(-1)
	rc := &RunContext{r: r}
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("assistant %s panicked: %v", r.assistantID, p)
			}
		}()
		return r.assistant.Run(r.ctx, rc)
	}()
	if p := r.unkept.Load(); err == nil && p != nil {
		err = fmt.Errorf("the run's state was not kept: %w", *p)
	}
	var afterwards func()
	defer func() { // after t.mu is let go
		if afterwards != nil {
			afterwards()
		}
	}()
	// The run's end is published whatever the log says of its room (a
	// log queues a run's end past its bound).
	_ = t.srv.waitRoom(context.Background(), t.id)
	// What the store must do (a rollback, the values the next queued run
	// starts from) is done holding the writer lock, not the thread's.
	t.wmu.Lock()
	defer t.wmu.Unlock()
	t.mu.Lock()
	cause := r.endCause
	if cause == nil && r.ctx.Err() != nil {
		cause = context.Cause(r.ctx)
	}
	queued := len(t.queued) > 0
	t.mu.Unlock()
	var rollbackErr error
	if errors.Is(cause, errRollback) {
		rollbackErr = t.srv.st.State.SetValues(context.Background(), t.id, r.before)
	}
	var next map[string]any
	var nextErr error
	if queued {
		var v map[string]any
		v, _, nextErr = t.srv.st.State.Values(context.Background(), t.id)
		next = maps.Clone(v)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.finish(r, cause, err, rollbackErr)
	if t.run == r {
		t.run = nil
	}
	if len(t.queued) == 0 {
		afterwards = r.afterwards
	}
	for len(t.queued) > 0 && t.run == nil {
		r := t.queued[0]
		t.queued = t.queued[1:]
		if r.endCause != nil {
			continue // cancelled while it waited
		}
		if nextErr != nil {
			// Its values could not be read: it fails to start, as a
			// run.start would have.
			t.srv.runChanged(r, RunError)
			continue
		}
		if err := t.startRun(r, maps.Clone(next)); err != nil {
			t.run = nil
		}
	}
}

// finish emits the end of run r: its open subagents fail, then the root
// lifecycle says how it ended: cause is why it was stopped (nil when it
// returned by itself), err what it returned, rollbackErr why a rollback
// (cause errRollback) could not write its values back. The caller holds
// t.mu.
func (t *thread) finish(r *run, cause, err, rollbackErr error) {
	t.closeOpen(r, cause, err)
	for _, key := range slices.Sorted(maps.Keys(r.openSubs)) {
		sub := r.openSubs[key]
		_, _ = t.publishLifecycle(sub.rc.ns, protocol.AgentStatusFailed, sub.graph, nil, "the run ended before the subagent did")
	}
	r.openSubs = nil
	var status protocol.AgentStatus
	msg := ""
	cancelled := false
	switch {
	case cause != nil:
		status, msg, cancelled = protocol.AgentStatusFailed, cause.Error(), true
		if rollbackErr != nil {
			msg += "; its state could not be rolled back: " + storeError(rollbackErr).Error()
		}
	case err != nil:
		status, msg = protocol.AgentStatusFailed, err.Error()
	default:
		status = protocol.AgentStatusCompleted
	}
	t.setStatus(nil, status, r.assistantID)
	t.srv.runChanged(r, endStatus(status, cancelled))
	data := protocol.LifecycleData{Event: status, GraphName: &r.assistantID}
	if msg != "" {
		data.Error = &msg
	}
	if cancelled {
		data.Cancelled = &cancelled
	}
	_, _ = t.publish(lifecycleEvent(nil, data))
	r.ended = true
	r.cancelFn(ErrRunEnded)
	for _, in := range r.pending {
		close(in.answer)
	}
	r.pending = nil
}

// closeOpen gives every message and tool call run r left open its
// terminal event before the run's end, so that no client is left with a
// message streaming for ever: a message gets the protocol's message error
// event (which ends its open content block too: blocks have no error
// event of their own), a tool call its tool-error event. The code says
// why: "cancelled" (run.cancel, or superseded by a new run), "run_failed"
// (the assistant failed) or "run_ended" (it returned without finishing
// them). The caller holds t.mu.
func (t *thread) closeOpen(r *run, cause, err error) {
	code, why := "run_ended", "the run ended before it did"
	switch {
	case cause != nil:
		code, why = "cancelled", "the run was cancelled: "+cause.Error()
	case err != nil:
		code, why = "run_failed", "the run failed: "+err.Error()
	}
	for _, key := range slices.Sorted(maps.Keys(r.openMsgs)) {
		m := r.openMsgs[key]
		m.finished, m.open = true, -1
		t.publishUnfinished(openItem{ns: m.rc.ns, node: m.rc.nodeRef, id: m.id, extra: m.rc.runExtra()}, code, why)
	}
	r.openMsgs = nil
	for _, id := range slices.Sorted(maps.Keys(r.openTool)) {
		tc := r.openTool[id]
		tc.done = true
		t.publishUnfinished(openItem{ns: tc.rc.ns, node: tc.rc.nodeRef, id: id, tool: true}, code, why)
	}
	r.openTool = nil
	items := slices.SortedFunc(maps.Values(r.rawOpen), func(a, b openItem) int { return cmp.Compare(a.opened, b.opened) })
	r.rawOpen = nil
	for _, it := range items {
		t.publishUnfinished(it, code, why)
	}
}

// openItem is a message or a tool call a run left open.
type openItem struct {
	ns     channels.Namespace
	node   *string
	id     string // the message's or the tool call's
	tool   bool
	extra  map[string]any // a message's run id, as its other events carry
	opened uint64         // the seq of its start (another node's run), to close them in order
}

// publishUnfinished sends the terminal event of an item a run left open:
// a message's error event, or a tool call's tool-error, with code and
// why. The caller holds t.mu.
func (t *thread) publishUnfinished(it openItem, code, why string) {
	var p protocol.ServerEventVariant
	if it.tool {
		tl := protocol.NewServerEventTools(protocol.ToolsData{Value: &protocol.ToolErrorData{ToolCallID: it.id, Message: "tool call " + it.id + " did not finish: " + why, Code: &code}})
		tl.Params.Node = it.node
		p = tl
	} else {
		m := protocol.NewServerEventMessages(protocol.MessagesData{Value: &protocol.MessageErrorData{Message: "message " + it.id + " did not finish: " + why, Code: &code, Extra: it.extra}})
		m.Params.Node = it.node
		p = m
	}
	_, _ = t.publish(eventData{p: p, namespace: it.ns})
}

var (
	errInterruptStrategy = errors.New("superseded by a new run (multitask_strategy interrupt)")
	errRollback          = errors.New("superseded by a new run, its state rolled back (multitask_strategy rollback)")
)

// treeNode is the lifecycle status of one namespace, for agent.getTree.
type treeNode struct {
	ns     channels.Namespace
	status protocol.AgentStatus
	graph  string
}

func (t *thread) setStatus(ns channels.Namespace, st protocol.AgentStatus, graph string) {
	key := ns.Key()
	n := t.tree[key]
	if n == nil {
		n = &treeNode{ns: slices.Clone(ns)}
		t.tree[key] = n
	}
	n.status = st
	if graph != "" {
		n.graph = graph
	}
}

// publishLifecycle records a namespace's status (for agent.getTree) and
// publishes its lifecycle event.
func (t *thread) publishLifecycle(ns channels.Namespace, st protocol.AgentStatus, graph string, cause *protocol.LifecycleCause, errMsg string) (*Event, error) {
	if t.fenced {
		return nil, ErrLeaseLost // the tree keeps what the stream says
	}
	t.setStatus(ns, st, graph)
	data := protocol.LifecycleData{Event: st, Cause: cause}
	if graph != "" {
		data.GraphName = &graph
	}
	if errMsg != "" {
		data.Error = &errMsg
	}
	return t.publish(lifecycleEvent(ns, data))
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

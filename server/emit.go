package server

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server/records"
)

// RunContext is what an assistant gets: the run's input and settings, and
// emitters for every channel that keep the protocol's lifecycles. Each
// emitter returns an error instead of emitting an invalid stream
// (ErrLifecycle), and ErrRunEnded once the run is over. A RunContext is
// bound to a namespace (the root, or a subagent's) and optionally a graph
// node; its methods are safe for concurrent use.
type RunContext struct {
	r       *run
	ns      channels.Namespace
	node    string
	nodeRef *string // &node's value for the events that carry it, nil for none: made once, not per event
}

// RunID is the run's id.
func (rc *RunContext) RunID() string { return rc.r.id }

// ThreadID is the thread the run belongs to.
func (rc *RunContext) ThreadID() string { return rc.r.t.id }

// AssistantID is the assistant the run executes.
func (rc *RunContext) AssistantID() string { return rc.r.assistantID }

// Input is the run's input (a resume value arrives through Interrupt).
func (rc *RunContext) Input() any { return rc.r.input }

// Config is the run's configuration (read-only).
func (rc *RunContext) Config() map[string]any { return rc.r.config }

// Metadata is the run's metadata (read-only).
func (rc *RunContext) Metadata() map[string]any { return rc.r.metadata }

// Namespace is where this context emits.
func (rc *RunContext) Namespace() channels.Namespace { return rc.ns }

// Injected delivers input that run.start or input.inject sent to the run
// while it was active.
func (rc *RunContext) Injected() <-chan any { return rc.r.inbox }

// WithNode returns a context whose messages and tools name graph node.
func (rc *RunContext) WithNode(node string) *RunContext {
	sub := &RunContext{r: rc.r, ns: rc.ns, node: node}
	if node != "" {
		sub.nodeRef = &sub.node
	}
	return sub
}

// State returns the thread's current values (nil before any), or the
// StateStore's error.
func (rc *RunContext) State() (map[string]any, error) {
	v, _, err := rc.r.t.srv.st.State.Values(rc.r.ctx, rc.r.t.id)
	if err != nil {
		return nil, storeError(err)
	}
	return maps.Clone(v), nil
}

// Sleep waits for d, or returns the run's cancellation.
func (rc *RunContext) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// emit publishes what build returns, building and publishing under the
// thread's lock; build may refuse with an error.
func (rc *RunContext) emit(build func() (eventData, error)) error {
	t := rc.r.t
	if err := rc.waitRoom(); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if rc.r.over() {
		return ErrRunEnded
	}
	d, err := build()
	if err != nil {
		return err
	}
	if d.namespace == nil {
		d.namespace = rc.ns
	}
	_, err = t.publish(d)
	return err
}

// waitRoom waits for the log to have room for the run's next event
// (Server.waitRoom); a run that ends meanwhile gets ErrRunEnded.
func (rc *RunContext) waitRoom() error {
	err := rc.r.t.srv.waitRoom(rc.r.ctx, rc.r.t.id)
	if err != nil && rc.r.ctx.Err() != nil {
		return ErrRunEnded
	}
	return err
}

// just returns a build function for an event that needs no check.
func just(d eventData) func() (eventData, error) {
	return func() (eventData, error) { return d, nil }
}

func lifecycleErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrLifecycle, fmt.Sprintf(format, args...))
}

// emitStored publishes what store returns, once store has written what
// the event announces to the StateStore: store runs holding the thread's
// writer lock (wmu) and not its lock, so that the state and the stream
// change in one order and the store's I/O holds up no reader.
func (rc *RunContext) emitStored(store func() (eventData, error)) error {
	t := rc.r.t
	if err := rc.waitRoom(); err != nil {
		return err
	}
	if err := rc.lockWriter(); err != nil {
		return err
	}
	defer t.wmu.Unlock()
	d, err := store()
	if err != nil {
		rc.r.unkept.CompareAndSwap(nil, &err)
		return err
	}
	// What the store took is announced even if the run was cancelled
	// meanwhile: the cancel came after the write, as it would have come
	// after the lock, and the run has not ended (its end waits for wmu).
	t.mu.Lock()
	defer t.mu.Unlock()
	if d.namespace == nil {
		d.namespace = rc.ns
	}
	_, err = t.publish(d)
	return err
}

// lockWriter takes the thread's writer lock (wmu) for a write of its
// state, or, not holding it, returns ErrRunEnded for a run that ended.
func (rc *RunContext) lockWriter() error {
	t := rc.r.t
	t.wmu.Lock()
	t.mu.Lock()
	over := rc.r.over()
	t.mu.Unlock()
	if over {
		t.wmu.Unlock()
		return ErrRunEnded
	}
	return nil
}

// Values saves the thread's full state and emits it on the values channel.
func (rc *RunContext) Values(values map[string]any) error {
	return rc.emitStored(func() (eventData, error) {
		if err := rc.r.t.srv.st.State.SetValues(rc.r.ctx, rc.r.t.id, values); err != nil {
			return eventData{}, storeError(err)
		}
		return eventData{p: protocol.NewServerEventValues(maps.Clone(values))}, nil
	})
}

// Update emits what node changed in a step on the updates channel.
func (rc *RunContext) Update(node string, values map[string]any) error {
	d := protocol.UpdatesData{Values: values}
	if node != "" {
		d.Node = &node
	}
	return rc.emit(just(eventData{p: protocol.NewServerEventUpdates(d)}))
}

// Checkpoint saves a checkpoint of the thread's current values and emits
// its envelope on the checkpoints channel. It returns the checkpoint id.
func (rc *RunContext) Checkpoint(source protocol.CheckpointSource, step int64) (string, error) {
	if !source.Valid() {
		return "", lifecycleErr("checkpoint source %q is not one of input, loop, update, fork", source)
	}
	t := rc.r.t
	id := t.srv.cfg.NewID("ckpt_")
	err := rc.emitStored(func() (eventData, error) {
		values, _, err := t.srv.st.State.Values(rc.r.ctx, t.id)
		if err != nil {
			return eventData{}, storeError(err)
		}
		rec := CheckpointRecord{ID: id, Step: step, Source: string(source), Namespace: slices.Clone(rc.ns),
			Node: rc.node, Time: t.srv.cfg.Now(), Values: maps.Clone(values),
			Metadata: map[string]any{"assistant_id": rc.r.assistantID, "run_id": rc.r.id}}
		cp := protocol.Checkpoint{ID: id, Step: protocol.JsInt(step), Source: source}
		if fp := rc.r.forkParent; fp != "" {
			rec.ParentID = fp // a fork's first: its history branches at the checkpoint it started from
		} else {
			parent, ok, err := NewestCheckpoint(rc.r.ctx, t.srv.st.State, t.id)
			if err != nil {
				return eventData{}, storeError(err)
			}
			if ok {
				rec.ParentID = parent.ID
			}
		}
		if rec.ParentID != "" {
			cp.ParentID = &rec.ParentID
		}
		if err := t.srv.st.State.AddCheckpoint(rc.r.ctx, t.id, rec); err != nil {
			return eventData{}, storeError(err)
		}
		rc.r.forkParent = ""
		return eventData{p: protocol.NewServerEventCheckpoints(cp)}, nil
	})
	if err != nil {
		return "", err
	}
	return id, nil
}

// Custom emits an application event; subscribers of `custom` and of
// `custom:NAME` receive it.
func (rc *RunContext) Custom(name string, payload any) error {
	d := protocol.CustomData{Payload: payload}
	if name != "" {
		d.Name = &name
	}
	return rc.emit(just(eventData{p: protocol.NewServerEventCustom(d), name: name}))
}

// Task emits a Pregel task event on the tasks channel.
func (rc *RunContext) Task(data any) error {
	return rc.emit(just(eventData{p: protocol.NewServerEventTasks(data)}))
}

// Interrupt asks for input: it emits input.requested with payload, marks
// the run interrupted, and returns the response once input.respond (or
// run.start on the interrupted thread) answers it. It returns the run's
// cancellation if that comes first.
func (rc *RunContext) Interrupt(ctx context.Context, payload any) (any, error) {
	return rc.interrupt(ctx, payload, nil)
}

// interrupt is Interrupt, telling ready (when not nil) once the request
// is out, or why it could not be.
func (rc *RunContext) interrupt(ctx context.Context, payload any, ready chan<- error) (any, error) {
	t := rc.r.t
	in := &interrupt{id: t.srv.cfg.NewID("int_"), ns: slices.Clone(rc.ns), payload: payload, answer: make(chan any, 1)}
	// The request and the run's interrupted status go out under one lock,
	// so no answer can be published between them.
	if err := rc.waitRoom(); err != nil {
		if ready != nil {
			ready <- err
		}
		return nil, err
	}
	t.mu.Lock()
	if rc.r.over() {
		t.mu.Unlock()
		if ready != nil {
			ready <- ErrRunEnded
		}
		return nil, ErrRunEnded
	}
	rc.r.pending = append(rc.r.pending, in)
	rc.r.status = statusInterrupted
	_, err := t.publish(eventData{p: protocol.NewServerEventInputRequested(protocol.InputRequestedData{InterruptID: in.id, Payload: payload}), namespace: rc.ns})
	if err == nil && len(rc.r.pending) == 1 { // the first pending interrupt interrupts the run
		_, err = t.publishLifecycle(nil, protocol.AgentStatusInterrupted, rc.r.assistantID, nil, "")
		t.srv.runChanged(rc.r, RunInterrupted) // as the Platform lists a run that asks
	}
	t.mu.Unlock()
	if ready != nil {
		ready <- err
	}
	if err != nil {
		return nil, err
	}
	select {
	case v, ok := <-in.answer:
		if !ok {
			return nil, ErrRunEnded
		}
		return v, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// messageKey identifies a message's scope: namespace plus node.
func (rc *RunContext) messageKey() string { return rc.ns.Key() + "\x01" + rc.node }

// MessageWriter streams one message on the messages channel, enforcing its
// lifecycle: blocks start, change and finish one at a time, and the message
// finishes with no block open.
type MessageWriter struct {
	rc       *RunContext
	id       string
	open     int // index of the open block, -1 when none
	next     int // index the next block gets
	finished bool
}

func (rc *RunContext) messageData(v protocol.MessagesDataVariant) eventData {
	p := protocol.NewServerEventMessages(protocol.MessagesData{Value: v})
	p.Params.Node = rc.nodeRef
	return eventData{p: p}
}

// toolsData is a tools event of the run context's node.
func (rc *RunContext) toolsData(v protocol.ToolsDataVariant) eventData {
	p := protocol.NewServerEventTools(protocol.ToolsData{Value: v})
	p.Params.Node = rc.nodeRef
	return eventData{p: p}
}

// runExtra is the run id that message events carry in their data, as the
// reference server does (the SDK keys messages by namespace, node and run).
// The map is made once per run and shared: encoding only reads it.
func (rc *RunContext) runExtra() map[string]any { return rc.r.extra }

// StartMessage begins a message. Only one message at a time may stream in
// a namespace and node.
func (rc *RunContext) StartMessage(role protocol.MessageRole, id string, md *protocol.MessageMetadata) (*MessageWriter, error) {
	if !role.Valid() {
		return nil, lifecycleErr("message role %q is not ai, human or system", role)
	}
	if id == "" {
		id = rc.r.t.srv.cfg.NewID("msg_")
	}
	m := &MessageWriter{rc: rc, id: id, open: -1}
	err := rc.emit(func() (eventData, error) {
		if prev := rc.r.openMsgs[rc.messageKey()]; prev != nil {
			return eventData{}, lifecycleErr("message %s is still streaming in this namespace and node; finish it first", prev.id)
		}
		if rc.r.openMsgs == nil {
			rc.r.openMsgs = map[string]*MessageWriter{}
		}
		rc.r.openMsgs[rc.messageKey()] = m
		return rc.messageData(&protocol.MessageStartData{Role: role, ID: id, Metadata: md, Extra: rc.runExtra()}), nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// ID is the message's id.
func (m *MessageWriter) ID() string { return m.id }

// StartBlock begins the next content block with its initial state and
// returns its index.
func (m *MessageWriter) StartBlock(content protocol.ContentBlockVariant) (int, error) {
	idx := -1
	err := m.rc.emit(func() (eventData, error) {
		switch {
		case m.finished:
			return eventData{}, lifecycleErr("message %s is finished", m.id)
		case m.open >= 0:
			return eventData{}, lifecycleErr("block %d of message %s is open; blocks never interleave", m.open, m.id)
		}
		idx = m.next
		m.open, m.next = idx, idx+1
		return m.rc.messageData(&protocol.ContentBlockStartData{Index: protocol.JsUint(idx), Content: protocol.ContentBlock{Value: content}, Extra: m.rc.runExtra()}), nil
	})
	if err != nil {
		return -1, err
	}
	return idx, nil
}

// Delta changes the open block.
func (m *MessageWriter) Delta(d protocol.ContentBlockDeltaVariant) error {
	return m.rc.emit(func() (eventData, error) {
		if m.open < 0 {
			return eventData{}, lifecycleErr("a delta needs an open block in message %s", m.id)
		}
		return m.rc.messageData(&protocol.ContentBlockDeltaData{Index: protocol.JsUint(m.open), Delta: protocol.ContentBlockDelta{Value: d}, Extra: m.rc.runExtra()}), nil
	})
}

// FinishBlock completes the open block with its final content.
func (m *MessageWriter) FinishBlock(content protocol.FinalizedContentBlockVariant) error {
	return m.rc.emit(func() (eventData, error) {
		if m.open < 0 {
			return eventData{}, lifecycleErr("no block of message %s is open", m.id)
		}
		idx := m.open
		m.open = -1
		return m.rc.messageData(&protocol.ContentBlockFinishData{Index: protocol.JsUint(idx), Content: protocol.FinalizedContentBlock{Value: content}, Extra: m.rc.runExtra()}), nil
	})
}

// Finish completes the message, with token usage for AI messages.
func (m *MessageWriter) Finish(usage *protocol.UsageInfo) error {
	return m.rc.emit(func() (eventData, error) {
		if err := m.closable(); err != nil {
			return eventData{}, err
		}
		m.finished = true
		delete(m.rc.r.openMsgs, m.rc.messageKey())
		return m.rc.messageData(&protocol.MessageFinishData{Usage: usage, Extra: m.rc.runExtra()}), nil
	})
}

// Fail ends the message with an error event instead of finishing it.
func (m *MessageWriter) Fail(message string) error {
	return m.rc.emit(func() (eventData, error) {
		if m.finished {
			return eventData{}, lifecycleErr("message %s is finished", m.id)
		}
		m.finished, m.open = true, -1
		delete(m.rc.r.openMsgs, m.rc.messageKey())
		return m.rc.messageData(&protocol.MessageErrorData{Message: message, Extra: m.rc.runExtra()}), nil
	})
}

func (m *MessageWriter) closable() error {
	switch {
	case m.finished:
		return lifecycleErr("message %s is finished", m.id)
	case m.open >= 0:
		return lifecycleErr("block %d of message %s is still open", m.open, m.id)
	}
	return nil
}

// ToolCall streams one tool execution on the tools channel: started, then
// output deltas, then finished or error, once.
type ToolCall struct {
	rc   *RunContext
	id   string
	done bool
}

// StartTool announces a tool execution; toolCallID matches the tool_call
// block of the AI message that asked for it.
func (rc *RunContext) StartTool(toolCallID, name string, input any) (*ToolCall, error) {
	if toolCallID == "" || name == "" {
		return nil, lifecycleErr("a tool needs a tool call id and a name")
	}
	tc := &ToolCall{rc: rc, id: toolCallID}
	err := rc.emit(func() (eventData, error) {
		if rc.r.openTool[toolCallID] != nil {
			return eventData{}, lifecycleErr("tool call %s is already running", toolCallID)
		}
		if rc.r.openTool == nil {
			rc.r.openTool = map[string]*ToolCall{}
		}
		rc.r.openTool[toolCallID] = tc
		return rc.toolsData(&protocol.ToolStartedData{ToolCallID: toolCallID, ToolName: name, Input: input}), nil
	})
	if err != nil {
		return nil, err
	}
	return tc, nil
}

func (tc *ToolCall) emit(last bool, d protocol.ToolsDataVariant) error {
	return tc.rc.emit(func() (eventData, error) {
		if tc.done {
			return eventData{}, lifecycleErr("tool call %s has ended", tc.id)
		}
		if last {
			tc.done = true
			delete(tc.rc.r.openTool, tc.id)
		}
		return tc.rc.toolsData(d), nil
	})
}

// OutputDelta streams a piece of the tool's output.
func (tc *ToolCall) OutputDelta(delta string) error {
	return tc.emit(false, &protocol.ToolOutputDeltaData{ToolCallID: tc.id, Delta: delta})
}

// Finish reports the tool's result.
func (tc *ToolCall) Finish(output any) error {
	return tc.emit(true, &protocol.ToolFinishedData{ToolCallID: tc.id, Output: output})
}

// Error reports that the tool failed.
func (tc *ToolCall) Error(message, code string) error {
	d := &protocol.ToolErrorData{ToolCallID: tc.id, Message: message}
	if code != "" {
		d.Code = &code
	}
	return tc.emit(true, d)
}

// Subagent is a child namespace of the run: its lifecycle (started,
// running, then completed or failed) and a RunContext emitting in it.
type Subagent struct {
	rc    *RunContext
	graph string
	ended bool
}

// StartSubagent starts the child namespace name below this context's,
// running graph, started by cause (nil for none). It emits its started
// and running lifecycle events.
func (rc *RunContext) StartSubagent(name, graph string, cause *protocol.LifecycleCause) (*Subagent, error) {
	if name == "" {
		return nil, lifecycleErr("a subagent needs a name")
	}
	ns := append(slices.Clone(rc.ns), name)
	sub := &Subagent{rc: &RunContext{r: rc.r, ns: ns}, graph: graph}
	t := rc.r.t
	if err := rc.waitRoom(); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if rc.r.over() {
		return nil, ErrRunEnded
	}
	key := ns.Key()
	if rc.r.openSubs[key] != nil {
		return nil, lifecycleErr("subagent %v is already running", []string(ns))
	}
	if rc.r.openSubs == nil {
		rc.r.openSubs = map[string]*Subagent{}
	}
	rc.r.openSubs[key] = sub
	if _, err := t.publishLifecycle(ns, protocol.AgentStatusStarted, graph, cause, ""); err != nil {
		return nil, err
	}
	if _, err := t.publishLifecycle(ns, protocol.AgentStatusRunning, graph, nil, ""); err != nil {
		return nil, err
	}
	return sub, nil
}

// Context is the RunContext that emits in the subagent's namespace.
func (s *Subagent) Context() *RunContext { return s.rc }

// End completes the subagent, or fails it when err is not nil.
func (s *Subagent) End(err error) error {
	t := s.rc.r.t
	if err := s.rc.waitRoom(); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if s.rc.r.ended {
		return ErrRunEnded
	}
	if s.ended {
		return lifecycleErr("subagent %v has ended", []string(s.rc.ns))
	}
	s.ended = true
	delete(s.rc.r.openSubs, s.rc.ns.Key())
	st, msg := protocol.AgentStatusCompleted, ""
	if err != nil {
		st, msg = protocol.AgentStatusFailed, err.Error()
	}
	_, perr := t.publishLifecycle(s.rc.ns, st, s.graph, nil, msg)
	return perr
}

// NewestCheckpoint is the thread's newest checkpoint in st (its values
// may be left out; ok false when it has none), read alone where the
// store can (records.NewestCheckpointer), else from the whole list.
func NewestCheckpoint(ctx context.Context, st StateStore, thread string) (CheckpointRecord, bool, error) {
	if n, ok := st.(records.NewestCheckpointer); ok {
		return n.NewestCheckpoint(ctx, thread)
	}
	cps, err := st.Checkpoints(ctx, thread)
	if err != nil || len(cps) == 0 {
		return CheckpointRecord{}, false, err
	}
	return cps[0], true, nil
}

package server

import (
	"context"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
)

// Do carries out one command on thread threadID and returns its response,
// or an error that is always a *protocol.ErrorResponse (errors.As; its
// Code is the protocol's error code and its ID the command's id); every
// transport calls it. Every success carries meta.applied_through_seq: the
// last sequence number published before the command took effect.
// Subscription commands need a connection scope: use a [Session].
func (s *Server) Do(ctx context.Context, threadID string, cmd *protocol.ClientCommand) (*protocol.CommandResponse, error) {
	return result(s.do(ctx, threadID, cmd))
}

// result is a command's outcome as Do returns it: no typed nil error.
func result(resp *protocol.CommandResponse, e *protocol.ErrorResponse) (*protocol.CommandResponse, error) {
	if e != nil {
		return nil, e
	}
	return resp, nil
}

// busy marks e as a refusal by the thread's active run (ReasonThreadBusy).
func busy(e *protocol.ErrorResponse) *protocol.ErrorResponse {
	e.Extra = map[string]any{"reason": ReasonThreadBusy}
	return e
}

// do is Do with the error typed.
func (s *Server) do(ctx context.Context, threadID string, cmd *protocol.ClientCommand) (*protocol.CommandResponse, *protocol.ErrorResponse) {
	s.metrics.commands.Add(1)
	id, _ := commandID(cmd)
	if err := s.Unavailable(); err != nil {
		return nil, errorResponse(id, protocol.ErrorCodeUnavailable, "%v; retry when it is back", err)
	}
	if _, ok := cmd.Value.(*protocol.ClientCommandRunStart); ok {
		if err := s.startQuota(ctx); err != nil {
			return nil, errorResponse(id, codeOf(err), "%v", err)
		}
	}
	if u := s.cfg.Upstream; u != nil {
		if resp, errResp, handled := u.Forward(ctx, threadID, cmd); handled {
			return resp, errResp
		}
	}
	if c := s.st.Cluster; c != nil {
		if resp, errResp, done := s.route(ctx, c, threadID, id, cmd); done {
			return resp, errResp
		}
	}
	switch c := cmd.Value.(type) {
	case *protocol.ClientCommandRunStart:
		return s.runStart(threadID, id, &c.Params)
	case *protocol.ClientCommandRunCancel:
		return s.runCancel(threadID, id, &c.Params)
	case *protocol.ClientCommandInputRespond:
		return s.inputRespond(ctx, threadID, id, &c.Params)
	case *protocol.ClientCommandInputInject:
		return s.inputInject(threadID, id, &c.Params)
	case *protocol.ClientCommandStateGet:
		return s.stateGet(ctx, threadID, id, &c.Params)
	case *protocol.ClientCommandStateListCheckpoints:
		return s.listCheckpoints(ctx, threadID, id, &c.Params)
	case *protocol.ClientCommandStateFork:
		return s.stateFork(ctx, threadID, id, &c.Params)
	case *protocol.ClientCommandAgentGetTree:
		return s.getTree(threadID, id)
	case *protocol.ClientCommandSubscriptionSubscribe, *protocol.ClientCommandSubscriptionUnsubscribe, *protocol.ClientCommandSubscriptionReconnect:
		return nil, errorResponse(id, protocol.ErrorCodeNotSupported, "subscription commands need a connection (WebSocket or in-process session); over SSE each stream is a subscription")
	case *protocol.ClientCommandAuthRefresh:
		return nil, errorResponse(id, protocol.ErrorCodeNotSupported, "auth.refresh is for an open WebSocket; an HTTP request carries its own credential")
	case nil:
		return nil, errorResponse(id, protocol.ErrorCodeUnknownCommand, "unknown command")
	default:
		return nil, errorResponse(id, protocol.ErrorCodeUnknownCommand, "unknown command %T", c)
	}
}

// storeErrorResponse is the answer to a command whose StateStore call
// failed.
func storeErrorResponse(id uint64, err error) *protocol.ErrorResponse {
	return errorResponse(id, protocol.ErrorCodeUnavailable, "%v; retry", storeError(err))
}

// commandID returns a command's id; ok is false for a variant this server
// does not know (decoded raw).
func commandID(cmd *protocol.ClientCommand) (id uint64, ok bool) {
	if cmd.Value == nil {
		return 0, false
	}
	return cmd.Value.GetID(), true
}

func success(id, applied uint64, result any) *protocol.CommandResponse {
	if result == nil {
		result = map[string]any{}
	}
	return &protocol.CommandResponse{ID: id, Result: result, Meta: &protocol.ResponseMeta{AppliedThroughSeq: &applied}}
}

// checkInput asks an assistant that validates its input whether a new run
// may start with it.
func (s *Server) checkInput(id uint64, a Assistant, input any, config map[string]any) *protocol.ErrorResponse {
	v, ok := a.(InputValidator)
	if !ok {
		return nil
	}
	if err := v.ValidateInput(input, config); err != nil {
		s.metrics.refused.add(LimitAssistantInput)
		return errorResponse(id, protocol.ErrorCodeInvalidArgument, "params.input: %v", err)
	}
	return nil
}

func (s *Server) newRun(t *thread, a Assistant, assistantID string, input any, config, metadata map[string]any) *run {
	id := s.cfg.NewID("run_")
	return &run{
		id: id, t: t, assistantID: assistantID, assistant: a, extra: map[string]any{"run_id": id},
		input: input, config: config, metadata: metadata, status: statusPending,
		inbox: make(chan any, injectCapacity),
	}
}

func (s *Server) runStart(threadID string, id uint64, p *protocol.RunStartParams) (*protocol.CommandResponse, *protocol.ErrorResponse) {
	a, ok := s.assistant(p.AssistantID)
	if !ok {
		if dir := s.st.Workers; dir != nil {
			if node, err := dir.LocateWorkers(context.Background(), p.AssistantID); err == nil && node != "" {
				return nil, errorResponse(id, protocol.ErrorCodeInvalidArgument, "params.assistant_id: assistant %q is served by workers connected to other nodes (%s), and this thread's runs are on this node (%s) until its run ends: start it then", p.AssistantID, node, s.st.Cluster.Node())
			}
		}
		known := s.Assistants()
		sort.Strings(known)
		return nil, errorResponse(id, protocol.ErrorCodeInvalidArgument, "params.assistant_id: unknown assistant %q (registered: %s)", p.AssistantID, strings.Join(known, ", "))
	}
	if ra, ok := a.(remoteAssistant); ok && s.workers.queueFull(ra.id) {
		s.metrics.refused.add(LimitQueuedWorkerRuns)
		return nil, errorResponse(id, protocol.ErrorCodeResourceExhausted, "every worker of assistant %s is busy and %d runs wait for one (--max-queued-worker-runs)", ra.id, s.cfg.MaxQueuedWorkerRuns)
	}
	strategy := p.MultitaskStrategy
	if strategy == nil {
		strategy = p.MultitaskStrategyCamel
	}
	if err := s.waitRoom(context.Background(), threadID); err != nil {
		return nil, errorResponse(id, codeOf(err), "%v", err)
	}
	t, before, err := s.lockThreadForRun(context.Background(), threadID)
	if err != nil {
		return nil, errorResponse(id, codeOf(err), "%v", err)
	}
	defer t.wmu.Unlock()
	defer t.mu.Unlock()
	applied := t.seq
	cur := t.run
	newRun := cur == nil || (cur.status != statusInterrupted && strategy != nil && *strategy != protocol.MultitaskStrategyReject)
	if newRun {
		if e := s.checkInput(id, a, p.Input, p.Config); e != nil {
			return nil, e
		}
	}
	switch {
	case cur == nil:
		r := s.newRun(t, a, p.AssistantID, p.Input, p.Config, p.Metadata)
		if strategy != nil {
			r.strategy = string(*strategy)
		}
		if err := t.startRun(r, before); err != nil {
			return nil, errorResponse(id, protocol.ErrorCodeUnknownError, "%v", err)
		}
		return success(id, applied, protocol.RunResult{RunID: &r.id}), nil
	case cur.status == statusInterrupted:
		// Resume: the input answers every pending interrupt.
		ids := make([]string, len(cur.pending))
		for i, in := range cur.pending {
			ids[i] = in.id
		}
		answers := make([]any, len(ids))
		for i := range answers {
			answers[i] = p.Input
		}
		t.resume(cur, ids, answers)
		return success(id, applied, protocol.RunResult{RunID: &cur.id}), nil
	}
	switch {
	case strategy == nil:
		select {
		case cur.inbox <- p.Input:
		default:
			return nil, errorResponse(id, protocol.ErrorCodeInvalidArgument, "run %s has %d inputs waiting; try again when it has read them", cur.id, injectCapacity)
		}
		return success(id, applied, protocol.RunResult{RunID: &cur.id}), nil
	case *strategy == protocol.MultitaskStrategyReject:
		return nil, busy(errorResponse(id, protocol.ErrorCodeInvalidArgument, "thread %s has an active run (%s) and multitask_strategy is reject", threadID, cur.id))
	case *strategy == protocol.MultitaskStrategyEnqueue:
		if len(t.queued) >= s.cfg.MaxQueuedRuns {
			s.metrics.refused.add(LimitQueuedRuns)
			return nil, errorResponse(id, protocol.ErrorCodeResourceExhausted, "thread %s has %d runs queued, the most it takes (--max-queued-runs)", threadID, len(t.queued))
		}
		r := s.newRun(t, a, p.AssistantID, p.Input, p.Config, p.Metadata)
		r.strategy = string(*strategy)
		t.queued = append(t.queued, r)
		s.runChanged(r, RunPending)
		return success(id, applied, protocol.RunResult{RunID: &r.id}), nil
	default: // interrupt or rollback: the new run replaces the active one
		cause := errInterruptStrategy
		if *strategy == protocol.MultitaskStrategyRollback {
			cause = errRollback
		}
		r := s.newRun(t, a, p.AssistantID, p.Input, p.Config, p.Metadata)
		r.strategy = string(*strategy)
		t.queued = append([]*run{r}, t.queued...)
		s.runChanged(r, RunPending)
		cur.cancel(cause)
		return success(id, applied, protocol.RunResult{RunID: &r.id}), nil
	}
}

// resume answers the interrupts ids of run r, in order, with answers. It
// emits input.answered, then the run is running again. The caller holds
// t.mu and has checked that every id is pending.
func (t *thread) resume(r *run, ids []string, answers []any) {
	for i, id := range ids {
		for j, in := range r.pending {
			if in.id == id {
				in.answer <- answers[i]
				r.pending = slices.Delete(r.pending, j, j+1)
				break
			}
		}
		t.answered[id] = true
	}
	_, _ = t.publish(eventData{p: protocol.NewServerEventInputAnswered(protocol.InputAnsweredData{InterruptIds: ids})})
	if len(r.pending) == 0 {
		r.status = statusRunning
		t.srv.runChanged(r, RunRunning)
		_, _ = t.publishLifecycle(nil, protocol.AgentStatusRunning, r.assistantID, nil, "")
	}
}

func (s *Server) runCancel(threadID string, id uint64, p *protocol.RunCancelParams) (*protocol.CommandResponse, *protocol.ErrorResponse) {
	t, _ := s.thread(threadID, false)
	result := protocol.RunCancelResult{}
	if t == nil {
		return success(id, 0, result), nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	applied := t.seq
	match := func(r *run) bool { return p.RunID == nil || *p.RunID == r.id }
	if r := t.run; r != nil && match(r) && r.endCause == nil && !r.ended {
		r.cancel(ErrRunCancelled)
		result.RunID, result.Cancelled = &r.id, true
		return success(id, applied, result), nil
	}
	for i, r := range t.queued {
		if p.RunID != nil && *p.RunID == r.id {
			r.endCause = ErrRunCancelled
			t.queued = slices.Delete(t.queued, i, i+1)
			result.RunID, result.Cancelled = &r.id, true
			break
		}
	}
	return success(id, applied, result), nil
}

func (s *Server) inputRespond(ctx context.Context, threadID string, id uint64, p *protocol.InputRespondParams) (*protocol.CommandResponse, *protocol.ErrorResponse) {
	var ids []string
	var answers []any
	var update map[string]any
	switch v := p.Value.(type) {
	case *protocol.InputRespondOne:
		ids, answers, update = []string{v.InterruptID}, []any{v.Response}, v.Update
	case *protocol.InputRespondMany:
		for _, e := range v.Responses {
			ids = append(ids, e.InterruptID)
			answers = append(answers, e.Response)
		}
		update = v.Update
	}
	if len(ids) == 0 {
		return nil, errorResponse(id, protocol.ErrorCodeInvalidArgument, "params: no interrupt to answer")
	}
	t, _ := s.thread(threadID, false)
	if t == nil {
		return nil, errorResponse(id, protocol.ErrorCodeNoSuchInterrupt, "no pending interrupt %q: the thread has no run", ids[0])
	}
	if err := s.waitRoom(ctx, threadID); err != nil {
		return nil, storeErrorResponse(id, err)
	}
	// The writer lock keeps the interrupts pending while an update is
	// written without the thread's lock: they are answered, and the run
	// ends, only by holders of it.
	t.wmu.Lock()
	defer t.wmu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	applied := t.seq
	r := t.run
	seen := map[string]bool{}
	for _, want := range ids {
		found := false
		if r != nil && !seen[want] {
			for _, in := range r.pending {
				if in.id == want {
					found = true
				}
			}
		}
		if !found {
			why := "it is not pending"
			if t.answered[want] {
				why = "it was already answered"
			}
			return nil, errorResponse(id, protocol.ErrorCodeNoSuchInterrupt, "no pending interrupt %q: %s", want, why)
		}
		seen[want] = true
	}
	if update != nil {
		t.unlockForStore()
		err := s.mergeValues(ctx, threadID, update)
		t.relockAfterStore()
		if err != nil {
			return nil, storeErrorResponse(id, err)
		}
	}
	t.resume(r, ids, answers)
	return success(id, applied, nil), nil
}

// mergeValues sets update's keys in the thread's values.
func (s *Server) mergeValues(ctx context.Context, threadID string, update map[string]any) error {
	values, _, err := s.st.State.Values(ctx, threadID)
	if err != nil {
		return err
	}
	merged := maps.Clone(values)
	if merged == nil {
		merged = map[string]any{}
	}
	maps.Copy(merged, update)
	return s.st.State.SetValues(ctx, threadID, merged)
}

func (s *Server) inputInject(threadID string, id uint64, p *protocol.InputInjectParams) (*protocol.CommandResponse, *protocol.ErrorResponse) {
	t, _ := s.thread(threadID, false)
	if t == nil {
		return nil, errorResponse(id, protocol.ErrorCodeNoSuchRun, "thread %s has no active run", threadID)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// A run that was cancelled, and is winding down, takes no more input.
	if r := t.run; r == nil || r.over() {
		return nil, errorResponse(id, protocol.ErrorCodeNoSuchRun, "thread %s has no active run", threadID)
	}
	if _, ok := t.tree[channels.Namespace(p.Namespace).Key()]; !ok {
		return nil, errorResponse(id, protocol.ErrorCodeNoSuchNamespace, "params.namespace: %v is not a namespace of the run", p.Namespace)
	}
	select {
	case t.run.inbox <- p.Message:
	default:
		return nil, errorResponse(id, protocol.ErrorCodeInvalidArgument, "run %s has %d inputs waiting; try again when it has read them", t.run.id, injectCapacity)
	}
	return success(id, t.seq, nil), nil
}

func (s *Server) stateGet(ctx context.Context, threadID string, id uint64, p *protocol.StateGetParams) (*protocol.CommandResponse, *protocol.ErrorResponse) {
	applied := s.LastSeq(threadID)
	if len(p.Namespace) > 0 {
		return nil, errorResponse(id, protocol.ErrorCodeNoSuchNamespace, "params.namespace: state is kept for the root namespace only")
	}
	values, _, err := s.st.State.Values(ctx, threadID)
	if err != nil {
		return nil, storeErrorResponse(id, err)
	}
	out := map[string]any{}
	if p.Keys == nil {
		maps.Copy(out, values)
	} else {
		for _, k := range p.Keys {
			if v, ok := values[k]; ok {
				out[k] = v
			}
		}
	}
	res := protocol.StateGetResult{Values: out}
	cps, err := s.st.State.Checkpoints(ctx, threadID)
	if err != nil {
		return nil, storeErrorResponse(id, err)
	}
	if len(cps) > 0 {
		res.Checkpoint = &protocol.CheckpointRef{ID: cps[0].ID}
	}
	return success(id, applied, res), nil
}

func (s *Server) listCheckpoints(ctx context.Context, threadID string, id uint64, p *protocol.ListCheckpointsParams) (*protocol.CommandResponse, *protocol.ErrorResponse) {
	applied := s.LastSeq(threadID)
	all, err := s.st.State.Checkpoints(ctx, threadID)
	if err != nil {
		return nil, storeErrorResponse(id, err)
	}
	out := []protocol.CheckpointSummary{}
	started := p.Before == nil
	if p.Before != nil && !slices.ContainsFunc(all, func(cp CheckpointRecord) bool { return cp.ID == *p.Before }) {
		return nil, errorResponse(id, protocol.ErrorCodeNoSuchCheckpoint, "params.before: no checkpoint %q", *p.Before)
	}
	for _, cp := range all {
		if !started {
			started = cp.ID == *p.Before
			continue
		}
		if p.Namespace != nil && !channels.Namespace(*p.Namespace).Equal(cp.Namespace) {
			continue
		}
		if p.Limit != nil && uint64(len(out)) >= *p.Limit {
			break
		}
		sum := protocol.CheckpointSummary{ID: cp.ID, Timestamp: cp.Time.UTC().Format(time.RFC3339Nano), Step: protocol.JsInt(cp.Step), Metadata: cp.Metadata}
		if cp.Node != "" {
			node := cp.Node
			sum.NodeName = &node
		}
		out = append(out, sum)
	}
	return success(id, applied, protocol.ListCheckpointsResult{Checkpoints: out}), nil
}

// stateFork starts a run on the same thread from a checkpoint: the thread's
// values go back to the checkpoint's, and the new run (of the assistant of
// the thread's last run) gets the input. Forking on the same thread, as
// LangGraph's time travel does, keeps one history per thread.
func (s *Server) stateFork(ctx context.Context, threadID string, id uint64, p *protocol.StateForkParams) (*protocol.CommandResponse, *protocol.ErrorResponse) {
	cp, ok, err := s.st.State.Checkpoint(ctx, threadID, p.CheckpointID)
	if err != nil {
		return nil, storeErrorResponse(id, err)
	}
	if !ok {
		return nil, errorResponse(id, protocol.ErrorCodeNoSuchCheckpoint, "params.checkpoint_id: no checkpoint %q on thread %s", p.CheckpointID, threadID)
	}
	if err := s.waitRoom(ctx, threadID); err != nil {
		return nil, errorResponse(id, codeOf(err), "%v", err)
	}
	t, err := s.lockThreadWriting(threadID)
	if err != nil {
		return nil, errorResponse(id, codeOf(err), "%v", err)
	}
	defer t.wmu.Unlock() // no run starts before this one: runs start holding it
	defer t.mu.Unlock()
	if t.run != nil {
		return nil, busy(errorResponse(id, protocol.ErrorCodeInvalidArgument, "thread %s has an active run (%s); cancel it before forking", threadID, t.run.id))
	}
	assistantID, _ := cp.Metadata["assistant_id"].(string) // RunContext.Checkpoint records it
	a, ok := s.assistant(assistantID)
	if !ok {
		return nil, errorResponse(id, protocol.ErrorCodeInvalidArgument, "no assistant to fork with (checkpoint %s names %q)", cp.ID, assistantID)
	}
	if e := s.checkInput(id, a, p.Input, p.Config); e != nil {
		return nil, e
	}
	applied := t.seq
	t.unlockForStore()
	err = s.st.State.SetValues(ctx, threadID, cp.Values)
	t.relockAfterStore()
	if err != nil {
		return nil, storeErrorResponse(id, err)
	}
	config := maps.Clone(p.Config)
	if config == nil {
		config = map[string]any{}
	}
	config["forked_from"] = cp.ID
	r := s.newRun(t, a, assistantID, p.Input, config, nil)
	r.forkParent = cp.ID
	if err := t.startRun(r, maps.Clone(cp.Values)); err != nil {
		return nil, errorResponse(id, protocol.ErrorCodeUnknownError, "%v", err)
	}
	return success(id, applied, protocol.StateForkResult{RunID: r.id, ThreadID: threadID}), nil
}

func (s *Server) getTree(threadID string, id uint64) (*protocol.CommandResponse, *protocol.ErrorResponse) {
	t, _ := s.thread(threadID, false)
	if t == nil {
		return nil, errorResponse(id, protocol.ErrorCodeNoSuchRun, "thread %s has no run", threadID)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	root := t.tree[channels.Namespace(nil).Key()]
	if root == nil {
		return nil, errorResponse(id, protocol.ErrorCodeNoSuchRun, "thread %s has no run", threadID)
	}
	return success(id, t.seq, protocol.AgentResult{Tree: t.treeOf(root)}), nil
}

// treeOf builds the agent tree below n from the lifecycle statuses.
func (t *thread) treeOf(n *treeNode) protocol.AgentTreeNode {
	node := protocol.AgentTreeNode{Namespace: protocol.Namespace(nonNil(n.ns)), Status: n.status, GraphName: n.graph}
	keys := slices.Sorted(maps.Keys(t.tree))
	for _, k := range keys {
		c := t.tree[k]
		if len(c.ns) == len(n.ns)+1 && c.ns.HasPrefix(n.ns) {
			node.Children = append(node.Children, t.treeOf(c))
		}
	}
	return node
}

func nonNil(ns channels.Namespace) []string {
	if ns == nil {
		return []string{}
	}
	return ns
}

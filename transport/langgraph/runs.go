package langgraph

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/records"
	"github.com/agentstream/agentstream/server/registry"
	"github.com/agentstream/agentstream/server/threads"
	"github.com/agentstream/agentstream/transport/internal/httpjson"
)

// assistantName is the assistant a run names: by its name, or by the
// UUID the Platform gives it.
func (h *Handler) assistantName(id string) (string, bool) {
	a, ok, err := h.registry.Get(context.Background(), id)
	return a.GraphID, ok && err == nil
}

// runAssistant is the assistant a run names (by id, or a graph's name)
// that the caller sees; ok false when there is none (answered here).
func (h *Handler) runAssistant(w http.ResponseWriter, r *http.Request, id string) (registry.Assistant, bool) {
	a, ok, err := h.registry.Get(r.Context(), id)
	switch {
	case err != nil:
		assistantError(w, err)
		return registry.Assistant{}, false
	case !ok || !registry.Visible(auth.FromContext(r.Context()), a):
		fail(w, http.StatusNotFound, "Assistant %s not found", id)
		return registry.Assistant{}, false
	}
	return a, true
}

// startRun starts the run req asks for on thread (made when new, with its
// record), as the protocol's run.start does, with a session that sees the
// thread's root lifecycle from now on (for waitEnd; the caller closes
// it). It answers the request itself when it cannot (ok false).
func (h *Handler) startRun(w http.ResponseWriter, r *http.Request, thread string, req *LgRunCreate) (runID string, ss *server.Session, ok bool) {
	runID, ss, _, ok = h.startRunWith(w, r, thread, req, channels.Filter{Channels: []string{channels.Lifecycle}, Depth: 0})
	return runID, ss, ok
}

// startRunWith is startRun with a session that sees what filter selects
// after the thread's event number after.
func (h *Handler) startRunWith(w http.ResponseWriter, r *http.Request, thread string, req *LgRunCreate, filter channels.Filter) (runID string, ss *server.Session, after uint64, ok bool) {
	id := req.assistant()
	if id == "" {
		fail(w, http.StatusUnprocessableEntity, "assistant_id (or agent_id): required")
		return "", nil, 0, false
	}
	asst, found := h.runAssistant(w, r, id)
	if !found {
		return "", nil, 0, false
	}
	name := asst.GraphID
	ctx := r.Context()
	p := auth.FromContext(ctx)
	if !h.mayChange(w, r, thread) {
		return "", nil, 0, false
	}
	if req.IfNotExists != nil && *req.IfNotExists == "reject" {
		if _, found, err := h.catalog.Get(ctx, thread); err != nil {
			serverError(w, err)
			return "", nil, 0, false
		} else if !found {
			fail(w, http.StatusNotFound, "Thread with ID %s not found", thread)
			return "", nil, 0, false
		}
	}
	// Its record, so that a Platform client lists it (a thread that
	// exists keeps its own).
	_, created, err := h.catalog.Create(ctx, p, thread, nil, "do_nothing")
	if err != nil {
		serverError(w, err)
		return "", nil, 0, false
	}
	// A run refused on a thread made for it leaves no thread behind, nor
	// one counted against the principal's quota.
	defer func() {
		if !ok && created {
			_, _ = h.catalog.Delete(context.WithoutCancel(ctx), thread)
		}
	}()
	ss = h.Server.NewSession(thread)
	after = h.Server.LastSeq(thread)
	hook, ok := h.webhookFor(w, thread, after, req)
	if !ok {
		ss.Close()
		return "", nil, 0, false
	}
	defer func() { hook.started(runID, ok) }() // delivered once the run ends, or let go
	if _, _, err := ss.Subscribe(filter, server.SeqCursor(after)); err != nil {
		ss.Close()
		serverError(w, err)
		return "", nil, 0, false
	}
	fork, ok := h.forkPoint(w, r, thread, name, req)
	if !ok {
		ss.Close()
		return "", nil, 0, false
	}
	if req.Command != nil {
		runID, resumed, ok := h.command(w, r, thread, req)
		if !ok {
			ss.Close()
			return "", nil, 0, false
		}
		if resumed {
			return runID, ss, after, true
		}
	}
	var runConfig map[string]any
	if req.Config != nil {
		runConfig = *req.Config
	}
	if len(asst.Config) > 0 { // the assistant's config, the run's over it
		runConfig = registry.RunConfig(asst, runConfig)
	}
	if fork != "" {
		fp := protocol.StateForkParams{CheckpointID: fork, Input: req.Input, Config: runConfig}
		resp, err := h.Server.Do(ctx, thread, &protocol.ClientCommand{Value: &protocol.ClientCommandStateFork{ID: 1, Params: fp}})
		if err != nil {
			ss.Close()
			h.runRefused(w, err)
			return "", nil, 0, false
		}
		if res, ok := resp.Result.(protocol.StateForkResult); ok {
			runID = res.RunID
		}
		return runID, ss, after, true
	}
	params := protocol.RunStartParams{AssistantID: name, Input: req.Input, Config: runConfig}
	if req.Metadata != nil {
		params.Metadata = *req.Metadata
	}
	// The Platform's default is reject: a run sent while another runs on
	// the thread is refused, never taken as input for the one that runs
	// (the protocol's run.start without a strategy), which would answer
	// the other run's values for it.
	ms := protocol.MultitaskStrategyReject
	if req.MultitaskStrategy != nil {
		ms = protocol.MultitaskStrategy(*req.MultitaskStrategy)
	}
	params.MultitaskStrategy = &ms
	resp, err := h.Server.Do(ctx, thread, &protocol.ClientCommand{Value: &protocol.ClientCommandRunStart{ID: 1, Params: params}})
	if err != nil {
		ss.Close()
		h.runRefused(w, err)
		return "", nil, 0, false
	}
	if res, ok := resp.Result.(protocol.RunResult); ok && res.RunID != nil {
		runID = *res.RunID
	}
	// The thread says which graph runs on it, as the Platform's do.
	if _, _, err := h.catalog.Update(ctx, thread, map[string]any{"graph_id": name, "assistant_id": asst.ID}); err != nil {
		ss.Close()
		serverError(w, err)
		return "", nil, 0, false
	}
	return runID, ss, after, true
}

// runRefused answers a run the server refused to start.
func (h *Handler) runRefused(w http.ResponseWriter, err error) {
	var e *protocol.ErrorResponse
	if errors.As(err, &e) {
		status, e := httpjson.CommandError(err) // 400 for a bad run, 429 past a quota
		switch {
		case e.Extra["reason"] == server.ReasonThreadBusy:
			status = http.StatusUnprocessableEntity // as the reference answers multitask_strategy reject
		case e.Code == protocol.ErrorCodeNoSuchCheckpoint:
			status = http.StatusNotFound
		}
		fail(w, status, "%s", e.Message)
		return
	}
	serverError(w, err)
}

// forkPoint is the checkpoint a run starts from when it is not the
// thread's newest (req's checkpoint_id or checkpoint): the run is then a
// fork of it; "" for a run as any other. It answers a request it cannot
// serve itself (ok false).
func (h *Handler) forkPoint(w http.ResponseWriter, r *http.Request, thread, assistant string, req *LgRunCreate) (cp string, ok bool) {
	id := ""
	if req.CheckpointID != nil {
		id = *req.CheckpointID
	}
	if c := req.Checkpoint; c != nil {
		if c.CheckpointNs != nil && *c.CheckpointNs != "" {
			fail(w, http.StatusUnprocessableEntity, "checkpoint.checkpoint_ns: a run from a subgraph's checkpoint is not served")
			return "", false
		}
		if m, ok := c.CheckpointMap.(map[string]any); c.CheckpointMap != nil && (!ok || len(m) > 0) {
			fail(w, http.StatusUnprocessableEntity, "checkpoint.checkpoint_map: subgraphs' checkpoints are not served")
			return "", false
		}
		if c.ThreadID != nil && *c.ThreadID != thread {
			fail(w, http.StatusUnprocessableEntity, "checkpoint.thread_id: %s is not the run's thread", *c.ThreadID)
			return "", false
		}
		if c.CheckpointID != nil {
			if id != "" && id != *c.CheckpointID {
				fail(w, http.StatusUnprocessableEntity, "checkpoint_id and checkpoint.checkpoint_id name two checkpoints")
				return "", false
			}
			id = *c.CheckpointID
		}
	}
	if id == "" {
		return "", true
	}
	ctx := r.Context()
	newest, has, err := h.catalog.NewestCheckpoint(ctx, thread)
	if err != nil {
		serverError(w, err)
		return "", false
	}
	if has && newest.ID == id {
		return "", true // the thread's head: the run goes on from it as any run does
	}
	rec, found, err := h.catalog.Checkpoint(ctx, thread, id)
	switch {
	case err != nil:
		serverError(w, err)
		return "", false
	case !found:
		fail(w, http.StatusNotFound, "checkpoint_id: thread %s has no checkpoint %s", thread, id)
		return "", false
	case req.Command != nil:
		fail(w, http.StatusUnprocessableEntity, "command: not served with a run from an older checkpoint (a fork starts from the checkpoint's values with the run's input)")
		return "", false
	}
	if made, _ := rec.Metadata["assistant_id"].(string); made != assistant {
		fail(w, http.StatusUnprocessableEntity, "checkpoint_id: checkpoint %s was made by assistant %q; a run of %q from it is not served", id, made, assistant)
		return "", false
	}
	return id, true
}

// command carries out req's command on thread: with interrupts pending,
// it answers them (input.respond, with the command's update and goto),
// and the run they resume goes on (resumed true, its id); with none, its
// update changes the state before the run req starts (resumed false).
// It answers the request itself when it cannot (ok false).
func (h *Handler) command(w http.ResponseWriter, r *http.Request, thread string, req *LgRunCreate) (runID string, resumed, ok bool) {
	cmd := req.Command
	var update map[string]any
	if cmd.Update != nil {
		update = *cmd.Update
	}
	info, _, err := h.catalog.Get(r.Context(), thread)
	if err != nil {
		serverError(w, err)
		return "", false, false
	}
	if len(info.Interrupts) == 0 {
		switch {
		case cmd.Resume != nil:
			fail(w, http.StatusBadRequest, "command.resume: thread %s has no pending interrupt", thread)
			return "", false, false
		case cmd.Goto != nil:
			fail(w, http.StatusUnprocessableEntity, "command.goto: served with a resume only (the thread has no pending interrupt)")
			return "", false, false
		case update != nil:
			if _, _, err := h.catalog.UpdateState(r.Context(), thread, update, ""); err != nil && !errors.Is(err, threads.ErrNoGraph) {
				serverError(w, err)
				return "", false, false
			}
		}
		return "", false, true
	}
	// One value for every pending interrupt, or a map of id to value.
	byID, isMap := cmd.Resume.(map[string]any)
	if isMap {
		for _, in := range info.Interrupts {
			if _, ok := byID[in.ID]; !ok {
				isMap = false
			}
		}
	}
	many := &protocol.InputRespondMany{Update: update}
	for _, in := range info.Interrupts {
		answer := cmd.Resume
		if isMap {
			answer = byID[in.ID]
		}
		many.Responses = append(many.Responses, protocol.InputRespondEntry{Namespace: protocol.Namespace(in.Namespace), InterruptID: in.ID, Response: answer})
	}
	if cmd.Goto != nil {
		b, err := json.Marshal(cmd.Goto)
		var g protocol.Goto
		if err == nil {
			err = json.Unmarshal(b, &g)
		}
		if err != nil {
			fail(w, http.StatusUnprocessableEntity, "command.goto: a node, a Send ({node, input}) or a list of those: %v", err)
			return "", false, false
		}
		many.Goto = &g
	}
	runID, _ = h.catalog.ActiveRun(thread)
	if _, err := h.Server.Do(r.Context(), thread, &protocol.ClientCommand{Value: &protocol.ClientCommandInputRespond{ID: 1, Params: protocol.InputRespondParams{Value: many}}}); err != nil {
		var e *protocol.ErrorResponse
		if errors.As(err, &e) {
			fail(w, http.StatusConflict, "%s", e.Message)
			return "", false, false
		}
		serverError(w, err)
		return "", false, false
	}
	return runID, true, true
}

// waitEnd waits, on ss, until run runID of thread has ended or waits on
// interrupts, and answers the thread's values (or the run's failure, as the Platform does:
// {"__error__": ...}).
func (h *Handler) waitEnd(w http.ResponseWriter, r *http.Request, thread, runID string, ss *server.Session) {
	ctx := r.Context()
	var failed *protocol.LifecycleData
	sawEnd := false // the run's end (or its interrupt) was read here
	for !h.catalog.Run(thread, runID).Ended() && !h.catalog.Run(thread, runID).Waits {
		e, err := ss.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return // the client went; the run goes on
			}
			fail(w, http.StatusServiceUnavailable, "the run's events: %v", err)
			return
		}
		if l, ok := e.Payload.(*protocol.ServerEventLifecycle); ok && e.EndsRun() {
			sawEnd = true
			d := l.Params.Data
			failed = nil
			if d.Event == protocol.AgentStatusFailed {
				failed = &d
			}
		}
	}
	waits := false // it ended waiting on its interrupts (on another node, its record says so)
	if failed == nil {
		h.catalog.SyncRuns(ctx)
		runs, err := h.catalog.Runs(ctx, thread)
		if err != nil && !errors.Is(err, server.ErrNoCatalog) {
			serverError(w, err)
			return
		}
		status := ""
		if err != nil {
			status, sawEnd = server.RunSuccess, true // no records to ask: the stream says all there is
		}
		for _, rec := range runs {
			if rec.ID != runID {
				continue
			}
			status = rec.Status
			if rec.Status == server.RunError {
				failed = &protocol.LifecycleData{}
				if rec.Error != "" {
					failed.Error = &rec.Error // a run cut by a crash or a lost node
				}
			}
			waits = rec.Status == server.RunInterrupted
		}
		if !sawEnd && !waits && failed == nil && status != server.RunSuccess && !h.catalog.Run(thread, runID).Waits {
			// Neither its end nor its record says it succeeded (it did
			// not start, or its record was not kept): its values are not
			// its answer.
			msg := "the run's end is not known (its record says " + strconv.Quote(status) + ")"
			failed = &protocol.LifecycleData{Error: &msg}
		}
	}
	st, _, err := h.Server.State(context.WithoutCancel(ctx), thread)
	if err != nil {
		serverError(w, err)
		return
	}
	if h.catalog.Run(thread, runID).Waits || waits && failed == nil {
		// It waits on interrupts: what it asks, alone, as the Platform
		// answers a run that ended at an interrupt (its last values
		// chunk).
		asks := []LgInterrupt{}
		for _, in := range st.Interrupts {
			asks = append(asks, LgInterrupt{ID: in.ID, Value: in.Payload})
		}
		write(w, http.StatusOK, LgRunInterrupted{Interrupt: asks})
		return
	}
	if failed != nil {
		msg := "the run failed"
		if failed.Error != nil {
			msg = *failed.Error
		}
		write(w, http.StatusOK, LgRunFailed{Error: LgStreamError{Error: "RunError", Message: msg}})
		return
	}
	write(w, http.StatusOK, orEmpty(st.Values))
}

// waitRun serves POST /threads/{id}/runs/wait.
func (h *Handler) waitRun(w http.ResponseWriter, r *http.Request) {
	h.runAndWait(w, r, r.PathValue("id"), false) // checked by the transport; authorized once its assistant is known
}

// assistant is the assistant the run names: assistant_id, or the Agent
// Protocol's agent_id.
func (req *LgRunCreate) assistant() string {
	switch {
	case req.AssistantID != nil:
		return *req.AssistantID
	case req.AgentID != nil:
		return *req.AgentID
	}
	return ""
}

// waitStateless serves POST /runs/wait: the run on a new thread, deleted
// once the run ended unless on_completion is "keep" (or on the body's
// thread_id, the Agent Protocol's stateful run).
func (h *Handler) waitStateless(w http.ResponseWriter, r *http.Request) {
	h.runAndWait(w, r, "", true)
}

func (h *Handler) runAndWait(w http.ResponseWriter, r *http.Request, thread string, stateless bool) {
	req, thread, stateless, ok := h.readRun(w, r, thread, stateless)
	if !ok {
		return
	}
	runID, ss, ok := h.startRun(w, r, thread, req)
	if !ok {
		return
	}
	defer ss.Close()
	h.waitEnd(w, r, thread, runID, ss)
	if stateless && temporary(req) {
		// Deleted now, or when the run ends if the client went before.
		_ = h.catalog.DeleteOnCompletion(context.WithoutCancel(r.Context()), thread, runID)
	}
}

// temporary reports whether a stateless run's thread goes when it ends.
func temporary(req *LgRunCreate) bool {
	return req.OnCompletion == nil || *req.OnCompletion != "keep"
}

// createStateless serves POST /runs: the run on a new thread, in the
// background; the thread is deleted once the run ended unless
// on_completion is "keep".
func (h *Handler) createStateless(w http.ResponseWriter, r *http.Request) {
	h.startInBackground(w, r, "", true)
}

// readRun reads the run a request asks for, and the thread it runs on:
// thread, or for a route without one (stateless), the body's thread_id
// (the run is then not stateless) or a new thread. It answers the
// request itself when it cannot (ok false).
func (h *Handler) readRun(w http.ResponseWriter, r *http.Request, thread string, stateless bool) (req *LgRunCreate, _ string, _ bool, ok bool) {
	req = &LgRunCreate{}
	if !h.body(w, r, req) {
		return nil, "", false, false
	}
	if stateless {
		if thread, stateless = h.bodyThread(w, req); thread == "" {
			return nil, "", false, false
		}
	}
	return req, thread, stateless, true
}

// bodyThread is the thread a run of POST /runs or /runs/wait runs on: the
// body's thread_id (the Agent Protocol's stateful run; stateless false),
// or a new one (stateless). It answers a bad id itself ("").
func (h *Handler) bodyThread(w http.ResponseWriter, req *LgRunCreate) (thread string, stateless bool) {
	if req.ThreadID == nil {
		return records.NewUUID(), true
	}
	if err := server.ValidThreadID(*req.ThreadID); err != nil {
		fail(w, http.StatusUnprocessableEntity, "thread_id: %v", err)
		return "", false
	}
	return *req.ThreadID, false
}

// deleteRun serves DELETE /threads/{id}/runs/{run}.
func (h *Handler) deleteRun(w http.ResponseWriter, r *http.Request) {
	thread, rec, ok := h.findRun(w, r)
	if !ok {
		return
	}
	if !h.mayChange(w, r, thread) {
		return
	}
	if err := h.catalog.DeleteRun(r.Context(), thread, rec.ID); err != nil {
		serverError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// createRun serves POST /threads/{id}/runs: the run starts in the
// background; the answer is its record as it starts.
func (h *Handler) createRun(w http.ResponseWriter, r *http.Request) {
	h.startInBackground(w, r, r.PathValue("id"), false) // checked by the transport; authorized once its assistant is known
}

// startInBackground starts the run the body asks for on thread and
// answers its record.
func (h *Handler) startInBackground(w http.ResponseWriter, r *http.Request, thread string, stateless bool) {
	req, thread, stateless, ok := h.readRun(w, r, thread, stateless)
	if !ok {
		return
	}
	if run, ok := h.runInBackground(w, r, thread, stateless, req); ok {
		write(w, http.StatusOK, run)
	}
}

// runInBackground starts run req on thread and returns its record as it
// was created (pending); it answers the request itself when it cannot
// (ok false).
func (h *Handler) runInBackground(w http.ResponseWriter, r *http.Request, thread string, stateless bool, req *LgRunCreate) (LgRun, bool) {
	runID, ss, ok := h.startRun(w, r, thread, req)
	if !ok {
		return LgRun{}, false
	}
	ss.Close()
	if stateless && temporary(req) {
		_ = h.catalog.DeleteOnCompletion(context.WithoutCancel(r.Context()), thread, runID)
	}
	h.catalog.SyncRuns(r.Context())
	var rec server.RunRecord
	found := false
	if runs, err := h.catalog.Runs(r.Context(), thread); err == nil {
		for _, known := range runs {
			if known.ID == runID {
				rec, found = known, true
			}
		}
	}
	if !found { // no record (an engine that keeps none): the run as asked
		name, _ := h.assistantName(req.assistant())
		rec = server.RunRecord{ID: runID, Thread: thread, Assistant: name, Status: server.RunPending, Input: req.Input, MultitaskStrategy: "reject"}
		if req.Metadata != nil {
			rec.Metadata = *req.Metadata
		}
		if req.Config != nil {
			rec.Config = *req.Config
		}
		if req.MultitaskStrategy != nil {
			rec.MultitaskStrategy = string(*req.MultitaskStrategy)
		}
	}
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt, rec.UpdatedAt = h.now(), h.now()
	}
	// The run as it was created (pending), whatever it is by now, as
	// the Platform answers.
	rec.Status, rec.UpdatedAt = server.RunPending, rec.CreatedAt
	return lgRun(rec), true
}

// lgRun is a run's record as the wire shows it.
func lgRun(rec server.RunRecord) LgRun {
	kwargs := map[string]any{"input": rec.Input, "config": orEmpty(rec.Config)}
	ms := rec.MultitaskStrategy
	if ms == "" {
		ms = "reject"
	}
	return LgRun{RunID: rec.ID, ThreadID: rec.Thread, AssistantID: AssistantID(rec.Assistant), CreatedAt: stamp(rec.CreatedAt), UpdatedAt: stamp(rec.UpdatedAt),
		Status: LgRunStatus(rec.Status), Metadata: orEmpty(rec.Metadata), Kwargs: kwargs, MultitaskStrategy: LgMultitaskStrategy(ms)}
}

// authorizedThread is {id}, which the transport checked (the route's
// PathThread), once the caller may use the thread as it is.
func (h *Handler) authorizedThread(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	return id, h.Allowed(w, r, id, false)
}

// listRuns serves GET /threads/{id}/runs (?limit=10&offset=0&status=).
func (h *Handler) listRuns(w http.ResponseWriter, r *http.Request) {
	thread, ok := h.authorizedThread(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	limit, offset := 10, 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			fail(w, http.StatusUnprocessableEntity, "limit: a whole number from 1 to 1000")
			return
		}
		limit = n
	}
	if v := q.Get("offset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			fail(w, http.StatusUnprocessableEntity, "offset: a whole number from 0")
			return
		}
		offset = n
	}
	sel := querySelect(r)
	if !checkSelect(w, sel, false, runFields...) {
		return
	}
	h.catalog.SyncRuns(r.Context())
	runs, err := h.catalog.Runs(r.Context(), thread)
	if err != nil {
		serverError(w, err)
		return
	}
	out := []any{}
	for _, rec := range runs {
		if st := q.Get("status"); st != "" && rec.Status != st {
			continue
		}
		if len(sel) > 0 {
			out = append(out, pick(lgRun(rec), sel))
			continue
		}
		out = append(out, lgRun(rec))
	}
	if offset >= len(out) {
		out = []any{}
	} else {
		out = out[offset:]
	}
	if len(out) > limit {
		out = out[:limit]
	}
	write(w, http.StatusOK, out)
}

// findRun is the record of {run} on {id}; it answers 404 itself.
func (h *Handler) findRun(w http.ResponseWriter, r *http.Request) (thread string, rec server.RunRecord, ok bool) {
	thread, ok = h.authorizedThread(w, r)
	if !ok {
		return "", rec, false
	}
	// (A run of a thread that is gone is gone: its join must not make
	// the thread again by subscribing to it.)
	if _, found, err := h.catalog.Get(r.Context(), thread); err != nil || !found {
		if err != nil {
			serverError(w, err)
		} else {
			fail(w, http.StatusNotFound, "Thread with ID %s not found", thread)
		}
		return "", rec, false
	}
	for attempt := 0; attempt < 2; attempt++ {
		if attempt == 1 {
			h.catalog.SyncRuns(r.Context()) // one written just now is read then
		}
		runs, err := h.catalog.Runs(r.Context(), thread)
		if err != nil {
			serverError(w, err)
			return "", rec, false
		}
		for _, known := range runs {
			if known.ID == r.PathValue("run") {
				return thread, known, true
			}
		}
	}
	fail(w, http.StatusNotFound, "Run %s not found", r.PathValue("run"))
	return "", rec, false
}

// getRun serves GET /threads/{id}/runs/{run}.
func (h *Handler) getRun(w http.ResponseWriter, r *http.Request) {
	if _, rec, ok := h.findRun(w, r); ok {
		write(w, http.StatusOK, lgRun(rec))
	}
}

// joinRun serves GET /threads/{id}/runs/{run}/join: the thread's values
// once the run has ended.
func (h *Handler) joinRun(w http.ResponseWriter, r *http.Request) {
	thread, rec, ok := h.findRun(w, r)
	if !ok {
		return
	}
	ss := h.Server.NewSession(thread)
	defer ss.Close()
	if _, _, err := ss.Subscribe(channels.Filter{Channels: []string{channels.Lifecycle}, Depth: 0}, server.SeqCursor(h.Server.LastSeq(thread))); err != nil {
		serverError(w, err)
		return
	}
	if isTrue(r.URL.Query().Get("cancel_on_disconnect")) {
		// The client going before the run ends cancels it.
		defer func() {
			if r.Context().Err() != nil && !h.catalog.Run(thread, rec.ID).Ended() {
				run := rec.ID
				_, _ = h.Server.Do(context.WithoutCancel(r.Context()), thread, &protocol.ClientCommand{Value: &protocol.ClientCommandRunCancel{ID: 1, Params: protocol.RunCancelParams{RunID: &run}}})
			}
		}()
	}
	if rec.Open() && h.catalog.Run(thread, rec.ID).Ended() {
		// Another node runs it (or did, and was lost): its end comes in
		// the thread's stream, or in its record once the node's lease
		// ends.
		if err := h.waitElsewhere(r.Context(), thread, rec.ID, ss); err != nil {
			if r.Context().Err() == nil {
				fail(w, http.StatusServiceUnavailable, "the run's events: %v", err)
			}
			return
		}
	}
	h.waitEnd(w, r, thread, rec.ID, ss)
}

// waitElsewhere waits until a run another node runs ends: its root's
// end (or its interrupt) in ss, the thread's lifecycle from before the
// run's record was read, or its record no longer open (read again each
// second: an end this node's stream missed, or a cut run the record
// alone says ended).
func (h *Handler) waitElsewhere(ctx context.Context, thread, runID string, ss *server.Session) error {
	for {
		if !h.catalog.Run(thread, runID).Ended() {
			return nil // it came to run here (a takeover): waitEnd waits for it
		}
		if rec, found, err := h.catalog.FindRun(ctx, runID); err == nil && (!found || !rec.Open()) {
			return nil
		}
		wait, cancel := context.WithTimeout(ctx, time.Second)
		e, err := ss.Next(wait)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && wait.Err() == nil:
			return err
		case err == nil && (e.EndsRun() || e.WaitsOnInterrupts()):
			// Its record is written as it ends; the answer reads it.
			for range 20 {
				if rec, found, err := h.catalog.FindRun(ctx, runID); err == nil && found && !rec.Open() {
					return nil
				}
				time.Sleep(25 * time.Millisecond)
			}
			return nil
		}
	}
}

// cancelRun serves POST /threads/{id}/runs/{run}/cancel (?wait=true: the
// answer once it ended). The run is stopped as run.cancel stops it
// (action interrupt; rollback is not served yet: 422).
func (h *Handler) cancelRun(w http.ResponseWriter, r *http.Request) {
	action := r.URL.Query().Get("action")
	if action != "" && action != "interrupt" && action != "rollback" {
		fail(w, http.StatusUnprocessableEntity, "action: interrupt or rollback")
		return
	}
	thread, rec, ok := h.findRun(w, r)
	if !ok {
		return
	}
	ss := h.Server.NewSession(thread)
	defer ss.Close()
	if _, _, err := ss.Subscribe(channels.Filter{Channels: []string{channels.Lifecycle}, Depth: 0}, server.SeqCursor(h.Server.LastSeq(thread))); err != nil {
		serverError(w, err)
		return
	}
	runID := rec.ID
	if action == "rollback" {
		// The state goes back to the run's start, and the run is
		// deleted once it ended, as the Platform does.
		h.catalog.RollbackRun(thread, runID)
		for !h.catalog.Run(thread, runID).Ended() {
			if _, err := ss.Next(r.Context()); err != nil {
				return
			}
		}
		if err := h.catalog.DeleteRun(context.WithoutCancel(r.Context()), thread, runID); err != nil {
			serverError(w, err)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		return
	}
	if _, err := h.Server.Do(r.Context(), thread, &protocol.ClientCommand{Value: &protocol.ClientCommandRunCancel{ID: 1, Params: protocol.RunCancelParams{RunID: &runID}}}); err != nil {
		serverError(w, err)
		return
	}
	if r.URL.Query().Get("wait") == "true" || r.URL.Query().Get("wait") == "1" {
		for !h.catalog.Run(thread, runID).Ended() {
			if _, err := ss.Next(r.Context()); err != nil {
				return
			}
		}
	}
	w.WriteHeader(http.StatusAccepted)
}

package langgraph

import (
	"errors"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/records"
	"github.com/agentstream/agentstream/server/threads"
)

// snapshot is a checkpoint as the Platform's history shows it: the
// state the thread had then.
func snapshot(thread string, cp server.CheckpointRecord, latest bool, status string) LgThreadState {
	next := []string{}
	if latest && status != "idle" {
		next = []string{"agent"}
	}
	created := stamp(cp.Time)
	st := LgThreadState{
		Values:     orEmpty(cp.Values),
		Next:       next,
		Tasks:      []LgStateTask{},
		Metadata:   checkpointMetadata(cp),
		CreatedAt:  &created,
		Checkpoint: checkpointAt(thread, cp.ID),
	}
	if cp.ParentID != "" {
		st.ParentCheckpoint = checkpointAt(thread, cp.ParentID)
	}
	return st
}

// checkpointMetadata is a checkpoint's metadata as a state shows it: what
// it keeps (its run and assistant, a client's patchState), with its step
// and source.
func checkpointMetadata(cp server.CheckpointRecord) map[string]any {
	md := make(map[string]any, len(cp.Metadata)+2)
	maps.Copy(md, cp.Metadata)
	md["step"], md["source"] = cp.Step, cp.Source
	return md
}

// checkpointAt is checkpoint id of thread's root as a state names it.
func checkpointAt(thread, id string) *LgCheckpointConfig {
	return &LgCheckpointConfig{ThreadID: thread, CheckpointNs: "", CheckpointID: id}
}

// history serves GET and POST /threads/{id}/history: the thread's
// checkpoints as states, newest first (limit: 10 by default, from the
// query or the body; before, from the query or the body; the body's
// metadata and checkpoint).
func (h *Handler) history(w http.ResponseWriter, r *http.Request) {
	thread, ok := h.authorizedThread(w, r)
	if !ok {
		return
	}
	limit := 10
	var before, from string
	var metadata map[string]any
	sel := querySelect(r)
	if r.Method == http.MethodPost {
		var req LgHistory
		if !h.body(w, r, &req) {
			return
		}
		sel = append(sel, req.Select...)
		if req.Limit != nil {
			limit = int(*req.Limit)
		}
		if req.Before != nil {
			before = *req.Before
		}
		if req.Metadata != nil {
			metadata = *req.Metadata
		}
		if req.Checkpoint != nil && req.Checkpoint.CheckpointID != nil {
			from = *req.Checkpoint.CheckpointID
		}
	} else {
		if v := r.URL.Query().Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 1000 {
				fail(w, http.StatusUnprocessableEntity, "limit: a whole number from 1 to 1000")
				return
			}
			limit = n
		}
		before = r.URL.Query().Get("before")
	}
	if !checkSelect(w, sel, true, stateFields...) {
		return
	}
	info, cps, ok := h.checkpoints(w, r, thread)
	if !ok {
		return
	}
	// Where the page starts: at `checkpoint`, or after `before`.
	start := 0
	for i, cp := range cps {
		if from != "" && cp.ID == from {
			start = i
		}
		if before != "" && cp.ID == before {
			start = i + 1
		}
	}
	if (from != "" || before != "") && !slices.ContainsFunc(cps, func(cp server.CheckpointRecord) bool { return cp.ID == from || cp.ID == before }) {
		start = len(cps) // a checkpoint the thread does not have: nothing before it
	}
	out := []LgThreadState{}
	for i := start; i < len(cps) && len(out) < limit; i++ {
		cp := cps[i]
		if metadata != nil {
			have := maps.Clone(cp.Metadata)
			if have == nil {
				have = map[string]any{}
			}
			have["step"], have["source"] = float64(cp.Step), cp.Source
			if !records.MetadataMatches(have, metadata) {
				continue
			}
		}
		out = append(out, snapshot(thread, cp, i == 0, info.Status))
	}
	if len(sel) > 0 {
		picked := make([]map[string]any, len(out))
		for i, st := range out {
			picked[i] = pick(st, sel)
		}
		write(w, http.StatusOK, picked)
		return
	}
	write(w, http.StatusOK, out)
}

// copyThread serves POST /threads/{id}/copy: a new thread with the
// thread's metadata, values and checkpoints (not its events or runs).
func (h *Handler) copyThread(w http.ResponseWriter, r *http.Request) {
	id, ok := h.authorizedThread(w, r)
	if !ok {
		return
	}
	info, found, err := h.catalog.Copy(r.Context(), auth.FromContext(r.Context()), id)
	answerThread(w, id, info, found, err, false)
}

// checkpoints is thread as the Platform shows it and its checkpoints,
// newest first; it answers the request itself when it cannot (404 for a
// thread that does not exist).
func (h *Handler) checkpoints(w http.ResponseWriter, r *http.Request, thread string) (threads.ThreadInfo, []server.CheckpointRecord, bool) {
	info, found, err := h.catalog.Get(r.Context(), thread)
	if err != nil {
		serverError(w, err)
		return info, nil, false
	}
	if !found {
		fail(w, http.StatusNotFound, "Thread with ID %s not found", thread)
		return info, nil, false
	}
	cps, err := h.catalog.Checkpoints(r.Context(), thread)
	if err != nil {
		serverError(w, err)
		return info, nil, false
	}
	return info, cps, true
}

// emptyState is the state of a thread with no checkpoint (or of a
// checkpoint it does not have), as the Platform shows it.
func emptyState(thread, checkpointID string) LgThreadState {
	st := LgThreadState{Values: map[string]any{}, Next: []string{}, Tasks: []LgStateTask{}}
	if checkpointID != "" {
		st.Checkpoint = checkpointAt(thread, checkpointID)
	}
	return st
}

// stateAt answers the state at checkpoint id of thread (the newest when
// id is empty).
func (h *Handler) stateAt(w http.ResponseWriter, r *http.Request, thread, id string) {
	sel := querySelect(r)
	if !checkSelect(w, sel, true, stateFields...) {
		return
	}
	write := func(w http.ResponseWriter, status int, st LgThreadState) {
		if len(sel) > 0 {
			writeJSON(w, status, pick(st, sel))
			return
		}
		writeJSON(w, status, st)
	}
	info, cps, ok := h.checkpoints(w, r, thread)
	if !ok {
		return
	}
	for i, cp := range cps {
		if id == "" || cp.ID == id {
			st := snapshot(thread, cp, i == 0, info.Status)
			if i == 0 {
				withNow(&st, info)
			}
			write(w, http.StatusOK, st)
			return
		}
	}
	if id == "" && (info.Values != nil || len(info.Interrupts) > 0) {
		// State with no checkpoint yet (a run that asks before its first).
		st := emptyState(thread, "")
		st.Metadata = map[string]any{}
		if info.Status != "idle" {
			st.Next = []string{"agent"}
		}
		withNow(&st, info)
		write(w, http.StatusOK, st)
		return
	}
	write(w, http.StatusOK, emptyState(thread, id))
}

// withNow completes the newest state with what the thread has now: its
// values, and the interrupts it waits on as the Platform's tasks show
// them.
func withNow(st *LgThreadState, info threads.ThreadInfo) {
	if info.Values != nil {
		st.Values = info.Values
	}
	if len(info.Interrupts) > 0 {
		st.Tasks = interruptTasks(info.Interrupts)
	}
}

// interruptTasks are a state's tasks while a run waits on interrupts, as
// the Platform shows them: one task, "interrupts", with each of them.
func interruptTasks(pending []server.PendingInterrupt) []LgStateTask {
	ints := make([]LgTaskInterrupt, 0, len(pending))
	for _, in := range pending {
		ns := in.Namespace
		if ns == nil {
			ns = []string{}
		}
		ints = append(ints, LgTaskInterrupt{ID: in.ID, Value: in.Payload, Namespace: ns})
	}
	return []LgStateTask{{ID: "interrupts", Name: "agent", Interrupts: ints}}
}

// getState serves GET /threads/{id}/state and /state/{checkpoint}.
func (h *Handler) getState(w http.ResponseWriter, r *http.Request) {
	if thread, ok := h.authorizedThread(w, r); ok {
		h.stateAt(w, r, thread, r.PathValue("checkpoint"))
	}
}

// getStateAt serves POST /threads/{id}/state/checkpoint.
func (h *Handler) getStateAt(w http.ResponseWriter, r *http.Request) {
	thread, ok := h.authorizedThread(w, r)
	if !ok {
		return
	}
	var req LgStateAt
	if !h.body(w, r, &req) {
		return
	}
	h.stateAt(w, r, thread, req.Checkpoint.CheckpointID)
}

// patchState serves PATCH /threads/{id}/state (threads.patchState): the
// newest checkpoint's metadata, merged; 204.
func (h *Handler) patchState(w http.ResponseWriter, r *http.Request) {
	thread, ok := h.authorizedThread(w, r)
	if !ok || !h.mayChange(w, r, thread) {
		return
	}
	var req LgStatePatch
	if !h.body(w, r, &req) {
		return
	}
	_, found, err := h.catalog.PatchState(r.Context(), thread, req.Metadata)
	switch {
	case errors.Is(err, threads.ErrNoCheckpoint):
		fail(w, http.StatusNotFound, "thread %s has no checkpoint to patch", thread)
	case err != nil:
		serverError(w, err)
	case !found:
		fail(w, http.StatusNotFound, "Thread with ID %s not found", thread)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// updateState serves POST /threads/{id}/state (threads.updateState).
func (h *Handler) updateState(w http.ResponseWriter, r *http.Request) {
	thread, ok := h.authorizedThread(w, r)
	if !ok {
		return
	}
	if !h.mayChange(w, r, thread) {
		return
	}
	var req LgStateUpdate
	if !h.body(w, r, &req) {
		return
	}
	if req.Checkpoint != nil || req.CheckpointID != nil {
		fail(w, http.StatusUnprocessableEntity, "checkpoint: an update of an older checkpoint (a fork) is not served; update the newest")
		return
	}
	values := map[string]any{}
	if req.Values != nil {
		switch v := req.Values.Value.(type) {
		case LgStateUpdateValuesMap:
			values = v
		case LgStateUpdateValuesArray: // updates applied in turn
			for _, u := range v {
				for k, x := range u {
					if prev, ok := values["messages"].([]any); ok && k == "messages" {
						if list, ok := x.([]any); ok {
							x = append(prev, list...)
						} else {
							x = append(prev, x)
						}
					}
					values[k] = x
				}
			}
		}
	}
	node := ""
	if req.AsNode != nil {
		node = *req.AsNode
	}
	cp, found, err := h.catalog.UpdateState(r.Context(), thread, values, node)
	switch {
	case errors.Is(err, threads.ErrNoGraph):
		fail(w, http.StatusBadRequest, "Thread %s has no graph ID", thread)
	case err != nil:
		serverError(w, err)
	case !found:
		fail(w, http.StatusNotFound, "Thread with ID %s not found", thread)
	default:
		write(w, http.StatusOK, LgStateUpdated{Checkpoint: LgCheckpointRef{ThreadID: thread, CheckpointNs: "", CheckpointID: cp.ID}})
	}
}

// ProtocolState is the answer of the protocol's own GET
// /threads/{id}/state for thread id (the core's route, on every profile):
// st in the shape of LangGraph's thread state, which the SDK reads to
// hydrate: values, next (non-empty while a run is active), tasks with the
// pending interrupts, the thread's status, and the latest checkpoint.
func ProtocolState(id string, st server.ThreadState) LgProtocolState {
	out := LgProtocolState{Values: st.Values, Next: []string{}, Tasks: []LgStateTask{}, Metadata: map[string]any{}, Status: st.Status}
	if out.Values == nil {
		out.Values = map[string]any{}
	}
	if st.Status != "idle" {
		out.Next = []string{"agent"}
	}
	if len(st.Interrupts) > 0 {
		out.Tasks = interruptTasks(st.Interrupts)
	}
	if cp := st.Checkpoint; cp != nil {
		created := cp.Time.UTC().Format(time.RFC3339Nano)
		out.Checkpoint = &LgCheckpointRef{ThreadID: id, CheckpointNs: "", CheckpointID: cp.ID}
		out.Metadata = map[string]any{"step": cp.Step, "source": cp.Source}
		out.CreatedAt = &created
		if cp.ParentID != "" {
			out.ParentCheckpoint = &LgCheckpointRef{ThreadID: id, CheckpointNs: "", CheckpointID: cp.ParentID}
		}
	}
	return out
}

package langgraph

import (
	"net/http"
	"strconv"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/server"
)

// snapshot is a checkpoint as the Platform's history shows it: the
// state the thread had then.
func snapshot(thread string, cp server.CheckpointRecord, latest bool, status string) map[string]any {
	next := []string{}
	if latest && status != "idle" {
		next = []string{"agent"}
	}
	out := map[string]any{
		"values":     orEmpty(cp.Values),
		"next":       next,
		"tasks":      []any{},
		"metadata":   map[string]any{"step": cp.Step, "source": cp.Source},
		"created_at": stamp(cp.Time),
		"checkpoint": map[string]any{"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": cp.ID, "checkpoint_map": nil},
	}
	out["parent_checkpoint"] = nil
	if cp.ParentID != "" {
		out["parent_checkpoint"] = map[string]any{"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": cp.ParentID, "checkpoint_map": nil}
	}
	return out
}

// history serves GET and POST /threads/{id}/history: the thread's
// checkpoints as states, newest first (limit: 10 by default, from the
// query or the body's "limit").
func (h *Handler) history(w http.ResponseWriter, r *http.Request) {
	thread, ok := h.authorizedThread(w, r)
	if !ok {
		return
	}
	limit := 10
	if r.Method == http.MethodPost {
		var req LgHistory
		if !h.body(w, r, &req) {
			return
		}
		if req.Limit != nil {
			limit = int(*req.Limit)
		}
	} else if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			fail(w, http.StatusUnprocessableEntity, "limit: a whole number from 1 to 1000")
			return
		}
		limit = n
	}
	info, found, err := h.Server.Thread(r.Context(), thread)
	if err != nil {
		serverError(w, err)
		return
	}
	if !found {
		fail(w, http.StatusNotFound, "Thread with ID %s not found", thread)
		return
	}
	cps, err := h.Server.Checkpoints(r.Context(), thread)
	if err != nil {
		serverError(w, err)
		return
	}
	out := []map[string]any{}
	for i, cp := range cps {
		if len(out) == limit {
			break
		}
		out = append(out, snapshot(thread, cp, i == 0, info.Status))
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
	info, found, err := h.Server.CopyThread(r.Context(), auth.FromContext(r.Context()), id)
	answerThread(w, id, info, found, err, false)
}

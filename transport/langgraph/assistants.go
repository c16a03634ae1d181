package langgraph

import (
	"errors"
	"net/http"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/server/registry"
)

// The Platform's assistants as resources (server/registry): the graphs'
// own and those clients create, with versions.

// lgAssistant is a as the wire shows it.
func lgAssistant(a registry.Assistant) LgAssistant {
	return LgAssistant{AssistantID: a.ID, GraphID: a.GraphID, Name: a.Name, Description: a.Description, Version: uint64(a.Version),
		Config: orEmpty(a.Config), Context: orEmpty(a.Context), Metadata: orEmpty(a.Metadata), CreatedAt: stamp(a.CreatedAt), UpdatedAt: stamp(a.UpdatedAt)}
}

func lgVersion(a registry.Assistant) LgAssistantVersion {
	return LgAssistantVersion{AssistantID: a.ID, GraphID: a.GraphID, Name: a.Name, Description: a.Description, Version: uint64(a.Version),
		Config: orEmpty(a.Config), Context: orEmpty(a.Context), Metadata: orEmpty(a.Metadata), CreatedAt: stamp(a.UpdatedAt)}
}

// assistantError answers a registry error with the Platform's status.
func assistantError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, registry.ErrNotFound), errors.Is(err, registry.ErrNoGraph):
		fail(w, http.StatusNotFound, "%v", err)
	case errors.Is(err, registry.ErrExists):
		fail(w, http.StatusConflict, "%v", err)
	case errors.Is(err, registry.ErrNotYours):
		fail(w, http.StatusForbidden, "%v", err)
	default:
		serverError(w, err)
	}
}

// noContext refuses an assistant's context: agentstream's assistants
// take their settings in config.
func noContext(w http.ResponseWriter, ctx *map[string]any) bool {
	if ctx != nil && len(*ctx) > 0 {
		fail(w, http.StatusUnprocessableEntity, "context: not served (%s)", notServed["context"])
		return false
	}
	return true
}

// createAssistant serves POST /assistants.
func (h *Handler) createAssistant(w http.ResponseWriter, r *http.Request) {
	var req LgAssistantCreate
	if !h.body(w, r, &req) || !noContext(w, (*map[string]any)(req.Context)) {
		return
	}
	a := registry.Assistant{GraphID: req.GraphID, Description: req.Description}
	if req.AssistantID != nil {
		a.ID = *req.AssistantID
	}
	if req.Name != nil {
		a.Name = *req.Name
	}
	if req.Config != nil {
		a.Config = *req.Config
	}
	if req.Metadata != nil {
		a.Metadata = *req.Metadata
	}
	ifExists := "raise"
	if req.IfExists != nil {
		ifExists = string(*req.IfExists)
	}
	made, _, err := h.registry.Create(r.Context(), auth.FromContext(r.Context()), a, ifExists)
	if err != nil {
		assistantError(w, err)
		return
	}
	write(w, http.StatusOK, lgAssistant(made))
}

// patchAssistant serves PATCH /assistants/{id}: a new version.
func (h *Handler) patchAssistant(w http.ResponseWriter, r *http.Request) {
	var req LgAssistantPatch
	if !h.body(w, r, &req) || !noContext(w, (*map[string]any)(req.Context)) {
		return
	}
	ch := registry.Changes{GraphID: req.GraphID, Name: req.Name, Description: req.Description}
	if req.Config != nil {
		ch.Config = *req.Config
	}
	if req.Metadata != nil {
		ch.Metadata = *req.Metadata
	}
	a, err := h.registry.Update(r.Context(), auth.FromContext(r.Context()), r.PathValue("id"), ch)
	if err != nil {
		assistantError(w, err)
		return
	}
	write(w, http.StatusOK, lgAssistant(a))
}

// deleteAssistant serves DELETE /assistants/{id}.
func (h *Handler) deleteAssistant(w http.ResponseWriter, r *http.Request) {
	if v := r.URL.Query().Get("delete_threads"); v != "" && v != "false" {
		fail(w, http.StatusUnprocessableEntity, "delete_threads: not served yet (delete the assistant's threads with threads.delete)")
		return
	}
	if err := h.registry.Delete(r.Context(), auth.FromContext(r.Context()), r.PathValue("id")); err != nil {
		assistantError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// assistantVersions serves POST /assistants/{id}/versions.
func (h *Handler) assistantVersions(w http.ResponseWriter, r *http.Request) {
	var req LgAssistantVersions
	if !h.body(w, r, &req) {
		return
	}
	limit, offset := 10, 0
	if req.Limit != nil {
		limit = int(*req.Limit)
	}
	if req.Offset != nil {
		offset = int(min(*req.Offset, 1<<31))
	}
	var md map[string]any
	if req.Metadata != nil {
		md = *req.Metadata
	}
	vs, err := h.registry.Versions(r.Context(), auth.FromContext(r.Context()), r.PathValue("id"), md, limit, offset)
	if err != nil {
		assistantError(w, err)
		return
	}
	out := make([]LgAssistantVersion, len(vs))
	for i, v := range vs {
		out[i] = lgVersion(v)
	}
	write(w, http.StatusOK, out)
}

// latestAssistant serves POST /assistants/{id}/latest.
func (h *Handler) latestAssistant(w http.ResponseWriter, r *http.Request) {
	var req LgAssistantLatest
	if !h.body(w, r, &req) {
		return
	}
	a, err := h.registry.SetLatest(r.Context(), auth.FromContext(r.Context()), r.PathValue("id"), int(min(req.Version, 1<<31)))
	if err != nil {
		assistantError(w, err)
		return
	}
	write(w, http.StatusOK, lgAssistant(a))
}

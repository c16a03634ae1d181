package langgraph

import (
	"maps"
	"math"
	"net/http"
	"slices"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/records"
	"github.com/agentstream/agentstream/server/registry"
	"github.com/agentstream/agentstream/server/threads"
)

// The assistants' schemas, and the Agent Protocol's paths for assistants
// (agents). agentstream's assistants declare no schema: each is an
// object schema that takes any members.

func anyObject() map[string]any {
	return map[string]any{"type": "object", "additionalProperties": true}
}

// findAssistant is the assistant {id} names (its UUID, or a graph's
// name for the graph's own) that the caller sees; it answers 404 itself.
func (h *Handler) findAssistant(w http.ResponseWriter, r *http.Request) (LgAssistant, bool) {
	id := r.PathValue("id")
	a, ok, err := h.registry.Get(r.Context(), id)
	switch {
	case err != nil:
		assistantError(w, err)
		return LgAssistant{}, false
	case !ok || !registry.Visible(auth.FromContext(r.Context()), a):
		fail(w, http.StatusNotFound, "Assistant %s not found", id)
		return LgAssistant{}, false
	}
	return lgAssistant(a), true
}

// assistantSchemas serves GET /assistants/{id}/schemas.
func (h *Handler) assistantSchemas(w http.ResponseWriter, r *http.Request) {
	if a, ok := h.findAssistant(w, r); ok {
		write(w, http.StatusOK, LgAssistantSchemas{GraphID: a.GraphID, InputSchema: anyObject(), OutputSchema: anyObject(), StateSchema: anyObject(),
			ConfigSchema: anyObject(), ContextSchema: anyObject()})
	}
}

// assistantGraph serves GET /assistants/{id}/graph: start, the
// assistant, end.
func (h *Handler) assistantGraph(w http.ResponseWriter, r *http.Request) {
	a, ok := h.findAssistant(w, r)
	if !ok {
		return
	}
	schema := map[string]any{"$schema": "https://json-schema.org/draft/2020-12/schema"}
	write(w, http.StatusOK, LgGraph{
		Nodes: []LgGraphNode{
			{ID: "__start__", Type: "schema", Data: schema},
			{ID: a.GraphID, Type: "runnable", Data: map[string]any{"id": []string{"agentstream", "Assistant"}, "name": a.GraphID}, Metadata: map[string]any{}},
			{ID: "__end__", Type: "schema", Data: schema},
		},
		Edges: []LgGraphEdge{{Source: "__start__", Target: a.GraphID}, {Source: a.GraphID, Target: "__end__"}},
	})
}

func agent(a LgAssistant) LgAgent {
	return LgAgent{AgentID: a.GraphID, Name: a.Name, Metadata: a.Metadata,
		Capabilities: map[string]any{"ap.io.messages": true, "ap.io.streaming": true}}
}

// searchAgents serves POST /agents/search.
func (h *Handler) searchAgents(w http.ResponseWriter, r *http.Request) {
	var req LgAgentSearch
	if !h.body(w, r, &req) {
		return
	}
	// The Agent Protocol's agents are the graphs (agent_id their name):
	// their own assistants.
	q := registry.Query{Limit: 10, SortOrder: "asc", SortBy: "name", Metadata: map[string]any{"created_by": "system"}}
	if req.Name != nil {
		q.Name = *req.Name
	}
	if req.Metadata != nil {
		maps.Copy(q.Metadata, *req.Metadata)
	}
	if req.Offset != nil {
		q.Offset = int(min(*req.Offset, 1<<31))
	}
	if req.Limit != nil {
		q.Limit = int(*req.Limit)
	}
	found, _, err := h.registry.Search(r.Context(), auth.FromContext(r.Context()), q)
	if err != nil {
		assistantError(w, err)
		return
	}
	out := []LgAgent{}
	for _, a := range found {
		out = append(out, agent(lgAssistant(a)))
	}
	write(w, http.StatusOK, out)
}

// getAgent serves GET /agents/{id}.
func (h *Handler) getAgent(w http.ResponseWriter, r *http.Request) {
	if a, ok := h.findAssistant(w, r); ok {
		write(w, http.StatusOK, agent(a))
	}
}

// agentSchemas serves GET /agents/{id}/schemas.
func (h *Handler) agentSchemas(w http.ResponseWriter, r *http.Request) {
	if a, ok := h.findAssistant(w, r); ok {
		write(w, http.StatusOK, LgAgentSchema{AgentID: a.GraphID, InputSchema: anyObject(), OutputSchema: anyObject(), StateSchema: anyObject(), ConfigSchema: anyObject()})
	}
}

// The Agent Protocol's runs, named by their id alone.

// agentRun is a run as the Agent Protocol shows it.
func agentRun(rec server.RunRecord) LgAgentRun {
	status := rec.Status
	if status == server.RunRunning {
		status = server.RunPending // the protocol has no "running"
	}
	out := LgAgentRun{RunID: rec.ID, ThreadID: rec.Thread, AgentID: rec.Assistant, CreatedAt: stamp(rec.CreatedAt), UpdatedAt: stamp(rec.UpdatedAt),
		Status: LgAgentRunStatus(status), Metadata: orEmpty(rec.Metadata), Input: rec.Input}
	if rec.Config != nil {
		out.Config = rec.Config
	}
	return out
}

// byRunID finds {run} by its id alone, checks the caller may use its
// thread, and sets {id} to the thread for the thread routes' handlers;
// it answers 404 itself.
func (h *Handler) byRunID(w http.ResponseWriter, r *http.Request) (server.RunRecord, bool) {
	rec, found, err := h.catalog.FindRun(r.Context(), r.PathValue("run"))
	if err != nil {
		serverError(w, err)
		return rec, false
	}
	if !found {
		fail(w, http.StatusNotFound, "Run %s not found", r.PathValue("run"))
		return rec, false
	}
	if !h.authorized(w, r, rec.Thread) {
		return rec, false
	}
	r.SetPathValue("id", rec.Thread)
	return rec, true
}

// getAgentRun serves GET /runs/{run}.
func (h *Handler) getAgentRun(w http.ResponseWriter, r *http.Request) {
	if rec, ok := h.byRunID(w, r); ok {
		write(w, http.StatusOK, agentRun(rec))
	}
}

// deleteAgentRun serves DELETE /runs/{run}.
func (h *Handler) deleteAgentRun(w http.ResponseWriter, r *http.Request) {
	if _, ok := h.byRunID(w, r); ok {
		h.deleteRun(w, r)
	}
}

// cancelAgentRun serves POST /runs/{run}/cancel: 204 once asked (the
// Platform's route answers 202).
func (h *Handler) cancelAgentRun(w http.ResponseWriter, r *http.Request) {
	if _, ok := h.byRunID(w, r); ok {
		sw := &statusRewriter{ResponseWriter: w, from: http.StatusAccepted, to: http.StatusNoContent}
		h.cancelRun(sw, r)
	}
}

// statusRewriter answers to for from.
type statusRewriter struct {
	http.ResponseWriter
	from, to int
}

func (s *statusRewriter) WriteHeader(code int) {
	if code == s.from {
		code = s.to
	}
	s.ResponseWriter.WriteHeader(code)
}

// waitAgentRun serves GET /runs/{run}/wait: the run and the thread's
// values once it ended (or waits on interrupts).
func (h *Handler) waitAgentRun(w http.ResponseWriter, r *http.Request) {
	rec, ok := h.byRunID(w, r)
	if !ok {
		return
	}
	ss := h.Server.NewSession(rec.Thread)
	defer ss.Close()
	if _, _, err := ss.Subscribe(channels.Filter{Channels: []string{channels.Lifecycle}, Depth: 0}, server.SeqCursor(h.Server.LastSeq(rec.Thread))); err != nil {
		serverError(w, err)
		return
	}
	for !h.catalog.Run(rec.Thread, rec.ID).Ended() && !h.catalog.Run(rec.Thread, rec.ID).Waits {
		if _, err := ss.Next(r.Context()); err != nil {
			if r.Context().Err() == nil {
				fail(w, http.StatusServiceUnavailable, "the run's events: %v", err)
			}
			return
		}
	}
	if now, found, err := h.catalog.FindRun(r.Context(), rec.ID); err == nil && found {
		rec = now
	}
	st, _, err := h.Server.State(r.Context(), rec.Thread)
	if err != nil {
		serverError(w, err)
		return
	}
	write(w, http.StatusOK, LgAgentRunWait{Run: agentRun(rec), Values: orEmpty(st.Values)})
}

// searchAgentRuns serves POST /runs/search: the runs of the threads the
// caller may use (or of thread_id), newest first.
func (h *Handler) searchAgentRuns(w http.ResponseWriter, r *http.Request) {
	var req LgAgentRunSearch
	if !h.body(w, r, &req) {
		return
	}
	p := auth.FromContext(r.Context())
	var ids []string
	if req.ThreadID != nil {
		if !h.authorized(w, r, *req.ThreadID) {
			return
		}
		ids = []string{*req.ThreadID}
	} else {
		found, _, err := h.catalog.Search(r.Context(), p, threads.ThreadQuery{Limit: math.MaxInt32}, p == nil)
		if err != nil {
			serverError(w, err)
			return
		}
		for _, t := range found {
			ids = append(ids, t.ID)
		}
	}
	h.catalog.SyncRuns(r.Context())
	var all []server.RunRecord
	for _, t := range ids {
		runs, err := h.catalog.Runs(r.Context(), t)
		if err != nil {
			serverError(w, err)
			return
		}
		for _, rec := range runs {
			st := agentRun(rec).Status
			switch {
			case req.Status != nil && st != *req.Status,
				req.AgentID != nil && rec.Assistant != *req.AgentID && AssistantID(rec.Assistant) != *req.AgentID,
				req.Metadata != nil && !records.MetadataMatches(rec.Metadata, *req.Metadata):
				continue
			}
			all = append(all, rec)
		}
	}
	slices.SortStableFunc(all, func(a, b server.RunRecord) int { return b.CreatedAt.Compare(a.CreatedAt) })
	offset, limit := 0, 10
	if req.Offset != nil {
		offset = int(min(*req.Offset, 1<<31))
	}
	if req.Limit != nil {
		limit = int(*req.Limit)
	}
	out := []LgAgentRun{}
	for i := offset; i < len(all) && len(out) < limit; i++ {
		out = append(out, agentRun(all[i]))
	}
	write(w, http.StatusOK, out)
}

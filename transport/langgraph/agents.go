package langgraph

import (
	"net/http"
)

// The assistants' schemas, and the Agent Protocol's paths for assistants
// (agents). agentstream's assistants declare no schema: each is an
// object schema that takes any members.

func anyObject() map[string]any {
	return map[string]any{"type": "object", "additionalProperties": true}
}

// findAssistant is the assistant {id} names (its UUID or its name); it
// answers 404 itself.
func (h *Handler) findAssistant(w http.ResponseWriter, r *http.Request) (LgAssistant, bool) {
	id := r.PathValue("id")
	for _, a := range h.assistants() {
		if a.AssistantID == id || a.GraphID == id {
			return a, true
		}
	}
	fail(w, http.StatusNotFound, "Assistant %s not found", id)
	return LgAssistant{}, false
}

// assistantSchemas serves GET /assistants/{id}/schemas.
func (h *Handler) assistantSchemas(w http.ResponseWriter, r *http.Request) {
	if a, ok := h.findAssistant(w, r); ok {
		write(w, http.StatusOK, LgAssistantSchemas{GraphID: a.GraphID, InputSchema: anyObject(), OutputSchema: anyObject(), StateSchema: anyObject(),
			ConfigSchema: anyObject(), ContextSchema: anyObject()})
	}
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
	found := selectAssistants(h.assistants(), nil, req.Name, req.Metadata)
	offset, limit := 0, 10
	if req.Offset != nil {
		offset = int(min(*req.Offset, 1<<31))
	}
	if req.Limit != nil {
		limit = int(*req.Limit)
	}
	out := []LgAgent{}
	for i := offset; i < len(found) && len(out) < limit; i++ {
		out = append(out, agent(found[i]))
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

package langgraph

import (
	"context"
	"errors"
	"net/http"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
)

// assistantName is the assistant a run names: by its name, or by the
// UUID the Platform gives it.
func (h *Handler) assistantName(id string) (string, bool) {
	for _, n := range h.Server.Assistants() {
		if n == id || AssistantID(n) == id {
			return n, true
		}
	}
	return "", false
}

// waitRun serves POST /threads/{id}/runs/wait: the run starts on the
// thread (made when new), as the protocol's run.start starts it, and the
// answer is the thread's values once it has ended.
func (h *Handler) waitRun(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := server.ValidThreadID(id); err != nil {
		fail(w, http.StatusUnprocessableEntity, "thread_id: %v", err)
		return
	}
	h.runAndWait(w, r, id)
}

// waitStateless serves POST /runs/wait: the run on a new thread.
func (h *Handler) waitStateless(w http.ResponseWriter, r *http.Request) {
	h.runAndWait(w, r, server.NewUUID())
}

func (h *Handler) runAndWait(w http.ResponseWriter, r *http.Request, thread string) {
	var req LgRunCreate
	if !h.body(w, r, &req) {
		return
	}
	name, ok := h.assistantName(req.AssistantID)
	if !ok {
		fail(w, http.StatusNotFound, "Assistant %s not found", req.AssistantID)
		return
	}
	ctx := r.Context()
	p := auth.FromContext(ctx)
	if p != nil {
		if err := h.Server.Authorize(p, thread, true); err != nil {
			serverError(w, err)
			return
		}
	}
	// Its record, so that a Platform client lists it (a thread that
	// exists keeps its own).
	if _, _, err := h.Server.CreateThread(ctx, p, thread, nil, "do_nothing"); err != nil {
		serverError(w, err)
		return
	}
	ss := h.Server.NewSession(thread)
	defer ss.Close()
	if _, _, err := ss.Subscribe(channels.Filter{Channels: []string{channels.Lifecycle}, Depth: 0}, server.SeqCursor(h.Server.LastSeq(thread))); err != nil {
		serverError(w, err)
		return
	}
	params := protocol.RunStartParams{AssistantID: name, Input: req.Input}
	if req.Config != nil {
		params.Config = *req.Config
	}
	if req.Metadata != nil {
		params.Metadata = *req.Metadata
	}
	if req.MultitaskStrategy != nil {
		ms := protocol.MultitaskStrategy(*req.MultitaskStrategy)
		params.MultitaskStrategy = &ms
	}
	if _, err := h.Server.Do(ctx, thread, &protocol.ClientCommand{Value: &protocol.ClientCommandRunStart{ID: 1, Params: params}}); err != nil {
		var e *protocol.ErrorResponse
		if errors.As(err, &e) {
			status := http.StatusBadRequest
			if e.Extra["reason"] == server.ReasonThreadBusy {
				status = http.StatusConflict
			}
			fail(w, status, "%s", e.Message)
			return
		}
		serverError(w, err)
		return
	}
	var end *server.Event
	for end == nil {
		e, err := ss.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return // the client went; the run goes on (on_disconnect continue)
			}
			fail(w, http.StatusServiceUnavailable, "the run's events: %v", err)
			return
		}
		if e.EndsRun() {
			end = e
		}
	}
	st, _, err := h.Server.State(context.WithoutCancel(ctx), thread)
	if err != nil {
		serverError(w, err)
		return
	}
	if l, ok := end.Payload.(*protocol.ServerEventLifecycle); ok && l.Params.Data.Event == protocol.AgentStatusFailed {
		msg := "the run failed"
		if l.Params.Data.Error != nil {
			msg = *l.Params.Data.Error
		}
		write(w, http.StatusOK, map[string]any{"__error__": map[string]any{"error": "RunError", "message": msg}})
		return
	}
	write(w, http.StatusOK, orEmpty(st.Values))
}

package langgraph

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/threads"
)

// The routes that act on many at once: runs.createBatch, runs.cancelMany,
// threads.prune.

// maxBatch is the most runs one POST /runs/batch starts (LgRunBatch).
const maxBatch = 100

// createBatch serves POST /runs/batch: every run of the body is checked
// first, then each started in the background as POST /runs starts one;
// the answer lists them in order. A run that cannot start is answered
// (naming its place) with the runs before it started.
func (h *Handler) createBatch(w http.ResponseWriter, r *http.Request) {
	b, ok := h.ReadBody(w, r, maxBody, "request")
	if !ok {
		return
	}
	var items []json.RawMessage
	if err := json.Unmarshal(b, &items); err != nil {
		fail(w, http.StatusUnprocessableEntity, "a batch is a list of runs: %v", err)
		return
	}
	if len(items) == 0 || len(items) > maxBatch {
		fail(w, http.StatusUnprocessableEntity, "a batch holds 1 to %d runs, not %d", maxBatch, len(items))
		return
	}
	reqs := make([]*LgRunCreate, len(items))
	for i, it := range items {
		reqs[i] = &LgRunCreate{}
		it, err := snakeCased(it)
		if err != nil {
			fail(w, http.StatusUnprocessableEntity, "[%d]: %v", i, err)
			return
		}
		if err := decodeRequest(it, reqs[i]); err != nil {
			fail(w, http.StatusUnprocessableEntity, "[%d]: %v", i, err)
			return
		}
	}
	out := make([]LgRun, 0, len(reqs))
	for i, req := range reqs {
		thread, stateless := h.bodyThread(&prefixed{ResponseWriter: w, prefix: fmt.Sprintf("[%d]: ", i)}, req)
		if thread == "" {
			return
		}
		run, ok := h.runInBackground(&prefixed{ResponseWriter: w, prefix: fmt.Sprintf("[%d] (runs before it started): ", i)}, r, thread, stateless, req)
		if !ok {
			return
		}
		out = append(out, run)
	}
	write(w, http.StatusOK, out)
}

// batchAliases are the members the official SDK's runs.createBatch
// sends under their camelCase names (it spreads the caller's payload,
// adding assistant_id alone): each is read as its snake_case name, so
// that none is ignored (the reference server ignores them).
var batchAliases = map[string]string{
	"assistantId": "assistant_id", "threadId": "thread_id", "onCompletion": "on_completion", "multitaskStrategy": "multitask_strategy",
	"ifNotExists": "if_not_exists", "streamMode": "stream_mode", "streamSubgraphs": "stream_subgraphs", "streamResumable": "stream_resumable",
	"onDisconnect": "on_disconnect", "checkpointId": "checkpoint_id", "interruptBefore": "interrupt_before", "interruptAfter": "interrupt_after",
	"afterSeconds": "after_seconds", "feedbackKeys": "feedback_keys", "checkpointDuring": "checkpoint_during", "strictResume": "strict_resume",
}

// snakeCased is a batch item with its camelCase members renamed; one
// sent under both names with different values is refused.
func snakeCased(item json.RawMessage) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(item, &m); err != nil {
		return nil, fmt.Errorf("a run is an object: %v", err)
	}
	for camel, snake := range batchAliases {
		v, ok := m[camel]
		if !ok {
			continue
		}
		if other, both := m[snake]; both && string(other) != string(v) {
			return nil, fmt.Errorf("%s and %s differ", camel, snake)
		}
		m[snake] = v
		delete(m, camel)
	}
	return json.Marshal(m)
}

// prefixed is a response whose error detail (LgError) is prefixed, so
// that an error of one run of a batch names it.
type prefixed struct {
	http.ResponseWriter
	prefix string
	status int
}

func (p *prefixed) WriteHeader(code int) { p.status = code }

func (p *prefixed) Write(b []byte) (int, error) {
	var e LgError
	if p.status >= 400 && json.Unmarshal(b, &e) == nil && e.Detail != "" {
		fail(p.ResponseWriter, p.status, "%s%s", p.prefix, e.Detail)
		return len(b), nil
	}
	if p.status != 0 {
		p.ResponseWriter.WriteHeader(p.status)
		p.status = 0
	}
	return p.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (p *prefixed) Unwrap() http.ResponseWriter { return p.ResponseWriter }

// maxCancel is the most runs one POST /runs/cancel cancels.
const maxCancel = 1000

// cancelRuns serves POST /runs/cancel (runs.cancelMany): the runs named
// (of thread_id, or each found by its id), or those pending, running or
// both (status) of thread_id or of every thread the caller may use, are
// cancelled as POST .../cancel cancels one (action interrupt, or
// rollback: the state goes back and the run is deleted).
func (h *Handler) cancelRuns(w http.ResponseWriter, r *http.Request) {
	action := r.URL.Query().Get("action")
	if action != "" && action != "interrupt" && action != "rollback" {
		fail(w, http.StatusUnprocessableEntity, "action: interrupt or rollback")
		return
	}
	var req LgRunsCancel
	if !h.body(w, r, &req) {
		return
	}
	ctx := r.Context()
	type target struct{ thread, run string }
	var targets []target
	thread := ""
	if req.ThreadID != nil {
		thread = *req.ThreadID
		if err := server.ValidThreadID(thread); err != nil {
			fail(w, http.StatusUnprocessableEntity, "thread_id: %v", err)
			return
		}
	}
	switch {
	case len(req.RunIds) > 0 && req.Status != nil:
		fail(w, http.StatusUnprocessableEntity, "run_ids or status, not both")
		return
	case len(req.RunIds) > 0:
		for _, id := range req.RunIds {
			rec, found, err := h.catalog.FindRun(ctx, id)
			if err != nil {
				serverError(w, err)
				return
			}
			if !found || thread != "" && rec.Thread != thread {
				fail(w, http.StatusNotFound, "Run %s not found", id)
				return
			}
			targets = append(targets, target{rec.Thread, rec.ID})
		}
	case req.Status != nil:
		want := string(*req.Status)
		var ids []string
		if thread != "" {
			ids = []string{thread}
		} else {
			p := auth.FromContext(ctx)
			found, _, err := h.catalog.Search(ctx, p, threads.ThreadQuery{Status: "busy", Limit: maxCancel}, p == nil)
			if err != nil {
				serverError(w, err)
				return
			}
			for _, info := range found {
				ids = append(ids, info.ID)
			}
		}
		for _, th := range ids {
			runs, err := h.catalog.Runs(ctx, th)
			if err != nil {
				serverError(w, err)
				return
			}
			for _, rec := range runs {
				if rec.Status == want || want == "all" && rec.Open() {
					targets = append(targets, target{th, rec.ID})
				}
			}
		}
	default:
		fail(w, http.StatusUnprocessableEntity, "run_ids or status: which runs to cancel")
		return
	}
	if len(targets) > maxCancel {
		fail(w, http.StatusUnprocessableEntity, "%d runs: at most %d at once", len(targets), maxCancel)
		return
	}
	for _, t := range targets {
		if !h.mayChange(w, r, t.thread) {
			return // answered: nothing was cancelled
		}
	}
	for _, t := range targets {
		if action == "rollback" {
			ss := h.Server.NewSession(t.thread)
			if _, _, err := ss.Subscribe(channels.Filter{Channels: []string{channels.Lifecycle}, Depth: 0}, server.SeqCursor(h.Server.LastSeq(t.thread))); err != nil {
				ss.Close()
				serverError(w, err)
				return
			}
			h.catalog.RollbackRun(t.thread, t.run)
			for !h.catalog.Run(t.thread, t.run).Ended() && h.catalog.Run(t.thread, t.run).Current {
				if _, err := ss.Next(ctx); err != nil {
					break
				}
			}
			ss.Close()
			if err := h.catalog.DeleteRun(ctx, t.thread, t.run); err != nil {
				serverError(w, err)
				return
			}
			continue
		}
		run := t.run
		if _, err := h.Server.Do(ctx, t.thread, &protocol.ClientCommand{Value: &protocol.ClientCommandRunCancel{ID: 1, Params: protocol.RunCancelParams{RunID: &run}}}); err != nil {
			if e, ok := err.(*protocol.ErrorResponse); ok && e.Code == protocol.ErrorCodeNoSuchRun {
				continue // it ended meanwhile
			}
			serverError(w, err)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// pruneThreads serves POST /threads/prune (threads.prune): the threads
// named are deleted (those that do not exist, or the caller may not use,
// are left out of the count); one with a run going on is 409, before any
// is deleted.
func (h *Handler) pruneThreads(w http.ResponseWriter, r *http.Request) {
	var req LgThreadsPrune
	if !h.body(w, r, &req) {
		return
	}
	if req.Strategy != nil && *req.Strategy == "keep_latest" {
		fail(w, http.StatusUnprocessableEntity, "strategy: keep_latest is not served (the engines keep a thread's checkpoints whole); delete is")
		return
	}
	ctx := r.Context()
	var ids []string
	for _, id := range req.ThreadIds {
		if err := server.ValidThreadID(id); err != nil {
			fail(w, http.StatusUnprocessableEntity, "thread_ids: %v", err)
			return
		}
		if !h.mayChange(w, r, id) {
			return
		}
		info, found, err := h.catalog.Get(ctx, id)
		if err != nil {
			serverError(w, err)
			return
		}
		if !found {
			continue
		}
		if info.Status == "busy" {
			fail(w, http.StatusConflict, "thread %s has a run going on: nothing was pruned", id)
			return
		}
		ids = append(ids, id)
	}
	pruned := uint64(0)
	for _, id := range ids {
		ok, err := h.catalog.Delete(ctx, id)
		if err != nil {
			serverError(w, err)
			return
		}
		if ok {
			pruned++
		}
	}
	write(w, http.StatusOK, LgThreadsPruned{PrunedCount: pruned})
}

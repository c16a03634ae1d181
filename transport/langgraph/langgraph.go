package langgraph

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/runtime/cddlrt"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/items"
	"github.com/agentstream/agentstream/server/registry"
	"github.com/agentstream/agentstream/server/threads"
	"github.com/agentstream/agentstream/transport/internal/httpjson"
	"github.com/agentstream/agentstream/transport/wire"
)

// maxBody bounds a request's body.
const maxBody = 1 << 20

// Handler serves the Platform API's resource routes.
type Handler struct {
	wire.Context
	started time.Time  // the assistants' created_at: when the wire started
	views   *viewCache // replayed events' views, shared by their readers
	// catalog, store and registry are the server's Platform resources:
	// its threads and their runs, the store's items, the assistants.
	catalog  *threads.Catalog
	store    *items.Store
	registry *registry.Registry
	webhooks *webhooks
}

// New returns the wire's handler on c.Server, its webhooks bounded by
// the defaults (NewWithWebhooks).
func New(c wire.Context) *Handler { return NewWithWebhooks(c, WebhookOptions{}) }

// NewWithWebhooks is New with the runs' webhooks bounded by wo; they stop
// when the server closes.
func NewWithWebhooks(c wire.Context, wo WebhookOptions) *Handler {
	c = c.WithDefaults()
	h := &Handler{Context: c, started: time.Now().UTC(), views: newViewCache(maxViewBytes),
		catalog: threads.Of(c.Server), store: items.Of(c.Server), registry: registry.Of(c.Server),
		webhooks: newWebhooks(wo, c.Observer.Webhook)}
	c.Server.Resources().OnClose(func(context.Context) { h.webhooks.close() })
	return h
}

// Routes are the wire's routes. Reads of lists and of an assistant are
// reads; what creates or changes a thread is a command's.
func (h *Handler) Routes() []wire.Route {
	// A route of one thread (/threads/{id}...) has its id checked by the
	// transport (422 for one that is no thread's, as the Platform
	// answers); its handler asks Allowed for the thread as it comes to use
	// it (authorizedThread, mayChange).
	route := func(method, pattern string, kind wire.Kind, f http.HandlerFunc, query ...string) wire.Route {
		oneThread := strings.HasPrefix(pattern, "/threads/{id}")
		f = queryServed(f, query)
		if kind == wire.CommandRoute {
			f = h.keeping(f) // a write's 2xx waits until it is kept
		}
		return wire.Route{Method: method, Pattern: pattern, Kind: kind, Handler: f, Outer: errorShape,
			PathThread: oneThread, HandlerAuthorizes: oneThread, BadThreadStatus: http.StatusUnprocessableEntity}
	}
	return []wire.Route{
		route("GET", "/ok", wire.ReadRoute, h.ok),
		route("GET", "/info", wire.ReadRoute, h.info),
		route("POST", "/threads", wire.CommandRoute, h.createThread),
		route("GET", "/threads/{id}", wire.ReadRoute, h.getThread),
		route("PATCH", "/threads/{id}", wire.CommandRoute, h.patchThread),
		route("DELETE", "/threads/{id}", wire.CommandRoute, h.deleteThread),
		route("POST", "/threads/search", wire.ReadRoute, h.searchThreads),
		route("POST", "/threads/count", wire.ReadRoute, h.countThreads),
		route("POST", "/assistants", wire.CommandRoute, h.createAssistant),
		route("PATCH", "/assistants/{id}", wire.CommandRoute, h.patchAssistant),
		route("DELETE", "/assistants/{id}", wire.CommandRoute, h.deleteAssistant, "delete_threads"),
		route("POST", "/assistants/{id}/versions", wire.ReadRoute, h.assistantVersions),
		route("POST", "/assistants/{id}/latest", wire.CommandRoute, h.latestAssistant),
		route("POST", "/assistants/search", wire.ReadRoute, h.searchAssistants),
		route("POST", "/assistants/count", wire.ReadRoute, h.countAssistants),
		route("GET", "/assistants/{id}", wire.ReadRoute, h.getAssistant),
		route("GET", "/assistants/{id}/schemas", wire.ReadRoute, h.assistantSchemas),
		route("GET", "/assistants/{id}/graph", wire.ReadRoute, h.assistantGraph, "xray"),
		route("POST", "/agents/search", wire.ReadRoute, h.searchAgents),
		route("GET", "/agents/{id}", wire.ReadRoute, h.getAgent),
		route("GET", "/agents/{id}/schemas", wire.ReadRoute, h.agentSchemas),
		route("GET", "/runs/{run}", wire.ReadRoute, h.getAgentRun),
		route("DELETE", "/runs/{run}", wire.CommandRoute, h.deleteAgentRun),
		route("GET", "/runs/{run}/wait", wire.ReadRoute, h.waitAgentRun),
		route("POST", "/runs/{run}/cancel", wire.CommandRoute, h.cancelAgentRun, "wait", "action"),
		route("POST", "/runs/search", wire.ReadRoute, h.searchAgentRuns),
		route("POST", "/threads/{id}/runs/wait", wire.CommandRoute, h.waitRun),
		route("POST", "/runs/wait", wire.CommandRoute, h.waitStateless),
		route("POST", "/runs", wire.CommandRoute, h.createStateless),
		route("POST", "/runs/batch", wire.CommandRoute, h.createBatch),
		route("POST", "/runs/cancel", wire.CommandRoute, h.cancelRuns, "action"),
		route("POST", "/threads/prune", wire.CommandRoute, h.pruneThreads),
		route("POST", "/threads/{id}/runs/stream", wire.StreamRoute, h.streamRun),
		route("POST", "/runs/stream", wire.StreamRoute, h.streamStateless),
		route("GET", "/threads/{id}/runs/{run}/stream", wire.StreamRoute, h.joinStream, "stream_mode", "stream_subgraphs", "cancel_on_disconnect", "checkpoint_id"),
		route("POST", "/threads/{id}/runs/{run}/stream", wire.StreamRoute, h.joinStream, "stream_mode", "stream_subgraphs", "cancel_on_disconnect", "checkpoint_id"),
		route("GET", "/runs/{run}/stream", wire.StreamRoute, h.joinStream, "stream_mode", "stream_subgraphs", "cancel_on_disconnect", "checkpoint_id"),
		route("DELETE", "/threads/{id}/runs/{run}", wire.CommandRoute, h.deleteRun),
		route("POST", "/threads/{id}/runs", wire.CommandRoute, h.createRun),
		route("GET", "/threads/{id}/runs", wire.ReadRoute, h.listRuns, "limit", "offset", "status", "select"),
		route("GET", "/threads/{id}/runs/{run}", wire.ReadRoute, h.getRun),
		route("GET", "/threads/{id}/runs/{run}/join", wire.ReadRoute, h.joinRun, "cancel_on_disconnect"),
		route("POST", "/threads/{id}/runs/{run}/cancel", wire.CommandRoute, h.cancelRun, "wait", "action"),
		route("GET", "/threads/{id}/history", wire.ReadRoute, h.history, "limit", "before", "select"),
		route("POST", "/threads/{id}/history", wire.ReadRoute, h.history, "select"),
		route("POST", "/threads/{id}/copy", wire.CommandRoute, h.copyThread),
		route("GET", "/threads/{id}/state", wire.ReadRoute, h.getState, "subgraphs", "select"),
		route("GET", "/threads/{id}/state/{checkpoint}", wire.ReadRoute, h.getState, "subgraphs", "select"),
		route("POST", "/threads/{id}/state/checkpoint", wire.ReadRoute, h.getStateAt),
		route("POST", "/threads/{id}/state", wire.CommandRoute, h.updateState),
		route("PATCH", "/threads/{id}/state", wire.CommandRoute, h.patchState),
		route("PUT", "/store/items", wire.CommandRoute, h.putItem),
		route("GET", "/store/items", wire.ReadRoute, h.getItem, "namespace", "key", "refresh_ttl"),
		route("DELETE", "/store/items", wire.CommandRoute, h.deleteItem),
		route("POST", "/store/items/search", wire.ReadRoute, h.searchItems),
		route("POST", "/store/namespaces", wire.ReadRoute, h.listNamespaces),
	}
}

// queryServed refuses (422, naming them) the query members of a request
// its route does not serve (served lists those it does; access_token, a
// credential, is the transport's), so that none is taken and ignored.
func queryServed(f http.HandlerFunc, served []string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var not []string
		for k := range r.URL.Query() {
			if k != "access_token" && !slices.Contains(served, k) {
				not = append(not, k)
			}
		}
		if len(not) > 0 {
			slices.Sort(not)
			ok := "none"
			if len(served) > 0 {
				ok = strings.Join(served, ", ")
			}
			fail(w, http.StatusUnprocessableEntity, "query %s: not served by this route (it takes: %s)", strings.Join(not, ", "), ok)
			return
		}
		f(w, r)
	}
}

// fail answers an error as the Platform does: {"detail": ...}.
func fail(w http.ResponseWriter, status int, format string, args ...any) {
	write(w, status, LgError{Detail: fmt.Sprintf(format, args...)})
}

func write(w http.ResponseWriter, status int, v any) { writeJSON(w, status, v) }

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// serverError answers an error of the server's core with its status:
// the one table (httpjson.Refusal), but where the Platform answers
// otherwise (platformStatus).
func serverError(w http.ResponseWriter, err error) {
	status, _ := httpjson.Refusal(err)
	detail := err.Error()
	for _, o := range platformStatus {
		if errors.Is(err, o.err) {
			status = o.status
			if o.detail != "" {
				detail = o.detail
			}
			break
		}
	}
	fail(w, status, "%s", detail)
}

// platformStatus are the errors the reference Platform server answers
// otherwise than the core's table, first match first: a missing namespace
// is 400 with its message, a thread id or a store namespace its schema
// refuses 422.
var platformStatus = []struct {
	err    error
	status int
	detail string // the reference's message, when the wire says it
}{
	{server.ErrNoNamespace, http.StatusBadRequest, "Namespace is required"},
	{server.ErrItemNamespace, http.StatusUnprocessableEntity, ""},
	{server.ErrThreadID, http.StatusUnprocessableEntity, ""},
}

// body reads and strictly decodes a JSON body (an empty one is {}) into
// v, a request of its rule, and validates it: 422 as the Platform answers
// a body its schema refuses.
func (h *Handler) body(w http.ResponseWriter, r *http.Request, v interface{ Validate() error }) bool {
	b, ok := h.ReadBody(w, r, maxBody, "request")
	if !ok {
		return false
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		b = []byte("{}")
	}
	if err := decodeRequest(b, v); err != nil {
		fail(w, http.StatusUnprocessableEntity, "%v", err)
		return false
	}
	return true
}

// decodeRequest strictly decodes b into v, validates it and refuses the
// members it does not serve.
func decodeRequest(b []byte, v interface{ Validate() error }) error {
	if err := cddlrt.DecodeStrictJSON(b, v); err != nil {
		return err
	}
	if err := v.Validate(); err != nil {
		return err
	}
	return unserved(v)
}

// now is the time (the server's clock).
func (h *Handler) now() time.Time { return time.Now().UTC() }

// stamp is a time as the Platform writes it.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// thread is info as the wire shows it; full adds its values and
// interrupts once it has values.
func thread(info threads.ThreadInfo, full bool) LgThread {
	t := LgThread{ThreadID: info.ID, CreatedAt: stamp(info.CreatedAt), UpdatedAt: stamp(info.UpdatedAt),
		Metadata: orEmpty(info.Metadata), Status: LgThreadStatus(info.Status), Config: orEmpty(info.Config)}
	if full && (info.Values != nil || len(info.Interrupts) > 0) { // a thread with no state yet has neither, as the Platform shows it
		v := LgThreadValues(orEmpty(info.Values))
		t.Values = &v
		t.Interrupts = map[string][]LgInterrupt{}
		for _, in := range info.Interrupts {
			task := "agent"
			if len(in.Namespace) > 0 {
				task = strings.Join(in.Namespace, "|")
			}
			t.Interrupts[task] = append(t.Interrupts[task], LgInterrupt{ID: in.ID, Value: in.Payload})
		}
	}
	return t
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// createThread serves POST /threads.
func (h *Handler) createThread(w http.ResponseWriter, r *http.Request) {
	var req LgThreadCreate
	if !h.body(w, r, &req) {
		return
	}
	id, ifExists := "", "raise"
	if req.ThreadID != nil {
		id = *req.ThreadID
		if err := server.ValidThreadID(id); err != nil {
			fail(w, http.StatusUnprocessableEntity, "thread_id: %v", err)
			return
		}
	}
	if req.IfExists != nil {
		ifExists = string(*req.IfExists)
	}
	var md map[string]any
	if req.Metadata != nil {
		md = *req.Metadata
	}
	ttl, ok := ttlOf(w, req.TTL)
	if !ok {
		return
	}
	info, created, err := h.catalog.Create(r.Context(), auth.FromContext(r.Context()), id, md, ifExists)
	if err == nil && created && ttl > 0 {
		info, _, err = h.catalog.SetTTL(r.Context(), info.ID, ttl)
	}
	if err != nil {
		serverError(w, err)
		return
	}
	write(w, http.StatusOK, thread(info, false))
}

// ttlOf is a thread's ttl (minutes) as a duration; it answers one it
// cannot serve itself (ok false).
func ttlOf(w http.ResponseWriter, t *LgThreadTTL) (time.Duration, bool) {
	if t == nil {
		return 0, true
	}
	if t.TTL > float64(math.MaxInt64/int64(time.Minute)) {
		fail(w, http.StatusUnprocessableEntity, "ttl.ttl: at most %d minutes", math.MaxInt64/int64(time.Minute))
		return 0, false
	}
	d := time.Duration(t.TTL * float64(time.Minute))
	if d < time.Second {
		fail(w, http.StatusUnprocessableEntity, "ttl.ttl: at least 1 second (%g minutes); leave it out for a thread that does not expire", 1.0/60)
		return 0, false
	}
	return d, true
}

// authorized asks whether the request may use an existing thread it
// names elsewhere than in its path (a run's, a search's thread_id).
func (h *Handler) authorized(w http.ResponseWriter, r *http.Request, id string) bool {
	if err := server.ValidThreadID(id); err != nil {
		fail(w, http.StatusUnprocessableEntity, "thread_id: %v", err)
		return false
	}
	return h.Allowed(w, r, id, false)
}

// mayChange checks that the caller may change thread (make it, run on it,
// change its state or runs): authorized for a command, as the protocol's
// commands are.
func (h *Handler) mayChange(w http.ResponseWriter, r *http.Request, thread string) bool {
	return h.Allowed(w, r, thread, true)
}

// getThread serves GET /threads/{id}.
func (h *Handler) getThread(w http.ResponseWriter, r *http.Request) {
	id, ok := h.authorizedThread(w, r)
	if !ok {
		return
	}
	info, ok, err := h.catalog.Get(r.Context(), id)
	answerThread(w, id, info, ok, err, true)
}

// answerThread answers a thread read or changed (full: with its values):
// the error, 404 when it does not exist, or the thread.
func answerThread(w http.ResponseWriter, id string, info threads.ThreadInfo, ok bool, err error, full bool) {
	switch {
	case err != nil:
		serverError(w, err)
	case !ok:
		fail(w, http.StatusNotFound, "Thread with ID %s not found", id)
	default:
		write(w, http.StatusOK, thread(info, full))
	}
}

// patchThread serves PATCH /threads/{id}.
func (h *Handler) patchThread(w http.ResponseWriter, r *http.Request) {
	id, ok := h.authorizedThread(w, r)
	if !ok {
		return
	}
	var req LgThreadPatch
	if !h.body(w, r, &req) {
		return
	}
	var md map[string]any
	if req.Metadata != nil {
		md = *req.Metadata
	}
	ttl, ok := ttlOf(w, req.TTL)
	if !ok {
		return
	}
	info, ok, err := h.catalog.Update(r.Context(), id, md)
	if err == nil && ok && ttl > 0 {
		info, ok, err = h.catalog.SetTTL(r.Context(), id, ttl)
	}
	if err == nil && ok && r.Header.Get("Prefer") == "return=minimal" {
		w.WriteHeader(http.StatusNoContent) // the SDK's returnMinimal
		return
	}
	answerThread(w, id, info, ok, err, false)
}

// deleteThread serves DELETE /threads/{id}.
func (h *Handler) deleteThread(w http.ResponseWriter, r *http.Request) {
	id, ok := h.authorizedThread(w, r)
	if !ok {
		return
	}
	ok, err := h.catalog.Delete(r.Context(), id)
	switch {
	case err != nil:
		serverError(w, err)
	case !ok:
		fail(w, http.StatusNotFound, "Thread with ID %s not found", id)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// query is a search's or a count's selection.
func query(md, values *map[string]any, status *LgThreadStatus) threads.ThreadQuery {
	var q threads.ThreadQuery
	if md != nil {
		q.Metadata = *md
	}
	if values != nil {
		q.Values = *values
	}
	if status != nil {
		q.Status = string(*status)
	}
	return q
}

// searchThreads serves POST /threads/search: the threads the caller may
// use that the query selects.
func (h *Handler) searchThreads(w http.ResponseWriter, r *http.Request) {
	var req LgThreadSearch
	if !h.body(w, r, &req) {
		return
	}
	q := query((*map[string]any)(req.Metadata), (*map[string]any)(req.Values), req.Status)
	if req.Ids != nil {
		q.IDs = req.Ids
	}
	if req.Limit != nil {
		q.Limit = int(*req.Limit)
	}
	if req.Offset != nil {
		q.Offset = int(min(*req.Offset, 1<<31))
	}
	if req.SortBy != nil {
		q.SortBy = string(*req.SortBy)
	}
	if req.SortOrder != nil {
		q.SortOrder = string(*req.SortOrder)
	}
	p := auth.FromContext(r.Context())
	found, total, err := h.catalog.Search(r.Context(), p, q, p == nil)
	if err != nil {
		serverError(w, err)
		return
	}
	paginate(w, q.Offset, len(found), total)
	if len(req.Select) == 0 {
		out := make([]LgThread, len(found))
		for i, info := range found {
			out[i] = thread(info, true)
		}
		write(w, http.StatusOK, out)
		return
	}
	out := make([]map[string]any, len(found))
	for i, info := range found {
		out[i] = selected(thread(info, true), req.Select)
	}
	write(w, http.StatusOK, out)
}

// paginate sets the headers of a page of a search: X-Pagination-Total,
// how many the search selects in all, and X-Pagination-Next, the offset
// of the next page when there is one.
func paginate(w http.ResponseWriter, offset, n, total int) {
	w.Header().Set("X-Pagination-Total", strconv.Itoa(total))
	if next := offset + n; n > 0 && next < total {
		w.Header().Set("X-Pagination-Next", strconv.Itoa(next))
	}
}

// selected is the members of th that fields name.
func selected(th LgThread, fields []LgThreadField) map[string]any {
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = string(f)
	}
	return pick(th, names)
}

// pick is the members of v (an answer) that fields name: a member, or
// "values.KEY" for one member of its values (a state's select).
func pick(v any, fields []string) map[string]any {
	b, _ := json.Marshal(v)
	var all map[string]any
	_ = json.Unmarshal(b, &all)
	out := make(map[string]any, len(fields))
	for _, f := range fields {
		if key, ok := strings.CutPrefix(f, "values."); ok {
			values, _ := all["values"].(map[string]any)
			sel, _ := out["values"].(map[string]any)
			if sel == nil {
				sel = map[string]any{}
				out["values"] = sel
			}
			if x, ok := values[key]; ok {
				sel[key] = x
			}
			continue
		}
		if x, ok := all[f]; ok {
			out[f] = x
		}
	}
	return out
}

// checkSelect refuses a select naming a member the answer does not have
// (known: the members; values says "values.KEY" is taken too).
func checkSelect(w http.ResponseWriter, fields []string, values bool, known ...string) bool {
	for _, f := range fields {
		if values && strings.HasPrefix(f, "values.") && len(f) > len("values.") {
			continue
		}
		if !slices.Contains(known, f) {
			fail(w, http.StatusUnprocessableEntity, "select: %q is not one of %s", f, strings.Join(known, ", "))
			return false
		}
	}
	return true
}

// querySelect is a query's select: repeated, or comma-separated.
func querySelect(r *http.Request) []string {
	var out []string
	for _, v := range r.URL.Query()["select"] {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				out = append(out, f)
			}
		}
	}
	return out
}

// stateFields and runFields are what a state's and a run's select name.
var (
	stateFields = []string{"values", "next", "tasks", "checkpoint", "metadata", "created_at", "parent_checkpoint", "interrupts"}
	runFields   = []string{"run_id", "thread_id", "assistant_id", "created_at", "updated_at", "status", "metadata", "kwargs", "multitask_strategy"}
)

// countThreads serves POST /threads/count.
func (h *Handler) countThreads(w http.ResponseWriter, r *http.Request) {
	var req LgThreadCount
	if !h.body(w, r, &req) {
		return
	}
	q := query((*map[string]any)(req.Metadata), (*map[string]any)(req.Values), req.Status)
	q.Limit = 1
	p := auth.FromContext(r.Context())
	_, total, err := h.catalog.Search(r.Context(), p, q, p == nil)
	if err != nil {
		serverError(w, err)
		return
	}
	write(w, http.StatusOK, total)
}

// AssistantID is the Platform's id of the assistant of graph (its name).
func AssistantID(graph string) string { return registry.GraphAssistantID(graph) }

// searchAssistants serves POST /assistants/search.
func (h *Handler) searchAssistants(w http.ResponseWriter, r *http.Request) {
	var req LgAssistantSearch
	if !h.body(w, r, &req) {
		return
	}
	if !checkSelect(w, req.Select, false, "assistant_id", "graph_id", "name", "description", "config", "context", "created_at", "updated_at", "metadata", "version") {
		return
	}
	q := assistantQuery(req.GraphID, req.Name, req.Metadata)
	q.Limit = 10
	if req.Limit != nil {
		q.Limit = int(*req.Limit)
	}
	if req.Offset != nil {
		q.Offset = int(min(*req.Offset, 1<<31))
	}
	if req.SortBy != nil {
		q.SortBy = string(*req.SortBy)
	}
	if req.SortOrder != nil {
		q.SortOrder = string(*req.SortOrder)
	}
	found, total, err := h.registry.Search(r.Context(), auth.FromContext(r.Context()), q)
	if err != nil {
		assistantError(w, err)
		return
	}
	paginate(w, q.Offset, len(found), total)
	out := make([]any, len(found))
	for i, a := range found {
		out[i] = lgAssistant(a)
		if len(req.Select) > 0 {
			out[i] = pick(out[i], req.Select)
		}
	}
	write(w, http.StatusOK, out)
}

// assistantQuery selects assistants by graph, name and metadata.
func assistantQuery(graph, name *string, md *LgMetadata) registry.Query {
	var q registry.Query
	if graph != nil {
		q.GraphID = *graph
	}
	if name != nil {
		q.Name = *name
	}
	if md != nil {
		q.Metadata = *md
	}
	return q
}

// countAssistants serves POST /assistants/count.
func (h *Handler) countAssistants(w http.ResponseWriter, r *http.Request) {
	var req LgAssistantCount
	if !h.body(w, r, &req) {
		return
	}
	q := assistantQuery(req.GraphID, req.Name, req.Metadata)
	q.Limit = 1
	_, total, err := h.registry.Search(r.Context(), auth.FromContext(r.Context()), q)
	if err != nil {
		assistantError(w, err)
		return
	}
	write(w, http.StatusOK, total)
}

// getAssistant serves GET /assistants/{id}: by its UUID or its name.
func (h *Handler) getAssistant(w http.ResponseWriter, r *http.Request) {
	if a, ok := h.findAssistant(w, r); ok {
		write(w, http.StatusOK, a)
	}
}

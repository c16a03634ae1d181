package instanceai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/runtime/cddlrt"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport/internal/httpjson"
	"github.com/agentstream/agentstream/transport/wire"
)

// DefaultAssistant answers the chat unless Options.Assistant names
// another: the built-in demo, so that the wire works on a first start.
const DefaultAssistant = "demo"

// Options are the wire's own settings (its Context has the transport's).
type Options struct {
	// Assistant is the assistant a chat message runs (DefaultAssistant).
	Assistant string
	// SnapshotTimeout bounds reading a thread's events for its messages
	// and status (5 s).
	SnapshotTimeout time.Duration
}

// maxBody caps a request's body.
const maxBody = 1 << 20

// Handler serves the Instance AI routes.
type Handler struct {
	wire.Context
	opts Options
}

// New returns the Instance AI handler on c.Server, its streams served by
// c.Streams.
func New(c wire.Context, opts Options) *Handler {
	if opts.Assistant == "" {
		opts.Assistant = DefaultAssistant
	}
	if opts.SnapshotTimeout <= 0 {
		opts.SnapshotTimeout = 5 * time.Second
	}
	return &Handler{Context: c.WithDefaults(), opts: opts}
}

// Routes are Instance AI's routes: the event stream, the commands that
// change a thread, the reads of one.
func (h *Handler) Routes() []wire.Route {
	return []wire.Route{
		{Method: "POST", Pattern: "/instance-ai/chat/{threadId}", Kind: wire.CommandRoute, Handler: http.HandlerFunc(h.chat)},
		{Method: "POST", Pattern: "/instance-ai/chat/{threadId}/cancel", Kind: wire.CommandRoute, Handler: http.HandlerFunc(h.cancel)},
		{Method: "POST", Pattern: "/instance-ai/confirm/{requestId}", Kind: wire.CommandRoute, Handler: http.HandlerFunc(h.confirm)},
		{Method: "GET", Pattern: "/instance-ai/events/{threadId}", Kind: wire.StreamRoute, Handler: http.HandlerFunc(h.events)},
		{Method: "GET", Pattern: "/instance-ai/threads/{threadId}/messages", Kind: wire.ReadRoute, Handler: http.HandlerFunc(h.messages)},
		{Method: "GET", Pattern: "/instance-ai/threads/{threadId}/status", Kind: wire.ReadRoute, Handler: http.HandlerFunc(h.status)},
	}
}

// thread reads the thread of the path and asks whether the request may
// use it; it answers the request itself when not.
func (h *Handler) thread(w http.ResponseWriter, r *http.Request, thread string, create bool) bool {
	return h.Thread(w, r, "threadId", thread, create)
}

// exists answers whether the thread is known (a read of an unknown thread
// gets the empty answer), or answers 503 itself.
func (h *Handler) exists(w http.ResponseWriter, r *http.Request, thread string) (known, ok bool) {
	known, err := h.Server.HasThread(r.Context(), thread)
	if err != nil {
		httpjson.Write(w, http.StatusServiceUnavailable, protocol.NewError(nil, protocol.ErrorCodeUnavailable, "%v", err))
		return false, false
	}
	return known, true
}

// readBody reads and strictly decodes a JSON body into v.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, v any) bool {
	body, ok := h.ReadBody(w, r, maxBody, "request")
	if !ok {
		return false
	}
	if err := cddlrt.DecodeStrictJSON(body, v); err != nil {
		httpjson.Write(w, http.StatusBadRequest, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "%v", err))
		return false
	}
	return true
}

// chat serves POST /instance-ai/chat/{threadId}: the message starts a run
// of the assistant; one run at a time (409 while one is active, waiting
// for a confirmation included).
func (h *Handler) chat(w http.ResponseWriter, r *http.Request) {
	thread := r.PathValue("threadId")
	var req IaChatRequest
	if !h.thread(w, r, thread, true) || !h.readBody(w, r, &req) {
		return
	}
	if st, ok, err := h.Server.State(r.Context(), thread); err != nil {
		httpjson.Write(w, http.StatusServiceUnavailable, protocol.NewError(nil, protocol.ErrorCodeUnavailable, "%v", err))
		return
	} else if ok && st.Status != "idle" {
		// A run waiting for a confirmation would take the message as its
		// answer: refused like a running one.
		httpjson.Write(w, http.StatusConflict, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "thread %s has an active run (%s): cancel it or wait for its run-finish", thread, st.Status))
		return
	}
	ss := h.Server.NewSession(thread)
	defer ss.Close()
	reject := protocol.MultitaskStrategyReject
	input := map[string]any{"messages": []any{map[string]any{"role": "user", "content": req.Message}}}
	resp, err := ss.Do(r.Context(), &protocol.ClientCommand{Value: &protocol.ClientCommandRunStart{ID: 1,
		Params: protocol.RunStartParams{AssistantID: h.opts.Assistant, Input: input, MultitaskStrategy: &reject}}})
	if err != nil {
		status, e := httpjson.CommandError(err)
		httpjson.Write(w, status, e)
		return
	}
	// The run's root started event follows the last one before the
	// command at once (run.start publishes it under the thread's lock).
	applied := uint64(0)
	if resp.Meta != nil && resp.Meta.AppliedThroughSeq != nil {
		applied = *resp.Meta.AppliedThroughSeq
	}
	runID := "run-" + strconv.FormatUint(applied+1, 10)
	// The user's side of the conversation, for the thread's messages. The
	// run is under way whatever becomes of it: a failure to keep it
	// leaves the rebuilt messages without it, said in the answer.
	name := UserMessageEvent
	ev := protocol.ProducerEvent{Event: &protocol.ServerEventCustom{Params: protocol.EventCustomParams{Namespace: protocol.Namespace{},
		Data: protocol.CustomData{Name: &name, Payload: userMessage{RunID: runID, Text: req.Message}}}}}
	if _, err := h.Server.Publish(r.Context(), thread, server.ProducerBatch{Events: []protocol.ProducerEvent{ev}}); err != nil {
		w.Header().Set("Agentstream-Warning", fmt.Sprintf("the message was not kept for the thread's history: %v", err))
	}
	httpjson.Write(w, http.StatusOK, IaChatStarted{RunID: runID})
}

// cancel serves POST /instance-ai/chat/{threadId}/cancel: idempotent; the
// run ends with run-finish cancelled.
func (h *Handler) cancel(w http.ResponseWriter, r *http.Request) {
	thread := r.PathValue("threadId")
	if !wire.ValidThread(w, "threadId", thread) {
		return
	}
	known, ok := h.exists(w, r, thread)
	if !ok {
		return
	}
	if !known {
		httpjson.Write(w, http.StatusOK, IaCancelled{Cancelled: false})
		return
	}
	if !h.thread(w, r, thread, false) {
		return
	}
	ss := h.Server.NewSession(thread)
	defer ss.Close()
	resp, err := ss.Do(r.Context(), &protocol.ClientCommand{Value: &protocol.ClientCommandRunCancel{ID: 1}})
	if err != nil {
		status, e := httpjson.CommandError(err)
		httpjson.Write(w, status, e)
		return
	}
	// The result as any node answers it (a forwarded command's is JSON).
	var res struct{ Cancelled bool }
	if b, err := json.Marshal(resp.Result); err == nil {
		_ = json.Unmarshal(b, &res)
	}
	httpjson.Write(w, http.StatusOK, IaCancelled{Cancelled: res.Cancelled})
}

// confirm serves POST /instance-ai/confirm/{requestId}: the answer to a
// confirmation-request resumes its run.
func (h *Handler) confirm(w http.ResponseWriter, r *http.Request) {
	thread, interruptID, ok := splitRequestID(r.PathValue("requestId"))
	if !ok {
		httpjson.Write(w, http.StatusBadRequest, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "requestId: not one a confirmation-request gave"))
		return
	}
	var req IaConfirmRequest
	if !h.thread(w, r, thread, false) || !h.readBody(w, r, &req) {
		return
	}
	st, known, err := h.Server.State(r.Context(), thread)
	if err != nil {
		httpjson.Write(w, http.StatusServiceUnavailable, protocol.NewError(nil, protocol.ErrorCodeUnavailable, "%v", err))
		return
	}
	var ns channels.Namespace
	found := false
	for _, in := range st.Interrupts {
		if in.ID == interruptID {
			ns, found = in.Namespace, true
		}
	}
	if !known || !found {
		httpjson.Write(w, http.StatusNotFound, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "no confirmation %s is waiting (answered already, or its run ended)", r.PathValue("requestId")))
		return
	}
	answer := map[string]any{"approved": req.Approved}
	for k, v := range req.Extra {
		answer[k] = v
	}
	ss := h.Server.NewSession(thread)
	defer ss.Close()
	respond := &protocol.InputRespondOne{Namespace: protocol.Namespace(ns), InterruptID: interruptID, Response: answer}
	if respond.Namespace == nil {
		respond.Namespace = protocol.Namespace{}
	}
	if _, err := ss.Do(r.Context(), &protocol.ClientCommand{Value: &protocol.ClientCommandInputRespond{ID: 1,
		Params: protocol.InputRespondParams{Value: respond}}}); err != nil {
		status, e := httpjson.CommandError(err)
		httpjson.Write(w, status, e)
		return
	}
	httpjson.Write(w, http.StatusOK, IaOk{Ok: true})
}

// streamChannels are the channels the wire's events come from.
var streamChannels = []string{channels.Lifecycle, channels.Messages, channels.Tools, channels.Input, channels.Custom}

// events serves GET /instance-ai/events/{threadId}.
func (h *Handler) events(w http.ResponseWriter, r *http.Request) {
	thread := r.PathValue("threadId")
	if !h.thread(w, r, thread, true) {
		return
	}
	after := uint64(0)
	cursor, from := r.Header.Get("Last-Event-ID"), "Last-Event-ID"
	if cursor == "" {
		cursor, from = r.URL.Query().Get("lastEventId"), "lastEventId"
	}
	if cursor != "" {
		n, err := strconv.ParseUint(cursor, 10, 64)
		if err != nil {
			httpjson.Write(w, http.StatusBadRequest, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "%s: an event id (a whole number), not %q", from, cursor))
			return
		}
		after = n
	}
	ss := h.Server.NewSession(thread)
	// Every event the server keeps is read, those up to the cursor too:
	// an event's runId and agentId come from the run-start before it.
	if _, _, err := ss.Subscribe(channels.Filter{Channels: streamChannels, Depth: channels.Unlimited}, server.SeqCursor(0)); err != nil {
		ss.Close()
		httpjson.Write(w, http.StatusServiceUnavailable, protocol.NewError(nil, protocol.ErrorCodeUnavailable, "%v", err))
		return
	}
	st := wire.Stream{Frames: &frames{tr: newTranslator(thread), after: after}, Heartbeat: ": keep-alive\n\n", HeartbeatEvery: h.Heartbeat}
	if last := h.Server.LastSeq(thread); after > last {
		// From before a restart that lost the thread's history, or from
		// another server: what this one has is sent from the start.
		st.First = gap(nil, fmt.Sprintf("event %d is past this thread's last (%d): its history is sent again from the start", after, last))
		st.Frames.(*frames).after = 0
	}
	h.Streams.Serve(w, r, ss, st)
}

// gap appends an error frame without an id: events the client asked for
// are no longer kept.
func gap(buf []byte, content string) []byte {
	code := IaUint(http.StatusGone)
	b, _ := json.Marshal(IaEvent{Value: &IaError{RunID: unknownRun, AgentID: "agent-unknown", Payload: IaErrorPayload{Content: content, StatusCode: &code}}})
	buf = append(buf, "data: "...)
	buf = append(buf, b...)
	return append(buf, "\n\n"...)
}

// frames makes the event stream's frames: one per event that is one, with
// the event's seq as its id, those after the client's cursor only.
type frames struct {
	tr    *translator
	after uint64 // the client's cursor
}

func (f *frames) Append(buf []byte, e *server.Event) ([]byte, bool) {
	if e.Seq == 0 {
		if m, ok := missed(e); ok && f.after+1 < m.FirstAvailableSeq {
			buf = gap(buf, fmt.Sprintf("events %d to %d of this thread are no longer kept; the history goes on from %d", f.after+1, m.FirstAvailableSeq-1, m.FirstAvailableSeq))
		}
		return buf, false
	}
	v := f.tr.next(e)
	if v == nil || v.frame == nil || e.Seq <= f.after {
		return buf, false
	}
	return append(buf, v.data...), false
}

// AppendEnd adds nothing: a client cut off resumes from its Last-Event-ID.
func (f *frames) AppendEnd(buf []byte, _ error) []byte { return buf }

// missed reads an events.missed notice.
func missed(e *server.Event) (protocol.EventsMissedData, bool) {
	if e.Method != "events.missed" {
		return protocol.EventsMissedData{}, false
	}
	e, err := e.WithPayload()
	if err != nil {
		return protocol.EventsMissedData{}, false
	}
	m, ok := e.Payload.(*protocol.ServerEventEventsMissed)
	if !ok {
		return protocol.EventsMissedData{}, false
	}
	return m.Params.Data, true
}

// snapshot reads the thread's events the server keeps, up to its last
// one, into a conversation; next is the id after the last one read.
func (h *Handler) snapshot(ctx context.Context, thread string) (c *conversation, next uint64, err error) {
	ss := h.Server.NewSession(thread)
	defer ss.Close()
	if _, _, err := ss.Subscribe(channels.Filter{Depth: channels.Unlimited}, server.SeqCursor(0)); err != nil {
		return nil, 0, err
	}
	last := h.Server.LastSeq(thread)
	ctx, cancel := context.WithTimeout(ctx, h.opts.SnapshotTimeout)
	defer cancel()
	c, tr, seen := newConversation(), newTranslator(thread), uint64(0)
	for seen < last {
		e, err := ss.Next(ctx)
		if err != nil {
			return nil, 0, fmt.Errorf("reading the thread's events: %w", err)
		}
		if e.Seq == 0 {
			continue
		}
		seen = max(seen, e.Seq)
		if v := tr.next(e); v != nil {
			c.add(v)
		}
	}
	return c, seen + 1, nil
}

// messages serves GET /instance-ai/threads/{threadId}/messages.
func (h *Handler) messages(w http.ResponseWriter, r *http.Request) {
	thread := r.PathValue("threadId")
	c, next, ok := h.read(w, r, thread)
	if !ok {
		return
	}
	out := IaThreadMessages{ThreadID: thread, Messages: []IaMessage{}, NextEventID: 1}
	if c != nil {
		out.Messages, out.NextEventID = c.result(), next
	}
	httpjson.Write(w, http.StatusOK, out)
}

// status serves GET /instance-ai/threads/{threadId}/status.
func (h *Handler) status(w http.ResponseWriter, r *http.Request) {
	thread := r.PathValue("threadId")
	c, _, ok := h.read(w, r, thread)
	if !ok {
		return
	}
	out := IaThreadStatus{BackgroundTasks: []IaBackgroundTask{}}
	if c != nil {
		st, _, err := h.Server.State(r.Context(), thread)
		if err != nil {
			httpjson.Write(w, http.StatusServiceUnavailable, protocol.NewError(nil, protocol.ErrorCodeUnavailable, "%v", err))
			return
		}
		out.HasActiveRun, out.IsSuspended = st.Status != "idle", st.Status == "interrupted"
		if out.HasActiveRun && c.last != nil {
			id := c.last.runID
			out.ActiveRunID, out.BackgroundTasks = &id, c.background()
		}
	}
	httpjson.Write(w, http.StatusOK, out)
}

// read is the conversation of a known thread the request may read (nil
// for an unknown one), or answers the request itself.
func (h *Handler) read(w http.ResponseWriter, r *http.Request, thread string) (*conversation, uint64, bool) {
	if !wire.ValidThread(w, "threadId", thread) {
		return nil, 0, false
	}
	known, ok := h.exists(w, r, thread)
	if !ok || (known && !h.thread(w, r, thread, false)) {
		return nil, 0, false
	}
	if !known {
		return nil, 0, true
	}
	c, next, err := h.snapshot(r.Context(), thread)
	if err != nil {
		status := http.StatusServiceUnavailable
		if errors.Is(err, context.Canceled) {
			status = http.StatusRequestTimeout
		}
		httpjson.Write(w, status, protocol.NewError(nil, protocol.ErrorCodeUnavailable, "%v", err))
		return nil, 0, false
	}
	return c, next, true
}

package openai

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport/internal/httpjson"
	"github.com/agentstream/agentstream/transport/wire"
)

// Options are the wire's own settings (its Context has the transport's).
type Options struct {
	// ReadTimeout bounds reading a thread's events for GET
	// /v1/responses/{id} (5 s).
	ReadTimeout time.Duration
}

// maxBody caps a request's body.
const maxBody = 1 << 20

// Handler serves the OpenAI-compatible routes.
type Handler struct {
	wire.Context
	opts Options
}

// New returns the handler on c.Server, its streams served by c.Streams.
func New(c wire.Context, opts Options) *Handler {
	if opts.ReadTimeout <= 0 {
		opts.ReadTimeout = 5 * time.Second
	}
	return &Handler{Context: c.WithDefaults(), opts: opts}
}

// Routes are the OpenAI-compatible routes: what starts or reads a run
// (and may stream it) is a stream's route, cancel a command's, the list
// of models a read's. The transport's refusals in front of them are
// reshaped as OpenAI's error object.
func (h *Handler) Routes() []wire.Route {
	route := func(method, pattern string, kind wire.Kind, f http.HandlerFunc) wire.Route {
		return wire.Route{Method: method, Pattern: pattern, Kind: kind, Handler: f, Outer: errorShape}
	}
	return []wire.Route{
		route("POST", "/v1/chat/completions", wire.StreamRoute, h.chatCompletions),
		route("POST", "/v1/responses", wire.StreamRoute, h.createResponse),
		route("GET", "/v1/responses/{id}", wire.StreamRoute, h.getResponse),
		route("POST", "/v1/responses/{id}/cancel", wire.CommandRoute, h.cancelResponse),
		route("GET", "/v1/models", wire.ReadRoute, h.models),
	}
}

// fail writes an error in OpenAI's shape.
func fail(w http.ResponseWriter, status int, param string, format string, args ...any) {
	typ, code := "invalid_request_error", ""
	switch status {
	case http.StatusUnauthorized:
		typ, code = "authentication_error", "invalid_api_key"
	case http.StatusForbidden:
		typ, code = "permission_error", "forbidden"
	case http.StatusNotFound:
		code = "not_found"
	case http.StatusConflict:
		code = "conflict"
	case http.StatusTooManyRequests:
		typ, code = "rate_limit_error", "rate_limited"
	case http.StatusServiceUnavailable, http.StatusInternalServerError:
		typ, code = "server_error", "unavailable"
	}
	e := OaiError{Message: fmt.Sprintf(format, args...), Type: typ}
	if param != "" {
		e.Param = &param
	}
	if code != "" {
		e.Code = &code
	}
	httpjson.Write(w, status, OaiErrorBody{Error: e})
}

// failCommand writes a command's error in OpenAI's shape.
func failCommand(w http.ResponseWriter, err error) {
	status, e := httpjson.CommandError(err)
	fail(w, status, "", "%s", e.Message)
}

// openaiValuesFactor: a chat's body (its whole conversation, each message
// with its content parts) may hold this many times the values a command
// may (--command-max-values), no more.
const openaiValuesFactor = 4

// readBody reads and strictly decodes a JSON body into v, a request of
// rule, refusing first one nested deeper than --command-max-depth or holding more
// than openaiValuesFactor times --command-max-values values.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, v any, rule string) bool {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		fail(w, http.StatusUnsupportedMediaType, "", "the body is JSON: Content-Type: application/json")
		return false
	}
	body, status, refusal, errResp := httpjson.ReadBody(w, r, maxBody, h.BodyTimeout, "request")
	if errResp != nil {
		if refusal != "" {
			h.Observer.Refused(refusal)
		}
		fail(w, status, "", "%s", errResp.Message)
		return false
	}
	limits := h.Decode
	limits.MaxValues = openaiValuesFactor * max(limits.MaxValues, protocol.DefaultMaxValues)
	if err := limits.Check(body); err != nil {
		var le *protocol.LimitError
		if errors.As(err, &le) {
			h.Observer.Refused("body_" + le.Limit)
		}
		fail(w, http.StatusBadRequest, "", "the body: %v", err)
		return false
	}
	if err := decodeRequest(body, v, rule); err != nil {
		fail(w, http.StatusBadRequest, "", "%v", err)
		return false
	}
	return true
}

// sampling checks the sampling parameters as OpenAI does (temperature 0
// to 2, top_p 0 to 1), though the assistant decides how it answers.
func sampling(w http.ResponseWriter, temperature, topP *float64) bool {
	if t := temperature; t != nil && !(*t >= 0 && *t <= 2) {
		fail(w, http.StatusBadRequest, "temperature", "temperature must be from 0 to 2, not %v", *t)
		return false
	}
	if p := topP; p != nil && !(*p >= 0 && *p <= 1) {
		fail(w, http.StatusBadRequest, "top_p", "top_p must be from 0 to 1, not %v", *p)
		return false
	}
	return true
}

// model checks that the model names an assistant.
func (h *Handler) model(w http.ResponseWriter, model string) bool {
	if !slices.Contains(h.Server.Assistants(), model) {
		fail(w, http.StatusNotFound, "model", "the model %q does not exist: it names an assistant (GET /v1/models lists them)", model)
		return false
	}
	return true
}

// authorize asks whether the request may use the thread.
func (h *Handler) authorize(w http.ResponseWriter, r *http.Request, thread string, create bool) bool {
	return h.Allowed(w, r, thread, create)
}

// newThread names a thread of its own for a completion or a response.
func newThread() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "oai-" + hex.EncodeToString(b[:])
}

// start starts a run of assistant on the session's thread with input
// messages and returns the seq of its first event.
func start(ctx context.Context, ss *server.Session, assistant string, messages []any) (uint64, error) {
	reject := protocol.MultitaskStrategyReject
	resp, err := ss.Do(ctx, &protocol.ClientCommand{Value: &protocol.ClientCommandRunStart{ID: 1,
		Params: protocol.RunStartParams{AssistantID: assistant, Input: map[string]any{"messages": messages}, MultitaskStrategy: &reject}}})
	if err != nil {
		return 0, err
	}
	return appliedThrough(resp) + 1, nil
}

func appliedThrough(resp *protocol.CommandResponse) uint64 {
	if resp != nil && resp.Meta != nil && resp.Meta.AppliedThroughSeq != nil {
		return *resp.Meta.AppliedThroughSeq
	}
	return 0
}

// answer resumes the run of thread waiting on call (a tool call id or an
// interrupt id) with output, and returns the seq of the first event
// after it; found is false when nothing waits on call.
func (h *Handler) answer(ctx context.Context, ss *server.Session, thread, call string, output any) (seq uint64, found bool, err error) {
	st, known, err := h.Server.State(ctx, thread)
	if err != nil || !known {
		return 0, false, err
	}
	for _, in := range st.Interrupts {
		named := ""
		if m, ok := in.Payload.(map[string]any); ok {
			named, _ = m["tool_call_id"].(string)
		}
		if in.ID != call && named != call {
			continue
		}
		respond := &protocol.InputRespondOne{Namespace: protocol.Namespace(in.Namespace), InterruptID: in.ID, Response: output}
		if respond.Namespace == nil {
			respond.Namespace = protocol.Namespace{}
		}
		resp, err := ss.Do(ctx, &protocol.ClientCommand{Value: &protocol.ClientCommandInputRespond{ID: 1,
			Params: protocol.InputRespondParams{Value: respond}}})
		if err != nil {
			return 0, true, err
		}
		return appliedThrough(resp) + 1, true, nil
	}
	return 0, false, nil
}

// toolOutput is a request's answer to the call a run waits on.
type toolOutput struct {
	call, wireID string // the call's id, and as the wire names it
	value        any
	param        string // the request's member that holds it
}

// begin subscribes to thread (create: a new one) and then starts a run of model with
// messages, or, with answer, resumes the run waiting on its call; it
// returns the subscription and the seq of the run's first event (or of
// the first after the answer). It answers the request itself when it
// cannot (ok false). The subscription comes first, so that the run's
// first events are read however soon the thread's buffer lets them go.
func (h *Handler) begin(w http.ResponseWriter, r *http.Request, thread string, create bool, model string, messages []any, answer *toolOutput) (sub *server.Session, first uint64, ok bool) {
	if !h.authorize(w, r, thread, create) {
		return nil, 0, false
	}
	sub, err := h.subscribe(thread, h.Server.LastSeq(thread))
	if err != nil {
		fail(w, http.StatusServiceUnavailable, "", "%v", err)
		return nil, 0, false
	}
	if answer == nil {
		first, err = start(r.Context(), sub, model, messages)
	} else {
		var found bool
		first, found, err = h.answer(r.Context(), sub, thread, answer.call, answer.value)
		if err == nil && !found {
			sub.Close()
			fail(w, http.StatusConflict, answer.param, "no run waits for call %s (answered already, or its run ended)", answer.wireID)
			return nil, 0, false
		}
	}
	if err != nil {
		sub.Close()
		failCommand(w, err)
		return nil, 0, false
	}
	return sub, first, true
}

// outputValue is a tool's output as the run gets it: JSON when it
// parses, else the text.
func outputValue(s string) any {
	var v any
	if json.Unmarshal([]byte(s), &v) == nil {
		return v
	}
	return s
}

// textOf reads a message's content: a string, or the text of its parts.
func textOf(content any) string {
	switch c := content.(type) {
	case string:
		return c
	case []any:
		var b strings.Builder
		for _, p := range c {
			if m, ok := p.(map[string]any); ok {
				if s, ok := m["text"].(string); ok {
					b.WriteString(s)
				}
			}
		}
		return b.String()
	}
	return ""
}

// subscribe subscribes a new session of thread to the wires' channels
// from after seq.
func (h *Handler) subscribe(thread string, after uint64) (*server.Session, error) {
	ss := h.Server.NewSession(thread)
	if _, _, err := ss.Subscribe(channels.Filter{Channels: streamChannels, Depth: channels.Unlimited}, server.SeqCursor(after)); err != nil {
		ss.Close()
		return nil, err
	}
	return ss, nil
}

// ---------------------------------------------------------------- chat

// chatCompletions serves POST /v1/chat/completions.
func (h *Handler) chatCompletions(w http.ResponseWriter, r *http.Request) {
	var req OaiChatRequest
	if !h.readBody(w, r, &req, "OaiChatRequest") {
		return
	}
	if err := req.Validate(); err != nil {
		fail(w, http.StatusBadRequest, "messages", "%v", err)
		return
	}
	if req.N != nil && *req.N != 1 {
		fail(w, http.StatusBadRequest, "n", "n must be 1 here, not %d: a run gives one choice", *req.N)
		return
	}
	if !sampling(w, req.Temperature, req.TopP) {
		return
	}
	if !h.model(w, req.Model) {
		return
	}
	// The answer to a run's interrupt: the last message is a tool's
	// output for a call of this wire.
	last := req.Messages[len(req.Messages)-1]
	var thread, call string
	if last.Role == OaiChatMessageRoleTool && last.ToolCallID != nil {
		var ok bool
		if thread, call, ok = splitCallID(*last.ToolCallID); !ok || server.ValidThreadID(thread) != nil {
			thread = ""
		}
	}
	var messages []any
	promptBytes := 0
	for _, m := range req.Messages {
		role := string(m.Role)
		if role == "developer" {
			role = "system"
		}
		text := textOf(m.Content)
		promptBytes += len(text)
		msg := map[string]any{"role": role, "content": text}
		if m.ToolCallID != nil {
			msg["tool_call_id"] = *m.ToolCallID
		}
		messages = append(messages, msg)
	}
	var answer *toolOutput
	create := thread == ""
	if create {
		thread = newThread()
	} else {
		answer = &toolOutput{call: call, wireID: *last.ToolCallID, value: outputValue(textOf(last.Content)), param: "messages"}
	}
	sub, first, ok := h.begin(w, r, thread, create, req.Model, messages, answer)
	if !ok {
		return
	}
	c := newChat(thread, req.Model, promptBytes)
	c.from = first
	if req.Stream != nil && *req.Stream {
		usage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage != nil && *req.StreamOptions.IncludeUsage
		h.Streams.Serve(w, r, sub, wire.Stream{Frames: &chatFrames{c: c, usage: usage}, Heartbeat: ": keep-alive\n\n",
			HeartbeatEvery: h.Heartbeat, Header: chatHeaders(thread)})
		return
	}
	defer sub.Close()
	if err := follow(r.Context(), sub, &c.done, func(e *server.Event) { c.feed(e) }); err != nil {
		fail(w, http.StatusServiceUnavailable, "", "the run's events: %v", err)
		return
	}
	if c.failed != "" {
		fail(w, http.StatusInternalServerError, "", "the run failed: %s", c.failed)
		return
	}
	w.Header().Set("Agentstream-Thread", thread)
	httpjson.Write(w, http.StatusOK, c.completion())
}

// ----------------------------------------------------------- responses

// createResponse serves POST /v1/responses.
func (h *Handler) createResponse(w http.ResponseWriter, r *http.Request) {
	var req OaiResponsesRequest
	if !h.readBody(w, r, &req, "OaiResponsesRequest") {
		return
	}
	if err := req.Validate(); err != nil {
		fail(w, http.StatusBadRequest, "input", "%v", err)
		return
	}
	if !sampling(w, req.Temperature, req.TopP) {
		return
	}
	if !h.model(w, req.Model) {
		return
	}
	thread, create := "", true
	var prev *string
	if req.PreviousResponseID != nil && *req.PreviousResponseID != "" {
		t, _, ok := parseResponseID(*req.PreviousResponseID)
		if !ok {
			fail(w, http.StatusBadRequest, "previous_response_id", "%q is not a response id of this server", *req.PreviousResponseID)
			return
		}
		thread, create, prev = t, false, req.PreviousResponseID
	}
	var messages []any
	var callOutput *OaiInputItem
	inBytes := 0
	if req.Instructions != nil && *req.Instructions != "" {
		messages = append(messages, map[string]any{"role": "system", "content": *req.Instructions})
		inBytes += len(*req.Instructions)
	}
	switch in := req.Input.(type) {
	case string:
		messages = append(messages, map[string]any{"role": "user", "content": in})
		inBytes += len(in)
	default:
		b, _ := json.Marshal(in)
		var items []OaiInputItem
		if err := json.Unmarshal(b, &items); err != nil {
			fail(w, http.StatusBadRequest, "input", "input: text or a list of items: %v", err)
			return
		}
		for i := range items {
			it := &items[i]
			typ := ""
			if it.Type != nil {
				typ = *it.Type
			}
			switch {
			case typ == "function_call_output":
				if it.CallID == nil {
					fail(w, http.StatusBadRequest, "input", "input[%d]: a function_call_output needs its call_id", i)
					return
				}
				callOutput = it
			case typ == "message" || (typ == "" && it.Role != nil):
				role := "user"
				if it.Role != nil {
					role = string(*it.Role)
				}
				if role == "developer" {
					role = "system"
				}
				text := textOf(it.Content)
				inBytes += len(text)
				messages = append(messages, map[string]any{"role": role, "content": text})
			}
		}
	}
	var call string
	if callOutput != nil {
		t, c, ok := splitCallID(*callOutput.CallID)
		if !ok || (thread != "" && t != thread) {
			fail(w, http.StatusBadRequest, "input", "call_id %q is not a call of previous_response_id's thread", *callOutput.CallID)
			return
		}
		thread, create, call = t, false, c
	} else if len(messages) == 0 {
		fail(w, http.StatusBadRequest, "input", "input: no message and no function_call_output")
		return
	}
	if create {
		thread = newThread()
	}
	var answer *toolOutput
	if callOutput != nil {
		answer = &toolOutput{call: call, wireID: *callOutput.CallID, value: outputValue(textOf(callOutput.Output)), param: "input"}
	}
	sub, first, ok := h.begin(w, r, thread, create, req.Model, messages, answer)
	if !ok {
		return
	}
	resp := newResponse(thread, first, req.Model, prev, now(), inBytes)
	h.serveResponse(w, r, resp, sub, req.Stream != nil && *req.Stream, -1)
}

// serveResponse streams resp's events after sequence_number after, or
// waits for its end and writes the object; sub reads the thread from the
// response's start or before (nil: a subscription of its own).
func (h *Handler) serveResponse(w http.ResponseWriter, r *http.Request, resp *response, sub *server.Session, stream bool, after int64) {
	if sub == nil {
		_, startSeq, _ := parseResponseID(resp.id)
		var err error
		if sub, err = h.subscribe(resp.thread, startSeq-1); err != nil {
			fail(w, http.StatusServiceUnavailable, "", "%v", err)
			return
		}
	}
	if stream {
		h.Streams.Serve(w, r, sub, wire.Stream{Frames: &responseFrames{r: resp, after: after}, Heartbeat: ": keep-alive\n\n",
			HeartbeatEvery: h.Heartbeat, Header: http.Header{"Agentstream-Thread": {resp.thread}}})
		return
	}
	defer sub.Close()
	if err := follow(r.Context(), sub, &resp.done, func(e *server.Event) { resp.feed(e) }); err != nil {
		fail(w, http.StatusServiceUnavailable, "", "the run's events: %v", err)
		return
	}
	httpjson.Write(w, http.StatusOK, resp.object())
}

// follow feeds sub's events to feed until done is set.
func follow(ctx context.Context, sub *server.Session, done *bool, feed func(*server.Event)) error {
	for !*done {
		e, err := sub.Next(ctx)
		if err != nil {
			return err
		}
		if gone(e) {
			return errGone
		}
		feed(e)
	}
	return nil
}

// lookup reads the response of the path: its thread, known and usable
// by the request; it answers the request itself when not.
func (h *Handler) lookup(w http.ResponseWriter, r *http.Request) (*response, bool) {
	id := r.PathValue("id")
	thread, _, ok := parseResponseID(id)
	if !ok {
		fail(w, http.StatusNotFound, "id", "no response %q", id)
		return nil, false
	}
	known, err := h.Server.HasThread(r.Context(), thread)
	if err != nil {
		fail(w, http.StatusServiceUnavailable, "", "%v", err)
		return nil, false
	}
	if !known {
		fail(w, http.StatusNotFound, "id", "no response %q", id)
		return nil, false
	}
	if !h.authorize(w, r, thread, false) {
		return nil, false
	}
	_, seq, _ := parseResponseID(id)
	return newResponse(thread, seq, "", nil, 0, 0), true
}

// snapshot feeds resp the events its thread holds now, up to its last.
func (h *Handler) snapshot(ctx context.Context, resp *response) error {
	_, startSeq, _ := parseResponseID(resp.id)
	last := h.Server.LastSeq(resp.thread)
	if last < startSeq {
		return nil
	}
	sub, err := h.subscribe(resp.thread, startSeq-1)
	if err != nil {
		return err
	}
	defer sub.Close()
	ctx, cancel := context.WithTimeout(ctx, h.opts.ReadTimeout)
	defer cancel()
	for seen := uint64(0); seen < last && !resp.done; {
		e, err := sub.Next(ctx)
		if err != nil {
			return err
		}
		if gone(e) {
			return errGone
		}
		seen = max(seen, e.Seq)
		resp.feed(e)
	}
	return nil
}

// getResponse serves GET /v1/responses/{id}: the response as it stands,
// or with stream=true its stream again, after starting_after.
func (h *Handler) getResponse(w http.ResponseWriter, r *http.Request) {
	resp, ok := h.lookup(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	if s := q.Get("stream"); s == "true" {
		after := int64(-1)
		if v := q.Get("starting_after"); v != "" {
			n, err := strconv.ParseUint(v, 10, 63)
			if err != nil {
				fail(w, http.StatusBadRequest, "starting_after", "starting_after: a sequence_number, not %q", v)
				return
			}
			after = int64(n)
		}
		h.serveResponse(w, r, resp, nil, true, after)
		return
	}
	if err := h.snapshot(r.Context(), resp); err != nil {
		fail(w, http.StatusServiceUnavailable, "", "reading the response: %v", err)
		return
	}
	httpjson.Write(w, http.StatusOK, resp.object())
}

// cancelResponse serves POST /v1/responses/{id}/cancel: the run under way
// is cancelled and the response, ended, is the answer.
func (h *Handler) cancelResponse(w http.ResponseWriter, r *http.Request) {
	resp, ok := h.lookup(w, r)
	if !ok {
		return
	}
	if err := h.snapshot(r.Context(), resp); err != nil {
		fail(w, http.StatusServiceUnavailable, "", "reading the response: %v", err)
		return
	}
	if !resp.done {
		ss := h.Server.NewSession(resp.thread)
		_, err := ss.Do(r.Context(), &protocol.ClientCommand{Value: &protocol.ClientCommandRunCancel{ID: 1}})
		ss.Close()
		if err != nil {
			failCommand(w, err)
			return
		}
		// The run's end, as every reader of the response sees it.
		_, startSeq, _ := parseResponseID(resp.id)
		resp = newResponse(resp.thread, startSeq, "", nil, 0, 0)
		sub, err := h.subscribe(resp.thread, startSeq-1)
		if err != nil {
			fail(w, http.StatusServiceUnavailable, "", "%v", err)
			return
		}
		defer sub.Close()
		ctx, cancel := context.WithTimeout(r.Context(), h.opts.ReadTimeout)
		defer cancel()
		// Cancelled; a run whose end is not seen in time is answered as
		// it stands.
		if err := follow(ctx, sub, &resp.done, func(e *server.Event) { resp.feed(e) }); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			fail(w, http.StatusServiceUnavailable, "", "%v", err)
			return
		}
	}
	httpjson.Write(w, http.StatusOK, resp.object())
}

// models serves GET /v1/models: the assistants.
func (h *Handler) models(w http.ResponseWriter, r *http.Request) {
	ids := h.Server.Assistants()
	slices.Sort(ids)
	out := OaiModelList{Data: []OaiModel{}}
	for _, id := range ids {
		out.Data = append(out.Data, OaiModel{ID: id})
	}
	httpjson.Write(w, http.StatusOK, out)
}

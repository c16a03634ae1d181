package jobs

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/runtime/cddlrt"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport/internal/httpjson"
	"github.com/agentstream/agentstream/transport/wire"
)

// EventName names the custom events that hold a job's envelopes.
const EventName = "node_stream_event"

// Thread is the thread of job id.
func Thread(jobID string) string { return "job:" + jobID }

// maxSmallBody caps the body of a job's creation and of its end.
const maxSmallBody = 64 << 10

// maxOwnerLength bounds the principal a job is opened for.
const maxOwnerLength = 256

// Handler serves the job stream's routes.
type Handler struct {
	wire.Context
}

// New returns the job stream's handler on c.Server, its streams served by
// c.Streams.
func New(c wire.Context) *Handler { return &Handler{Context: c.WithDefaults()} }

// Routes are the job stream's routes: the creation of a job and its
// stream are streams' routes, what producers send an ingest's.
func (h *Handler) Routes() []wire.Route {
	return []wire.Route{
		{Method: "POST", Pattern: "/jobs", Kind: wire.StreamRoute, Handler: http.HandlerFunc(h.create)},
		{Method: "POST", Pattern: "/jobs/{job_id}/envelopes", Kind: wire.IngestRoute, Handler: http.HandlerFunc(h.envelopes)},
		{Method: "POST", Pattern: "/jobs/{job_id}/complete", Kind: wire.IngestRoute, Handler: http.HandlerFunc(h.complete)},
		{Method: "GET", Pattern: "/jobs/{job_id}/stream", Kind: wire.StreamRoute, Handler: http.HandlerFunc(h.stream)},
	}
}

// authorize checks the job's thread id and asks whether the request may
// use the thread.
func (h *Handler) authorize(w http.ResponseWriter, r *http.Request, thread string, create bool) bool {
	return h.Thread(w, r, "job_id", thread, create)
}

// producer answers 403 unless the caller may publish (a producer's or an
// admin's credential; anyone without authentication).
func producer(w http.ResponseWriter, r *http.Request) bool {
	p := auth.FromContext(r.Context())
	if p == nil || p.Admin || p.Producer {
		return true
	}
	httpjson.Write(w, http.StatusForbidden, protocol.NewError(nil, protocol.ErrorCodePermissionDenied, "%q may not publish a job's envelopes: a producer's credential is needed", p.Subject))
	return false
}

// create serves POST /jobs.
func (h *Handler) create(w http.ResponseWriter, r *http.Request) {
	var req JobCreateRequest
	body, ok := h.ReadBody(w, r, maxSmallBody, "request")
	if !ok {
		return
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := cddlrt.DecodeStrictJSON(body, &req); err != nil {
			httpjson.Write(w, http.StatusBadRequest, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "%v", err))
			return
		}
	}
	id := ""
	if req.JobID != nil {
		id = *req.JobID
		if server.ValidThreadID(Thread(id)) != nil || server.ValidName(id, server.MaxThreadIDLength) != nil {
			httpjson.Write(w, http.StatusBadRequest, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "job_id: 1 to %d bytes of A-Z a-z 0-9 . _ : - (not . or ..)", server.MaxThreadIDLength-len(Thread(""))))
			return
		}
	} else {
		var b [8]byte
		_, _ = rand.Read(b[:])
		id = hex.EncodeToString(b[:])
	}
	thread := Thread(id)
	if req.Owner != nil {
		if err := server.ValidName(*req.Owner, maxOwnerLength); err != nil {
			httpjson.Write(w, http.StatusBadRequest, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "owner: %v", err))
			return
		}
		p := auth.FromContext(r.Context())
		if p != nil && !p.Admin && !p.Producer {
			httpjson.Write(w, http.StatusForbidden, protocol.NewError(nil, protocol.ErrorCodePermissionDenied, "only an admin or a producer may open a job for another principal"))
			return
		}
		if p != nil {
			// The job is the named principal's: it claims the thread.
			r = r.WithContext(auth.NewContext(r.Context(), &auth.Principal{Subject: *req.Owner}))
		}
	}
	if !h.authorize(w, r, thread, true) {
		return
	}
	httpjson.Write(w, http.StatusCreated, JobCreated{JobID: id})
}

// envelopes serves POST /jobs/{job_id}/envelopes: checked whole, then
// appended in order.
func (h *Handler) envelopes(w http.ResponseWriter, r *http.Request) {
	thread := Thread(r.PathValue("job_id"))
	if !producer(w, r) || !h.authorize(w, r, thread, true) {
		return
	}
	items, ok := h.ReadBatch(w, r, "batch of envelopes", "envelopes")
	if ok {
		for i, item := range items {
			if !h.WithinLimits(w, item, fmt.Sprintf("[%d]", i), h.Decode) {
				return
			}
		}
	}
	if !ok {
		return
	}
	b := server.ProducerBatch{Events: make([]protocol.ProducerEvent, 0, len(items))}
	for i, item := range items {
		if len(item) > h.MaxEventBytes {
			httpjson.Write(w, http.StatusRequestEntityTooLarge, protocol.NewError(nil, protocol.ErrorCodeResourceExhausted, "[%d]: an envelope is at most %d bytes", i, h.MaxEventBytes))
			return
		}
		ev, err := envelopeEvent(item)
		if err != nil {
			httpjson.Write(w, http.StatusBadRequest, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "[%d]%v", i, err))
			return
		}
		b.Events = append(b.Events, ev)
	}
	res, err := h.Server.Publish(r.Context(), thread, b)
	if err != nil {
		status := http.StatusServiceUnavailable
		if errors.Is(err, server.ErrNotTheWriter) {
			status = http.StatusConflict
		}
		httpjson.Write(w, status, protocol.NewError(nil, protocol.ErrorCodeUnavailable, "%v", err))
		return
	}
	out := JobAppended{Seqs: make([]JobUint, len(res.Seqs))}
	copy(out.Seqs, res.Seqs)
	httpjson.Write(w, http.StatusOK, out)
}

// envelopeEvent checks an envelope and makes the event that holds it: a
// custom event named EventName whose payload is the envelope as sent.
func envelopeEvent(item []byte) (protocol.ProducerEvent, error) {
	env, err := CheckEnvelope(item)
	if err != nil {
		return protocol.ProducerEvent{}, err
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, item); err != nil {
		return protocol.ProducerEvent{}, fmt.Errorf(": %v", err)
	}
	name := EventName
	return protocol.ProducerEvent{Timestamp: env.Ts, Event: &protocol.ServerEventCustom{
		Params: protocol.EventCustomParams{Namespace: protocol.Namespace{}, Data: protocol.CustomData{Name: &name, Payload: json.RawMessage(compact.Bytes())}}}}, nil
}

// completeEvent reads a JobComplete and makes the job's end: the root
// agent's completed or failed lifecycle.
func completeEvent(body []byte) (protocol.ProducerEvent, error) {
	var c JobComplete
	if err := cddlrt.DecodeStrictJSON(body, &c); err != nil {
		return protocol.ProducerEvent{}, err
	}
	st := protocol.AgentStatusCompleted
	if c.Status == JobCompleteStatusFailed {
		st = protocol.AgentStatusFailed
	}
	return protocol.ProducerEvent{Event: &protocol.ServerEventLifecycle{Params: protocol.EventLifecycleParams{Namespace: protocol.Namespace{}, Data: protocol.LifecycleData{Event: st}}}}, nil
}

// CheckEnvelope checks an envelope a worker sends (JobEnvelopeIn, no
// seq), and its payload where its (node_type, payload_version) is known
// (Payloads). The error starts with the JSON path of the problem.
func CheckEnvelope(item []byte) (*JobEnvelopeIn, error) {
	var env JobEnvelopeIn
	if err := cddlrt.DecodeStrictJSON(item, &env); err != nil {
		return nil, fmt.Errorf(": %v", err)
	}
	if check, ok := Payloads[PayloadKind{env.NodeType, env.PayloadVersion}]; ok {
		raw, err := json.Marshal(env.Payload)
		if err != nil {
			return nil, fmt.Errorf(".payload: %v", err)
		}
		if err := check(raw); err != nil {
			return nil, fmt.Errorf(".payload (%s %s): %v", env.NodeType, env.PayloadVersion, err)
		}
	}
	return &env, nil
}

// PayloadKind is a payload's (node_type, payload_version).
type PayloadKind struct{ NodeType, Version string }

// Payloads checks the payloads of the kinds the server knows; the payloads
// of other kinds are taken as they come (new node types ship without a
// server change).
var Payloads = map[PayloadKind]func([]byte) error{
	{"deep_agent", "AgentEvent.v1"}: func(b []byte) error {
		var ev AgentEvent
		return cddlrt.DecodeStrictJSON(b, &ev)
	},
}

// complete serves POST /jobs/{job_id}/complete: the job ends (the root
// agent's completed or failed lifecycle).
func (h *Handler) complete(w http.ResponseWriter, r *http.Request) {
	thread := Thread(r.PathValue("job_id"))
	if !producer(w, r) || !h.authorize(w, r, thread, true) {
		return
	}
	body, ok := h.ReadBody(w, r, maxSmallBody, "request")
	if !ok {
		return
	}
	ev, err := completeEvent(body)
	if err != nil {
		httpjson.Write(w, http.StatusBadRequest, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "%v", err))
		return
	}
	if _, err := h.Server.Publish(r.Context(), thread, server.ProducerBatch{Events: []protocol.ProducerEvent{ev}}); err != nil {
		httpjson.Write(w, http.StatusServiceUnavailable, protocol.NewError(nil, protocol.ErrorCodeUnavailable, "%v", err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// stream serves GET /jobs/{job_id}/stream.
func (h *Handler) stream(w http.ResponseWriter, r *http.Request) {
	thread := Thread(r.PathValue("job_id"))
	if !h.authorize(w, r, thread, false) {
		return
	}
	var cursor *server.Cursor
	terminal := false
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		if v == "terminal" {
			terminal = true // the client saw the end: only the end again
		} else {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				httpjson.Write(w, http.StatusBadRequest, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "Last-Event-ID: a seq, or terminal"))
				return
			}
			cursor = server.SeqCursor(n)
		}
	}
	ss := h.Server.NewSession(thread)
	f := channels.Filter{Channels: []string{"custom:" + EventName, channels.Lifecycle}}
	if _, _, err := ss.Subscribe(f, cursor); err != nil {
		ss.Close()
		httpjson.Write(w, http.StatusServiceUnavailable, protocol.NewError(nil, protocol.ErrorCodeUnavailable, "%v", err))
		return
	}
	h.Streams.Serve(w, r, ss, wire.Stream{Frames: &frames{terminal: terminal}, First: []byte("event: snapshot\nid: 0\ndata: {\"result\":{\"stream\":{}}}\n\n"),
		Heartbeat: ":keep-alive\n\n", HeartbeatEvery: h.Heartbeat})
}

// frames makes a job stream's frames: append per envelope, complete at
// the end. A client that was cut off resumes from its Last-Event-ID.
type frames struct {
	terminal bool // the client saw the end: only the end again
}

// frameKey keys the append frames of envelopes (server.Event.View).
type frameKey struct{}

func (f *frames) Append(buf []byte, e *server.Event) ([]byte, bool) {
	if e.Seq == 0 {
		return buf, false // a notice, not an envelope
	}
	if e.Channel == channels.Lifecycle {
		if len(e.Namespace) != 0 {
			return buf, false
		}
		e, err := e.WithPayload()
		if err != nil {
			return buf, false
		}
		if l, ok := e.Payload.(*protocol.ServerEventLifecycle); ok {
			switch st := l.Params.Data.Event; st {
			case protocol.AgentStatusCompleted, protocol.AgentStatusFailed:
				return fmt.Appendf(buf, "event: complete\nid: terminal\ndata: {\"status\":%q}\n\n", st), true
			}
		}
		return buf, false
	}
	if f.terminal {
		return buf, false
	}
	// Made once for every reader of the event.
	frame, _ := e.View(frameKey{}, func() any {
		env, err := envelopeOf(e)
		if err != nil {
			return []byte(nil)
		}
		b := append([]byte("event: append\nid: "), strconv.FormatUint(e.Seq, 10)...)
		b = append(b, "\ndata: "...)
		b = append(b, env...)
		return append(b, "\n\n"...)
	}).([]byte)
	return append(buf, frame...), false
}

func (f *frames) AppendEnd(buf []byte, _ error) []byte { return buf }

// envelopeOf is the envelope an event holds, with its seq first and the
// rest as its worker sent it.
func envelopeOf(e *server.Event) ([]byte, error) {
	var raw json.RawMessage
	if c, ok := e.Payload.(*protocol.ServerEventCustom); ok {
		// Published on this node: the envelope as its producer sent it,
		// with nothing to parse for each reader.
		raw, _ = c.Params.Data.Payload.(json.RawMessage)
	}
	if raw == nil { // read back from Redis or another node: its JSON only
		var ev struct {
			Params struct {
				Data struct {
					Payload json.RawMessage `json:"payload"`
				} `json:"data"`
			} `json:"params"`
		}
		if err := json.Unmarshal(e.JSON(), &ev); err != nil {
			return nil, err
		}
		raw = bytes.TrimSpace(ev.Params.Data.Payload)
	}
	if len(raw) < 2 || raw[0] != '{' {
		return nil, errors.New("not an envelope")
	}
	out := make([]byte, 0, len(raw)+24)
	out = append(out, `{"seq":`...)
	out = strconv.AppendUint(out, e.Seq, 10)
	if len(bytes.TrimSpace(raw[1:])) > 1 {
		out = append(out, ',')
	}
	return append(out, raw[1:]...), nil
}

// IngestEntry reads a job's entry of the Redis ingest stream (the job
// workers' own pattern, redisstore.IngestOptions.Entries): `job` names the
// job, and `envelope` holds one envelope (as POST /jobs/{id}/envelopes
// takes them) or `complete` holds {"status": ...}. handled is false for
// an entry without `job`; reason says why one is refused.
func IngestEntry(fields map[string]string) (thread string, event protocol.ProducerEvent, handled bool, reason string) {
	job, ok := fields["job"]
	if !ok {
		return "", protocol.ProducerEvent{}, false, ""
	}
	thread = Thread(job)
	if env, ok := fields["envelope"]; ok {
		ev, err := envelopeEvent([]byte(env))
		if err != nil {
			return "", protocol.ProducerEvent{}, true, "envelope" + err.Error()
		}
		return thread, ev, true, ""
	}
	if c, ok := fields["complete"]; ok {
		ev, err := completeEvent([]byte(c))
		if err != nil {
			return "", protocol.ProducerEvent{}, true, "complete: " + err.Error()
		}
		return thread, ev, true, ""
	}
	return "", protocol.ProducerEvent{}, true, "a job's entry holds an envelope or complete field"
}

package transport

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/runtime/cddlrt"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport/internal/httpjson"
	"github.com/agentstream/agentstream/transport/wire"
)

// The worker wire over HTTP (protocol/worker.cddl). Plain HTTP because a
// worker then needs nothing but its language's standard library (Python's
// urllib, Node's fetch, Go's net/http); WebSocket clients are not in
// Python's standard library nor in Node 20's. A worker's events go in
// batches, so a request carries many of them.
//
//	GET  /workers/connect?assistants=a,b&max_runs=N   NDJSON of WorkerMessage
//	POST /workers/{worker}/runs/{run}                 a batch of WorkerOp
//	POST /workers/{worker}/heartbeat                  the worker's lease
//	DELETE /workers/{worker}                          the worker leaves

// WorkerHeader names a worker when it connects again.
const WorkerHeader = "Agentstream-Worker"

// The bounds of a connect request, and of a write to its stream (a worker
// that does not read within it is cut; its lease decides its runs).
const (
	workerWriteTimeout   = 10 * time.Second
	maxWorkerAssistants  = 64
	maxAssistantIDLength = 256
)

// workerGuard admits a worker's request: the same-site rules of every
// route that changes state, and with authentication on a producer's or an
// admin's credential. The principal goes on in the request's context.
func (h *Handler) workerGuard(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.sameSite(w, r, wire.WorkerRoute) {
			return
		}
		if h.auth == nil {
			next(w, r)
			return
		}
		p, ok := h.authenticate(w, r)
		if !ok {
			return
		}
		if !p.Admin && !p.Producer {
			h.metrics.AuthRefused("permission_denied")
			httpjson.Write(w, http.StatusForbidden, protocol.NewError(nil, protocol.ErrorCodePermissionDenied, "%q may not serve assistants: a producer's credential is needed (a JWT with role producer, an API key listed with producer)", p.Subject))
			return
		}
		next(w, r.WithContext(auth.NewContext(r.Context(), p)))
	})
}

// workerWire is the remote workers' routes.
type workerWire struct{ h *Handler }

func (ww workerWire) Routes() []wire.Route {
	h := ww.h
	return []wire.Route{
		{Method: "GET", Pattern: "/workers/connect", Kind: wire.WorkerRoute, Handler: http.HandlerFunc(h.workerConnect)},
		{Method: "POST", Pattern: "/workers/{worker}/runs/{run}", Kind: wire.WorkerRoute, Handler: http.HandlerFunc(h.workerBatch)},
		{Method: "POST", Pattern: "/workers/{worker}/heartbeat", Kind: wire.WorkerRoute, Handler: http.HandlerFunc(h.workerHeartbeat)},
		{Method: "DELETE", Pattern: "/workers/{worker}", Kind: wire.WorkerRoute, Handler: http.HandlerFunc(h.workerLeave)},
		{Method: "DELETE", Pattern: "/workers/assistants/{assistant}", Kind: wire.WorkerRoute, Handler: http.HandlerFunc(h.releaseAssistant)},
	}
}

// owner is the name a worker's calls are checked against: its principal.
func owner(r *http.Request) string {
	if p := auth.FromContext(r.Context()); p != nil {
		return p.Subject
	}
	return ""
}

// workerConnect serves GET /workers/connect: it registers the worker and
// streams it what it is sent, one JSON object per line, starting with
// ready, with a ping when quiet. The stream ends when the worker is lost,
// when another connection of the same worker takes over, or when the
// client goes; the worker's runs stay its own until its lease runs out.
func (h *Handler) workerConnect(w http.ResponseWriter, r *http.Request) {
	var assistants []string
	for _, a := range strings.Split(r.URL.Query().Get("assistants"), ",") {
		if a = strings.TrimSpace(a); a != "" {
			assistants = append(assistants, a)
		}
	}
	if len(assistants) == 0 || len(assistants) > maxWorkerAssistants {
		httpjson.Write(w, http.StatusBadRequest, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "assistants: name from 1 to %d assistant ids, comma-separated (?assistants=a,b)", maxWorkerAssistants))
		return
	}
	for _, a := range assistants {
		if err := server.ValidName(a, maxAssistantIDLength); err != nil {
			httpjson.Write(w, http.StatusBadRequest, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "assistants: %q: %v", a, err))
			return
		}
	}
	maxRuns := 0
	if v := r.URL.Query().Get("max_runs"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			httpjson.Write(w, http.StatusBadRequest, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "max_runs: a whole number from 1"))
			return
		}
		maxRuns = n
	}
	id := r.Header.Get(WorkerHeader)
	if id != "" {
		if err := server.ValidName(id, 256); err != nil {
			httpjson.Write(w, http.StatusBadRequest, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "%s: %v", WorkerHeader, err))
			return
		}
	}
	hello := server.WorkerHello{ID: id, Owner: owner(r), Assistants: assistants, MaxRuns: maxRuns}
	if p := auth.FromContext(r.Context()); p != nil {
		hello.Grant = &server.AssistantGrant{Admin: p.Admin, Patterns: p.Assistants, Match: auth.Glob}
	}
	wk, err := h.srv.Workers().Connect(hello)
	if err != nil {
		if errors.Is(err, server.ErrTooManyWorkers) {
			h.metrics.Refused(string(server.LimitWorkers))
		}
		httpjson.WriteRefusal(w, err)
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", ndjsonType)
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	lease := h.srv.Workers().Lease()
	heartbeat := max(lease/3, 10*time.Millisecond)
	write := func(m protocol.WorkerMessageVariant) bool {
		b, err := json.Marshal(protocol.WorkerMessage{Value: m})
		if err != nil {
			return false
		}
		_ = rc.SetWriteDeadline(time.Now().Add(workerWriteTimeout))
		if _, err := w.Write(append(b, '\n')); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write(&protocol.WorkerReady{WorkerID: wk.ID(), LeaseMs: protocol.JsUint(lease.Milliseconds()), HeartbeatMs: protocol.JsUint(heartbeat.Milliseconds())}) {
		return
	}
	ping := time.NewTicker(heartbeat)
	defer ping.Stop()
	replaced := wk.Replaced()
	for {
		select {
		case m, ok := <-wk.Messages():
			if !ok {
				return // lost
			}
			if !write(m) {
				return
			}
		case <-ping.C:
			if !write(&protocol.WorkerPing{}) {
				return
			}
		case <-replaced:
			return
		case <-r.Context().Done():
			return
		}
	}
}

// releaseAssistant serves DELETE /workers/assistants/{assistant}: an
// admin lets go of the principal that owns an assistant id by having
// served it first (204; 404 when nobody owns it). Workers connected keep
// serving it; the next principal to serve it owns it.
func (h *Handler) releaseAssistant(w http.ResponseWriter, r *http.Request) {
	if p := auth.FromContext(r.Context()); p != nil && !p.Admin {
		httpjson.Write(w, http.StatusForbidden, protocol.NewError(nil, protocol.ErrorCodePermissionDenied, "%q may not release an assistant id: an admin's credential is needed", p.Subject))
		return
	}
	if !h.srv.Workers().Release(r.PathValue("assistant")) {
		httpjson.Write(w, http.StatusNotFound, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "nobody owns assistant %q", r.PathValue("assistant")))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// workerHeartbeat serves POST /workers/{worker}/heartbeat.
func (h *Handler) workerHeartbeat(w http.ResponseWriter, r *http.Request) {
	if err := h.srv.Workers().Alive(r.PathValue("worker"), owner(r)); err != nil {
		httpjson.Write(w, http.StatusNotFound, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "%v", err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// workerLeave serves DELETE /workers/{worker}: a worker that stops says
// so, and its runs fail at once (worker lost: it stopped) instead of when
// its lease runs out; its assistants' next runs go to other workers.
func (h *Handler) workerLeave(w http.ResponseWriter, r *http.Request) {
	if err := h.srv.Workers().Disconnect(r.PathValue("worker"), owner(r), "the worker stopped"); err != nil {
		httpjson.Write(w, http.StatusNotFound, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "%v", err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// workerBatch serves POST /workers/{worker}/runs/{run}: a batch of
// operations on one of the worker's runs (a JSON array or NDJSON), checked
// whole before any is applied, then applied in order.
func (h *Handler) workerBatch(w http.ResponseWriter, r *http.Request) {
	var seq uint64
	if v := r.Header.Get(ProducerSeqHeader); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			httpjson.Write(w, http.StatusBadRequest, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "%s: a whole number from 1", ProducerSeqHeader))
			return
		}
		seq = n
	}
	items, ok := h.readBatch(w, r, "batch of operations", "operations")
	if !ok {
		return
	}
	ops, errResp := h.workerOps(items)
	if errResp != nil {
		h.refuseBatch(w, errResp)
		return
	}
	res, err := h.srv.Workers().Publish(r.PathValue("worker"), owner(r), r.PathValue("run"), server.WorkerBatch{Seq: seq, Ops: ops})
	if err != nil {
		status, e := httpjson.Refusal(err)
		if res != nil && len(res.Seqs) > 0 {
			e.Message += fmt.Sprintf(" (the batch's first %d events were published)", len(res.Seqs))
		}
		httpjson.Write(w, status, e)
		return
	}
	httpjson.Write(w, http.StatusOK, res)
}

// workerOps reads a batch's operations. An emit's event is checked as a
// producer's event is (the protocol's schema, without seq and event_id);
// the other operations by the strict decoder of their generated types.
// The first bad one refuses the batch, its message starting with its
// index.
func (h *Handler) workerOps(items [][]byte) ([]server.WorkerOp, *protocol.ErrorResponse) {
	ops := make([]server.WorkerOp, 0, len(items))
	for i, item := range items {
		// The envelope in one pass, its member names matched exactly; the
		// event is read by ProducerEvents.
		var opName, extra string
		var event []byte
		err := cddlrt.EachMember(item, func(k string, raw []byte) error {
			switch k {
			case "op":
				return json.Unmarshal(raw, &opName)
			case "event":
				event = raw
			default:
				if extra == "" {
					extra = strings.Clone(k) // k aliases the body
				}
			}
			return nil
		})
		if err != nil {
			return nil, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "[%d]: an operation is a JSON object with a text member \"op\"", i)
		}
		if opName == "emit" {
			if extra != "" {
				return nil, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "[%d].%s: not a member of an emit operation (rule WorkerEmit)", i, extra)
			}
			if event == nil {
				return nil, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "[%d]: missing members: 'event' (rule WorkerEmit)", i)
			}
			evs, errResp := h.decoder.ProducerEvents([][]byte{event}, h.ingest.MaxEventBytes)
			if errResp != nil {
				errResp.Message = fmt.Sprintf("[%d].event%s", i, strings.TrimPrefix(errResp.Message, "[0]"))
				return nil, errResp
			}
			ops = append(ops, server.WorkerOp{Emit: &evs[0]})
			continue
		}
		var op protocol.WorkerOp
		if err := cddlrt.DecodeStrictJSON(item, &op); err != nil {
			return nil, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "%v", cddlrt.At(fmt.Sprintf("[%d]", i), err))
		}
		switch v := op.Value.(type) {
		case *protocol.WorkerInterrupt:
			ops = append(ops, server.WorkerOp{Interrupt: v})
		case *protocol.WorkerEnd:
			ops = append(ops, server.WorkerOp{End: v})
		default:
			return nil, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "[%d].op: one of emit, interrupt, end", i)
		}
	}
	return ops, nil
}

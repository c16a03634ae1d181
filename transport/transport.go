// Package transport mounts agentstream's wire transports on one HTTP
// handler: the routes of the protocol's spec and of the official SDK.
//
//	POST /threads/{id}/stream, /threads/{id}/stream/events   SSE (EventStreamRequest body)
//	GET  same paths, without an upgrade                       SSE for EventSource (query filter, Last-Event-ID)
//	GET  same paths, with an upgrade                          the thread's WebSocket
//	POST /threads/{id}/commands                               one JSON command, one JSON response
//	GET  /threads/{id}/state                                  values, pending interrupts, latest checkpoint
//	POST /threads/{id}/events                                 a producer's batch of events
//	GET  /workers/connect, POST /workers/{worker}/...          remote workers (worker.go)
//	POST /minimal/stream                                      the minimal token stream, with Options.Profiles (package minimal)
//	/jobs, /jobs/{job_id}/{envelopes,complete,stream}         the job stream, with Options.Profiles (package jobs)
//	/instance-ai/{chat,confirm,events,threads}/...            Instance AI, with Options.Profiles (package instanceai)
//	/v1/{chat/completions,responses,models}                   OpenAI-compatible, with Options.Profiles (package openai)
//	GET  /healthz, /readyz                                    liveness and readiness
//	GET  /metrics                                             Prometheus metrics
//
// Every set of routes is a wire (package wire): the protocol's own, the
// workers', and each profile's; New registers the enabled wires' routes in
// one loop, each behind the guard of its kind, and hands every wire one
// wire.Context. The subpackages sse, ws and inproc own each transport of
// the protocol (sse also serves the other wires' streams); this package
// owns the routing, the guards, the commands and state endpoints, the
// metrics (the wire.Observer of every stream), and, when
// Options.Auth is set, the authentication of every request: each route
// under /threads/{id} authenticates the request's credential and asks the
// server whether its principal may use the thread (server.Authorize)
// before anything else, /metrics is for admins, and /healthz and /readyz
// stay open.
package transport

import (
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/internal/keyrate"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport/instanceai"
	"github.com/agentstream/agentstream/transport/internal/httpjson"
	"github.com/agentstream/agentstream/transport/internal/longlived"
	"github.com/agentstream/agentstream/transport/jobs"
	"github.com/agentstream/agentstream/transport/langgraph"
	"github.com/agentstream/agentstream/transport/minimal"
	"github.com/agentstream/agentstream/transport/openai"
	"github.com/agentstream/agentstream/transport/sse"
	"github.com/agentstream/agentstream/transport/wire"
	"github.com/agentstream/agentstream/transport/ws"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The other wires a Handler may serve (Options.Profiles).
const (
	// ProfileMinimal is the minimal token stream (seed 003): POST
	// /minimal/stream (package minimal).
	ProfileMinimal = "minimal"
	// ProfileJobs is the job stream (seed 001): /jobs routes (package
	// jobs).
	ProfileJobs = "jobs"
	// ProfileInstanceAI is n8n's Instance AI chat (seeds 000 and 002):
	// /instance-ai routes (package instanceai).
	ProfileInstanceAI = "instance-ai"
	// ProfileOpenAI is the OpenAI-compatible wires: /v1/chat/completions,
	// /v1/responses, /v1/models (package openai).
	ProfileOpenAI = "openai"
	// ProfileLangGraph is the LangGraph Platform API's resources:
	// /threads, /threads/search, /assistants/... (package langgraph).
	ProfileLangGraph = "langgraph"
)

// profileWires are the wires Options.Profiles may name, each with how it
// is built on the transport's context, in the order they are listed.
var profileWires = []struct {
	name  string
	build func(c wire.Context, opts *Options) wire.Wire
}{
	{ProfileMinimal, func(c wire.Context, _ *Options) wire.Wire { return minimal.New(c) }},
	{ProfileJobs, func(c wire.Context, _ *Options) wire.Wire { return jobs.New(c) }},
	{ProfileInstanceAI, func(c wire.Context, o *Options) wire.Wire {
		return instanceai.New(c, instanceai.Options{Assistant: o.InstanceAIAssistant})
	}},
	{ProfileOpenAI, func(c wire.Context, _ *Options) wire.Wire { return openai.New(c, openai.Options{}) }},
	{ProfileLangGraph, func(c wire.Context, o *Options) wire.Wire { return langgraph.NewWithWebhooks(c, o.Webhooks) }},
}

// Profiles lists the wires Options.Profiles may name.
var Profiles = func() []string {
	var names []string
	for _, p := range profileWires {
		names = append(names, p.name)
	}
	return names
}()

// profileWire builds the wire a profile names on the transport's context
// (nil for a name no wire has).
func profileWire(name string, c wire.Context, opts *Options) wire.Wire {
	for _, p := range profileWires {
		if p.name == name {
			return p.build(c, opts)
		}
	}
	return nil
}

// Options configure the handler.
type Options struct {
	SSE sse.Options
	WS  ws.Options
	// Registry receives the metrics (a new one when nil).
	Registry *prometheus.Registry
	// Playground, when set, serves the page at / and its assets under
	// /playground/ (package playground), with no authentication: the page
	// is static, and asks for a token itself.
	Playground http.Handler
	// MaxCommandBody caps a command's body (1 MiB).
	MaxCommandBody int64
	// BodyTimeout bounds reading a command's body (DefaultBodyTimeout,
	// 10s): a client that sends it slower, or promises more than it sends,
	// gets 408 instead of holding a goroutine for ever.
	BodyTimeout time.Duration
	// Hosts, when not empty, lists the Host names (path.Match patterns,
	// without the port) the handler answers; a request for any other gets
	// 403. A server listening on loopback sets it to the loopback names, so
	// that a web page whose DNS name was rebound to 127.0.0.1 cannot reach
	// it (agentstream serve's --allowed-hosts adds names).
	Hosts []string
	// CORSOrigins lists the origins whose browser pages may call the HTTP
	// routes (streams, commands, state) across origins, as host patterns
	// in ws.Options.OriginPatterns' syntax ("*" for every origin,
	// LoopbackOrigins for pages served from loopback names). Empty: no
	// CORS headers, so browsers allow the server's own origin only.
	CORSOrigins []string
	// Webhooks bound the Platform API's run webhooks (--profiles
	// langgraph): the egress guard, the timeout, the retries, how many
	// may wait.
	Webhooks langgraph.WebhookOptions
	// Auth, when set, authenticates every request but /healthz and
	// /readyz: no credential or a bad one gets 401 (unauthenticated) with
	// WWW-Authenticate: Bearer, a principal that may not use the thread
	// 403 (permission_denied), and /metrics needs an admin. Nil: the
	// server is open to whoever reaches it.
	Auth *auth.Authenticator
	// MetricsOpen serves /metrics without authentication even with Auth
	// set (for a handler on a separate, private listener).
	MetricsOpen bool
	// HTTPCommandRate is how many commands a second one client may send
	// to POST /threads/{id}/commands on average (DefaultHTTPCommandRate,
	// 1,000), with bursts of HTTPCommandBurst (DefaultHTTPCommandBurst,
	// 10,000: a backend that starts thousands of runs at once is one
	// client); a client is its principal with Auth set, its IP address
	// without. Over it: 429 rate_limited with Retry-After.
	HTTPCommandRate  float64
	HTTPCommandBurst int
	// HTTPStreamRate is how many streams (SSE, and WebSocket handshakes)
	// a second one client may open on average (DefaultHTTPStreamRate,
	// 100), with bursts of HTTPStreamBurst (DefaultHTTPStreamBurst,
	// 1,000); a client as for HTTPCommandRate. Over it: 429 rate_limited.
	HTTPStreamRate  float64
	HTTPStreamBurst int
	// AuthFailureRate is how many failed authentications a second one IP
	// address may make on average (DefaultAuthFailureRate, 10), with
	// bursts of AuthFailureBurst (DefaultAuthFailureBurst, 100); past it
	// its requests get 429 rate_limited before their credential is read.
	AuthFailureRate  float64
	AuthFailureBurst int
	// MaxStreamsPerPrincipal caps the SSE streams and WebSockets one
	// principal has open at once (DefaultMaxStreamsPerPrincipal, 1,000);
	// admins are exempt. Over it: 429 resource_exhausted.
	MaxStreamsPerPrincipal int
	// Ingest bounds what producers publish (POST /threads/{id}/events);
	// zero fields: the defaults.
	Ingest IngestOptions
	// Profiles are the other wires served beside the protocol's
	// (ProfileMinimal); none by default.
	Profiles []string
	// InstanceAIAssistant is the assistant Instance AI's chat runs
	// (instanceai.DefaultAssistant, the built-in demo, when empty).
	InstanceAIAssistant string
	// Decode bounds the nesting and the number of values of a command or
	// stream request (protocol.DecodeLimits; zero fields: the defaults),
	// on every route and the WebSocket: over it, refused before decoding.
	Decode protocol.DecodeLimits
	// Ready, when set, is asked by /readyz too: an error (the Redis engine
	// cannot reach Redis) answers 503.
	Ready func(context.Context) error
	// UpstreamState, when set (edge mode), answers GET /threads/{id}/state
	// with the upstream's answer (edge.Edge.State).
	UpstreamState func(ctx context.Context, thread string, query url.Values) (status int, body []byte, err error)
	// UpstreamProxy, when set (edge mode), gets every request no route
	// here serves (the LangGraph Platform API's threads, runs,
	// assistants, store and run streams: edge.Edge.Proxy), after the
	// checks of its kind: see proxied.
	UpstreamProxy http.Handler
}

// DefaultBodyTimeout is Options.BodyTimeout's default.
const DefaultBodyTimeout = 10 * time.Second

// LoopbackHosts are the Host names of a server on loopback.
var LoopbackHosts = []string{"localhost", "127.0.0.1", "::1", "*.localhost"}

// Handler is the HTTP face of a server.
type Handler struct {
	srv     *server.Server
	mux     *http.ServeMux
	sse     *sse.Handler
	ws      *ws.Handler
	metrics *metrics
	ready   atomic.Bool
	maxBody int64

	corsOrigins []string
	hosts       []string
	bodyTimeout time.Duration
	auth        *auth.Authenticator
	reg         *prometheus.Registry
	limiter     *keyrate.Limiter // commands per client
	// streamLimiter: streams opened per client (SSE and WebSocket).
	streamLimiter *keyrate.Limiter
	decoder       protocol.Decoder
	authFailures  *keyrate.Limiter // failed authentications per IP address
	streams       *streamQuota     // open streams and WebSockets per principal
	readyCheck    func(context.Context) error
	upstreamState func(ctx context.Context, thread string, query url.Values) (int, []byte, error)
	ingest        IngestOptions
	ingestLimiter *keyrate.Limiter // events published per producer
	// edge: the threads are an upstream's, which may read several
	// spellings of a UUID as one (canonicalThreadID).
	edge      bool
	runOwners runOwners // stateless runs started through the edge
}

// withDefaults is o with every field left zero set to its default, and
// the SSE and WebSocket handlers' settings that follow the handler's own
// (the body timeout, the decode limits, authentication) set from them.
func (o Options) withDefaults() Options {
	if o.SSE.BodyTimeout == 0 {
		o.SSE.BodyTimeout = o.BodyTimeout // one setting for both routes that read a body
	}
	o.WS.Auth = o.Auth
	if o.WS.Decode == (protocol.DecodeLimits{}) {
		o.WS.Decode = o.Decode
	}
	if o.SSE.Decode == (protocol.DecodeLimits{}) {
		o.SSE.Decode = o.Decode
	}
	if o.MaxCommandBody <= 0 {
		o.MaxCommandBody = 1 << 20
	}
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = DefaultBodyTimeout
	}
	if o.HTTPCommandRate <= 0 {
		o.HTTPCommandRate = DefaultHTTPCommandRate
	}
	if o.HTTPCommandBurst <= 0 {
		o.HTTPCommandBurst = DefaultHTTPCommandBurst
	}
	if o.HTTPStreamRate <= 0 {
		o.HTTPStreamRate = DefaultHTTPStreamRate
	}
	if o.HTTPStreamBurst <= 0 {
		o.HTTPStreamBurst = DefaultHTTPStreamBurst
	}
	if o.AuthFailureRate <= 0 {
		o.AuthFailureRate = DefaultAuthFailureRate
	}
	if o.AuthFailureBurst <= 0 {
		o.AuthFailureBurst = DefaultAuthFailureBurst
	}
	if o.MaxStreamsPerPrincipal <= 0 {
		o.MaxStreamsPerPrincipal = DefaultMaxStreamsPerPrincipal
	}
	return o
}

// New builds the handler for srv.
func New(srv *server.Server, opts Options) *Handler {
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := newMetrics(reg, srv)
	opts = opts.withDefaults()
	opts.SSE.Observer = wire.Join(opts.SSE.Observer, m)
	opts.WS.Observer = wire.Join(opts.WS.Observer, m)
	h := &Handler{srv: srv, mux: http.NewServeMux(), sse: sse.New(srv, opts.SSE), ws: ws.New(srv, opts.WS), metrics: m, maxBody: opts.MaxCommandBody,
		corsOrigins: ExpandOrigins(opts.CORSOrigins), hosts: opts.Hosts, bodyTimeout: opts.BodyTimeout, auth: opts.Auth, reg: reg, readyCheck: opts.Ready, upstreamState: opts.UpstreamState,
		edge: opts.UpstreamProxy != nil || opts.UpstreamState != nil}
	h.limiter = keyrate.New(opts.HTTPCommandRate, opts.HTTPCommandBurst)
	h.streamLimiter = keyrate.New(opts.HTTPStreamRate, opts.HTTPStreamBurst)
	h.authFailures = keyrate.New(opts.AuthFailureRate, opts.AuthFailureBurst)
	h.streams = &streamQuota{max: opts.MaxStreamsPerPrincipal, open: map[string]int{}}
	h.decoder = protocol.Decoder{Limits: opts.Decode, OnLimit: func(limit string) { m.Refused("command_" + limit) }}
	h.ingest = opts.Ingest.withDefaults()
	h.ingestLimiter = keyrate.New(h.ingest.Rate, h.ingest.Burst)
	interval := func(name, help string, f func() time.Duration) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f().Seconds() })
	}
	reg.MustRegister(
		interval("agentstream_sse_write_interval_seconds", "The least time between two writes of one SSE stream now (it grows while the server is behind).", h.sse.WriteInterval),
		interval("agentstream_websocket_write_interval_seconds", "The least time between two writes of one WebSocket now (it grows while the server is behind).", h.ws.WriteInterval),
	)
	h.ready.Store(true)
	c := wire.Context{
		Server: srv,
		Authorize: func(w http.ResponseWriter, r *http.Request, thread string, create bool) bool {
			return h.authorize(w, auth.FromContext(r.Context()), thread, create)
		},
		ReadBatch:     h.readBatch,
		MaxEventBytes: h.ingest.MaxEventBytes,
		BodyTimeout:   h.bodyTimeout,
		Decode:        opts.Decode,
		Heartbeat:     wire.DefaultHeartbeat,
		Streams:       h.sse,
		Observer:      m,
	}
	wires := []wire.Wire{protocolWire{h}, workerWire{h}}
	for _, p := range opts.Profiles {
		if w := profileWire(p, c, &opts); w != nil {
			wires = append(wires, w)
		}
	}
	// A profile's route replaces the core's of the same method and
	// pattern (the Platform API's GET /threads/{id}/state, a superset of
	// the protocol's).
	var routes []wire.Route
	at := map[string]int{}
	for _, w := range wires {
		for _, rt := range w.Routes() {
			key := rt.Method + " " + rt.Pattern
			if i, ok := at[key]; ok {
				routes[i] = rt
				continue
			}
			at[key] = len(routes)
			routes = append(routes, rt)
		}
	}
	for _, rt := range routes {
		h.mux.Handle(rt.Method+" "+rt.Pattern, h.route(rt))
	}
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	h.mux.HandleFunc("GET /readyz", h.readyz)
	var metricsHandler http.Handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	if h.auth != nil && !opts.MetricsOpen {
		metricsHandler = h.adminOnly(metricsHandler)
	}
	h.mux.Handle("GET /metrics", metricsHandler)
	if opts.Playground != nil {
		h.mux.Handle("GET /{$}", opts.Playground)
		h.mux.Handle("GET /playground/", opts.Playground)
	}
	if opts.UpstreamProxy != nil {
		h.mux.Handle("/", h.proxied(opts.UpstreamProxy))
	}
	return h
}

// protocolWire is the protocol's own routes: its streams (SSE, and the
// WebSocket on GET with an upgrade), commands, producer ingest and state,
// each under /threads/{id}.
type protocolWire struct{ h *Handler }

func (p protocolWire) Routes() []wire.Route {
	h := p.h
	var rs []wire.Route
	for _, path := range []string{"/threads/{id}/stream", "/threads/{id}/stream/events"} {
		rs = append(rs,
			wire.Route{Method: "POST", Pattern: path, Kind: wire.StreamRoute, PathThread: true, Handler: h.sse},
			wire.Route{Method: "GET", Pattern: path, Kind: wire.StreamRoute, PathThread: true, Handler: http.HandlerFunc(h.streamGET)})
	}
	return append(rs,
		wire.Route{Method: "POST", Pattern: "/threads/{id}/commands", Kind: wire.CommandRoute, PathThread: true, Handler: http.HandlerFunc(h.command)},
		wire.Route{Method: "POST", Pattern: "/threads/{id}/events", Kind: wire.IngestRoute, PathThread: true, Handler: http.HandlerFunc(h.publish)},
		wire.Route{Method: "GET", Pattern: "/threads/{id}/state", Kind: wire.ReadRoute, PathThread: true, Handler: http.HandlerFunc(h.state)},
	)
}

// MetricsHandler serves /metrics, /healthz and /readyz with no
// authentication, for a separate listener that only operators reach
// (agentstream serve --metrics-addr).
func (h *Handler) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(h.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", h.readyz)
	return mux
}

// guard authenticates and authorizes a request for thread
// r.PathValue("id") before next serves it, and passes the principal on in
// the request's context (auth.FromContext). A route that would create the
// thread (create) claims an unknown thread for the principal; a read of an
// unknown thread is 404. With authentication off it checks the thread id
// only.
func (h *Handler) guard(next http.HandlerFunc, kind wire.Kind) http.Handler {
	return h.guardRoute(wire.Route{Kind: kind, Handler: next})
}

// guardRoute is guard for a wire's route whose path names its thread,
// with the route's choices (wire.Route.HandlerAuthorizes,
// BadThreadStatus).
func (h *Handler) guardRoute(rt wire.Route) http.Handler {
	next, kind := rt.Handler.ServeHTTP, rt.Kind
	bad := rt.BadThreadStatus
	if bad == 0 {
		bad = http.StatusBadRequest
	}
	create := kind != wire.ReadRoute
	if rt.HandlerAuthorizes {
		admitted := h.wireGuard(kind, rt.Handler)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if h.threadOK(w, r, bad) {
				admitted.ServeHTTP(w, r)
			}
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.threadOK(w, r, bad) {
			return
		}
		r, p, done, ok := h.admit(w, r, kind)
		if !ok {
			return
		}
		defer done()
		if h.auth == nil {
			next(w, r)
			return
		}
		if kind == wire.IngestRoute && !p.Admin && !p.Producer {
			// Before Authorize, which would claim a new thread for it.
			h.metrics.AuthRefused("permission_denied")
			httpjson.Write(w, http.StatusForbidden, protocol.NewError(nil, protocol.ErrorCodePermissionDenied, "%q may not publish events: a producer's credential is needed (a JWT with role producer, an API key listed with producer)", p.Subject))
			return
		}
		if !h.authorize(w, p, r.PathValue("id"), create) {
			return
		}
		next(w, r.WithContext(auth.NewContext(r.Context(), p)))
	})
}

// streamSlot takes one of the principal's stream slots for the request
// (--max-streams-per-principal; admins and requests without a principal
// take none), answering 429 when it has none left; done gives it back.
func (h *Handler) streamSlot(w http.ResponseWriter, r *http.Request, p *auth.Principal) (_ *http.Request, done func(), ok bool) {
	if p == nil || p.Admin {
		return r, func() {}, true
	}
	release, ok := h.streams.take(p.Subject)
	if !ok {
		h.metrics.Refused("principal_streams")
		httpjson.Write(w, http.StatusTooManyRequests, protocol.NewError(nil, protocol.ErrorCodeResourceExhausted, "principal %q has %d streams and WebSockets open, its most (--max-streams-per-principal)", p.Subject, h.streams.max))
		return r, nil, false
	}
	ctx, sl := longlived.WithSlot(r.Context(), release)
	return r.WithContext(ctx), sl.Done, true
}

// authorize asks the server whether principal p may use the thread
// (creating it when create is set; server.Authorize), and answers the
// request with the refusal when it may not. A nil p (authentication off)
// may.
func (h *Handler) authorize(w http.ResponseWriter, p *auth.Principal, threadID string, create bool) bool {
	if h.edge {
		if err := canonicalThreadID(threadID); err != nil {
			h.metrics.Refused(string(server.LimitThreadID))
			httpjson.Write(w, http.StatusBadRequest, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "%v", err))
			return false
		}
	}
	if p == nil {
		return true
	}
	err := h.srv.Authorize(p, threadID, create)
	if err == nil {
		return true
	}
	switch {
	case errors.Is(err, server.ErrTooManyThreads):
		h.metrics.Refused(string(server.LimitThreads))
	case errors.Is(err, server.ErrPermissionDenied):
		h.metrics.AuthRefused("permission_denied")
	}
	httpjson.WriteRefusal(w, err)
	return false
}

// route puts a wire's route behind the guard of its kind: a route whose
// path names its thread is checked and authorized for it (guard); a
// worker's needs a producer (workerGuard); any other (a wire's that names
// its thread in the body or makes one) is admitted under its kind's rules
// and asks wire.Context.Thread once it knows its thread (wireGuard).
func (h *Handler) route(rt wire.Route) http.Handler {
	var g http.Handler
	switch {
	case rt.Kind == wire.WorkerRoute:
		g = h.workerGuard(rt.Handler.ServeHTTP)
	case rt.PathThread:
		g = h.guardRoute(rt)
	default:
		g = h.wireGuard(rt.Kind, rt.Handler)
	}
	if rt.Outer != nil {
		g = rt.Outer(g)
	}
	return g
}

// wireGuard admits a request of one of the other wires' routes, which
// name their thread in the body or make one (transport/minimal), under
// the rules of routes of kind: a stream's (the principal's stream slots,
// the stream rate), a command's (the command rate), a read's (neither, nor
// the same-site rules), or a producer's (IngestRoute: NDJSON bodies
// allowed, the producer rate, counted as the items are read). The wire
// asks authorize for the thread once it knows it; the principal goes on
// in the request's context.
func (h *Handler) wireGuard(kind wire.Kind, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r, p, done, ok := h.admit(w, r, kind)
		if !ok {
			return
		}
		defer done()
		if p != nil {
			r = r.WithContext(auth.NewContext(r.Context(), p))
		}
		next.ServeHTTP(w, r)
	})
}

// admit applies what every route of kind is under before its thread is
// known: the same-site rules (but for reads), authentication (the
// principal, nil with it off), the rate limits of streams and commands,
// and a stream's slot of the principal's, which done gives back. ok is
// false once it has answered the request itself.
func (h *Handler) admit(w http.ResponseWriter, r *http.Request, kind wire.Kind) (_ *http.Request, p *auth.Principal, done func(), ok bool) {
	done = func() {}
	if kind != wire.ReadRoute && !h.sameSite(w, r, kind) {
		return r, nil, done, false
	}
	if h.auth != nil {
		if p, ok = h.authenticate(w, r); !ok {
			return r, nil, done, false
		}
	}
	if kind != wire.ReadRoute && kind != wire.IngestRoute && !h.rateOK(w, r, kind, p) {
		return r, nil, done, false
	}
	if kind == wire.StreamRoute {
		if r, done, ok = h.streamSlot(w, r, p); !ok {
			return r, nil, func() {}, false
		}
	}
	return r, p, done, true
}

// sameSite applies the rules of every route that changes or creates
// state, so that a web page of another site cannot use them through a
// visitor's browser: a request from another origin must come from an
// allowed one (--allowed-origins); one that a browser says is cross-site
// but sent without an Origin (an image, a no-cors fetch) is refused
// unless every origin is allowed; and a POST must say its body is JSON
// (a form or a no-cors fetch cannot), except a stream request or a command
// with no body at all (Instance AI's cancel): a cross-site page's request
// without a body still carries its Origin. WebSocket handshakes are checked by the WebSocket handler's own
// origin patterns.
func (h *Handler) sameSite(w http.ResponseWriter, r *http.Request, kind wire.Kind) bool {
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return true
	}
	o := r.Header.Get("Origin")
	if o != "" && !sameOrigin(o, r.Host) && !allowedOrigin(h.corsOrigins, o) {
		h.metrics.Refused("origin")
		httpjson.Write(w, http.StatusForbidden, protocol.NewError(nil, protocol.ErrorCodePermissionDenied, "origin %q may not use this route (--allowed-origins)", o))
		return false
	}
	if o == "" && r.Header.Get("Sec-Fetch-Site") == "cross-site" && !everyOrigin(h.corsOrigins) {
		h.metrics.Refused("origin")
		httpjson.Write(w, http.StatusForbidden, protocol.NewError(nil, protocol.ErrorCodePermissionDenied, "a cross-site request without an Origin may not use this route"))
		return false
	}
	ct := r.Header.Get("Content-Type")
	switch r.Method {
	case http.MethodPost:
	case http.MethodPut, http.MethodPatch, http.MethodDelete:
		// Every method with a body says it is JSON; one without a body
		// (a DELETE) needs no Content-Type.
		if ct == "" && !hasBody(r) {
			return true
		}
	default:
		return true
	}
	if (kind == wire.StreamRoute || kind == wire.CommandRoute || kind == wire.WorkerRoute) && ct == "" && r.ContentLength == 0 {
		return true
	}
	mt, _, _ := mime.ParseMediaType(ct)
	if (kind == wire.IngestRoute || kind == wire.WorkerRoute) && mt == ndjsonType {
		return true
	}
	if mt != "application/json" {
		h.metrics.Refused("content_type")
		what := "a command's"
		switch kind {
		case wire.StreamRoute:
			what = "a stream request's"
		case wire.IngestRoute:
			what = "a batch of events' (or application/x-ndjson)"
		case wire.WorkerRoute:
			what = "a worker's request's (or application/x-ndjson; none without a body)"
		}
		httpjson.Write(w, http.StatusUnsupportedMediaType, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "%s Content-Type must be application/json, not %q", what, ct))
		return false
	}
	return true
}

// rateOK takes a token from the client's bucket for the route: its
// principal's with authentication on, its IP address's without.
func (h *Handler) rateOK(w http.ResponseWriter, r *http.Request, kind wire.Kind, p *auth.Principal) bool {
	client := clientKey(r, p)
	lim, limit, flags := h.limiter, "http_command_rate", "--http-command-rate, --http-command-burst"
	what := "commands"
	if kind == wire.StreamRoute {
		lim, limit, flags, what = h.streamLimiter, "http_stream_rate", "--http-stream-rate, --http-stream-burst", "streams"
	}
	if lim.Allow(client, time.Now()) {
		return true
	}
	h.metrics.Refused(limit)
	w.Header().Set("Retry-After", "1")
	httpjson.Write(w, http.StatusTooManyRequests, protocol.NewError(nil, protocol.ErrorCodeRateLimited, "more than %g %s a second from this client (bursts of %d; %s); wait and retry", float64(lim.Rate), what, lim.Burst, flags))
	return false
}

// clientKey names the client a per-client limit counts for: its
// principal with authentication on, its IP address without.
func clientKey(r *http.Request, p *auth.Principal) string {
	if p != nil {
		return "principal:" + p.Subject
	}
	return remoteIP(r.RemoteAddr)
}

// authenticate returns the principal of the request's credential, or
// answers 401 with WWW-Authenticate: Bearer (RFC 6750).
func (h *Handler) authenticate(w http.ResponseWriter, r *http.Request) (*auth.Principal, bool) {
	ip := remoteIP(r.RemoteAddr)
	if h.authFailures.Exhausted(ip, time.Now()) {
		h.metrics.Refused("auth_failure_rate")
		w.Header().Set("Retry-After", "1")
		httpjson.Write(w, http.StatusTooManyRequests, protocol.NewError(nil, protocol.ErrorCodeRateLimited, "too many failed authentications from this address (--auth-failure-rate %g/s, bursts of %d); wait and retry", float64(h.authFailures.Rate), h.authFailures.Burst))
		return nil, false
	}
	p, err := h.auth.FromRequest(r)
	if err == nil {
		return p, true
	}
	h.authFailures.Allow(ip, time.Now()) // a failure takes a token
	challenge := `Bearer realm="agentstream"`
	reason := "no_credential"
	if !errors.Is(err, auth.ErrNoCredential) {
		challenge += `, error="invalid_token"`
		reason = "invalid_credential"
		if errors.Is(err, auth.ErrExpired) {
			reason = "expired"
		}
	}
	h.metrics.AuthRefused(reason)
	w.Header().Set("WWW-Authenticate", challenge)
	httpjson.Write(w, http.StatusUnauthorized, protocol.NewError(nil, protocol.ErrorCodeUnauthenticated, "%v", err))
	return nil, false
}

// adminOnly serves next to admins only.
func (h *Handler) adminOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := h.authenticate(w, r)
		if !ok {
			return
		}
		if !p.Admin {
			h.metrics.AuthRefused("permission_denied")
			httpjson.Write(w, http.StatusForbidden, protocol.NewError(nil, protocol.ErrorCodePermissionDenied, "%q is not an admin: /metrics is for admins (or serve it on --metrics-addr)", p.Subject))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if len(h.hosts) > 0 && !allowedHost(h.hosts, r.Host) {
		h.metrics.Refused("host")
		httpjson.Write(w, http.StatusForbidden, protocol.NewError(nil, protocol.ErrorCodePermissionDenied, "host %q is not served here (--allowed-hosts)", r.Host))
		return
	}
	if h.cors(w, r) {
		return
	}
	if hasBody(r) {
		// A body is read within --body-timeout, by every route that reads
		// one (httpjson.ReadBody moves this deadline, then clears it);
		// one refused before it is read (no credential, a limit) is not
		// waited for past it either, however slowly it trickles in.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(h.bodyTimeout))
	}
	h.mux.ServeHTTP(w, r)
}

// threadOK answers 400 for a request whose path names no valid thread.
func (h *Handler) threadOK(w http.ResponseWriter, r *http.Request, status int) bool {
	err := server.ValidThreadID(r.PathValue("id"))
	if err == nil && h.edge {
		err = canonicalThreadID(r.PathValue("id"))
	}
	if err != nil {
		h.metrics.Refused(string(server.LimitThreadID))
		httpjson.Write(w, status, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "%v", err))
		return false
	}
	return true
}

// Shutdown marks the handler not ready and ends every stream and
// WebSocket cleanly, waiting for them or ctx.
func (h *Handler) Shutdown(ctx context.Context) error {
	h.ready.Store(false)
	var sseErr error
	done := make(chan struct{})
	go func() { sseErr = h.sse.Shutdown(ctx); close(done) }()
	wsErr := h.ws.Shutdown(ctx)
	<-done
	return errors.Join(sseErr, wsErr)
}

func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	if !h.ready.Load() {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	if h.readyCheck != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := h.readyCheck(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	_, _ = io.WriteString(w, "ready\n")
}

// streamGET is a WebSocket upgrade or an EventSource stream.
func (h *Handler) streamGET(w http.ResponseWriter, r *http.Request) {
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		h.ws.ServeHTTP(w, r)
		return
	}
	h.sse.ServeHTTP(w, r)
}

// command serves POST /threads/{id}/commands.
func (h *Handler) command(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	body, status, refusal, errResp := httpjson.ReadBody(w, r, h.maxBody, h.bodyTimeout, "command")
	if errResp != nil {
		if refusal != "" {
			h.metrics.Refused(refusal)
		}
		httpjson.Write(w, status, errResp)
		return
	}
	cmd, errResp := h.decoder.Command(body)
	method := "invalid"
	if errResp == nil {
		method = cmd.Value.Method()
		resp, err := h.srv.Do(r.Context(), r.PathValue("id"), cmd)
		if err == nil {
			h.metrics.command(method, "success", time.Since(start))
			httpjson.Write(w, http.StatusOK, resp)
			return
		}
		id := cmd.Value.GetID()
		errResp = protocol.ErrorResponseOf(&id, err)
	}
	h.metrics.command(method, string(errResp.Code), time.Since(start))
	httpjson.Write(w, httpjson.StatusOf(errResp.Code), errResp)
}

// state serves GET /threads/{id}/state in the shape of LangGraph's thread
// state, which the SDK reads to hydrate (langgraph.ProtocolState, whose
// rule protocol/langgraph.cddl holds).
func (h *Handler) state(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if h.upstreamState != nil {
		// Edge mode: the upstream's state, as it answers it.
		status, body, err := h.upstreamState(r.Context(), id, r.URL.Query())
		if err != nil {
			httpjson.Write(w, http.StatusBadGateway, protocol.NewError(nil, protocol.ErrorCodeUnavailable, "%v; retry", err))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(body)
		return
	}
	st, ok, err := h.srv.State(r.Context(), id)
	if err != nil {
		httpjson.Write(w, http.StatusServiceUnavailable, protocol.NewError(nil, protocol.ErrorCodeUnavailable, "%v; retry", err))
		return
	}
	if !ok {
		httpjson.Write(w, http.StatusNotFound, protocol.NewError(nil, protocol.ErrorCodeNoSuchThread, "no thread %q", id))
		return
	}
	httpjson.Write(w, http.StatusOK, langgraph.ProtocolState(id, st))
}

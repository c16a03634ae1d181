// Package wire is how a wire plugs into the transport. A wire (the
// protocol's own routes, the workers', the minimal token stream, the job
// stream, Instance AI, the OpenAI-compatible routes) declares its routes
// (Route: method, pattern, the Kind of rules it is under, its handler) and
// is built on one Context that the transport hands every wire: the server,
// authorization, body limits, the heartbeat, the shared stream machinery
// and the metrics Observer. transport.New registers the enabled wires'
// routes in one loop, each behind the guard of its kind.
//
// The package is a leaf below the wires and the stream handlers: it
// defines what a stream of another wire is (Stream, Frames) and what the
// transports report (Observer); package sse serves the streams
// (sse.Handler is a Streams).
package wire

import (
	"net/http"
	"time"

	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
)

// Kind sorts routes by what they may do, for the rules they are under
// (the same-site rules, authentication, rate limits, stream slots).
type Kind int

const (
	// ReadRoute reads and creates nothing: no same-site rules, no rate limit.
	ReadRoute Kind = iota
	// StreamRoute opens a stream (or starts a run that may stream): the
	// same-site rules, the stream rate and one of the principal's stream
	// slots for as long as it lasts.
	StreamRoute
	// CommandRoute changes a thread: the same-site rules and the command rate.
	CommandRoute
	// IngestRoute appends a producer's events: the same-site rules (NDJSON
	// bodies allowed) and the producer rate, counted as the items are read
	// (Context.ReadBatch); on a PathThread route the transport asks for a
	// producer's credential, elsewhere the wire does.
	IngestRoute
	// WorkerRoute is a remote worker's call: the same-site rules and a
	// producer's credential.
	WorkerRoute
)

// Route is one route of a wire.
type Route struct {
	// Method and Pattern are net/http.ServeMux's ("POST",
	// "/threads/{id}/commands").
	Method, Pattern string
	Kind            Kind
	// PathThread says the pattern's {id} names the thread: the transport
	// checks the id and authorizes the request for it (creating the
	// thread unless Kind is ReadRoute) before Handler runs. Otherwise the
	// handler names its thread itself and asks Context.Thread.
	PathThread bool
	// HandlerAuthorizes, with PathThread, has the transport check the id
	// and admit the request under its kind's rules, and the handler ask
	// Context.Allowed for the thread as it comes to use it (as it is, or
	// to create it): the Platform's routes, which answer a thread that
	// does not exist 404, an assistant that does not exist before that, and
	// make a thread only for a run.
	HandlerAuthorizes bool
	// BadThreadStatus, with PathThread, is the status of the answer to an
	// {id} that is no valid thread id (400 when 0; the Platform's 422).
	BadThreadStatus int
	Handler         http.Handler
	// Outer, when set, wraps the guarded route: how a wire whose clients
	// read errors in a shape of their own reshapes the transport's
	// refusals (OpenAI's error object).
	Outer func(http.Handler) http.Handler
}

// Wire is a set of routes served on one Context.
type Wire interface {
	Routes() []Route
}

// Defaults of a Context's zero fields.
const (
	DefaultHeartbeat     = 15 * time.Second
	DefaultBodyTimeout   = 10 * time.Second
	DefaultMaxEventBytes = 1 << 20
	// DefaultMaxBatchBytes and DefaultMaxBatchItems bound the default
	// ReadBatch (a transport sets its producer limits instead).
	DefaultMaxBatchBytes = 4 << 20
	DefaultMaxBatchItems = 1000
)

// Context is what the transport hands every wire. Zero fields take the
// defaults (WithDefaults) but Server and Streams, which a wire needs.
type Context struct {
	Server *server.Server
	// Authorize says whether the request may use the thread (creating it
	// when create is set) and answers the request itself when it may not;
	// nil lets every request through (authentication off).
	Authorize func(w http.ResponseWriter, r *http.Request, thread string, create bool) bool
	// ReadBatch reads a body of items (a JSON array, or NDJSON) within the
	// producer limits and answers the request itself when it cannot; what
	// names the body in errors, field the array's member in an object.
	ReadBatch func(w http.ResponseWriter, r *http.Request, what, field string) ([][]byte, bool)
	// MaxEventBytes refuses a larger item of a batch
	// (DefaultMaxEventBytes).
	MaxEventBytes int
	// BodyTimeout bounds reading a request's body (DefaultBodyTimeout).
	BodyTimeout time.Duration
	// Decode bounds the nesting and the values of every JSON body
	// ReadBody reads, and of every item of a batch (zero fields: the
	// protocol's defaults, the same as the commands'): a body past them is
	// refused before it is decoded.
	Decode protocol.DecodeLimits
	// Heartbeat is how often a quiet stream gets a comment line
	// (DefaultHeartbeat).
	Heartbeat time.Duration
	// Streams serves the wires' streams (the transport's SSE handler, so
	// that they are paced, counted and shut down with its own).
	Streams Streams
	// Observer hears what the wire's routes refuse (NopObserver).
	Observer Observer
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c Context) WithDefaults() Context {
	if c.Heartbeat <= 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.BodyTimeout <= 0 {
		c.BodyTimeout = DefaultBodyTimeout
	}
	if c.MaxEventBytes <= 0 {
		c.MaxEventBytes = DefaultMaxEventBytes
	}
	if c.Observer == nil {
		c.Observer = NopObserver{}
	}
	if c.ReadBatch == nil {
		own := c // the defaults, as they are now
		c.ReadBatch = func(w http.ResponseWriter, r *http.Request, what, _ string) ([][]byte, bool) {
			return own.readBatch(w, r, what)
		}
	}
	return c
}

// Thread checks a thread id the request names (field names it in the
// error: 400 invalid_argument) and whether the request may use the thread
// (Authorize); it answers the request itself when not.
func (c *Context) Thread(w http.ResponseWriter, r *http.Request, field, thread string, create bool) bool {
	if !ValidThread(w, field, thread) {
		return false
	}
	return c.Allowed(w, r, thread, create)
}

// Allowed asks Authorize alone (the id is known to be valid).
func (c *Context) Allowed(w http.ResponseWriter, r *http.Request, thread string, create bool) bool {
	return c.Authorize == nil || c.Authorize(w, r, thread, create)
}

// Mount registers w's routes on mux as they are, without the transport's
// guards: for a wire served alone (its tests, or a program that does its
// own authentication and limits).
func Mount(mux *http.ServeMux, w Wire) {
	for _, rt := range w.Routes() {
		var h http.Handler = rt.Handler
		if rt.Outer != nil {
			h = rt.Outer(h)
		}
		mux.Handle(rt.Method+" "+rt.Pattern, h)
	}
}

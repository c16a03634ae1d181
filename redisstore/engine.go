package redisstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/agentstream/agentstream/server"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configure the engine New makes; zero fields take the defaults
// in their comments.
type Options struct {
	// URL is the Redis: redis://[user:password@]HOST:PORT/DB (rediss://
	// for TLS), with an optional ?prefix=NAME for the keys (default
	// "agentstream").
	URL string
	// TTL is how long an idle thread's keys live (DefaultTTL).
	TTL time.Duration
	// Log configures the events' streams and write queue; its Publish is
	// always on (the other nodes follow the events it publishes).
	Log LogOptions
	// Cluster configures run leases and forwarded commands; its Flushed is
	// the log's.
	Cluster ClusterOptions
	// MaxCheckpoints caps the checkpoints kept per thread (100).
	MaxCheckpoints int
	// OnError, when set, hears of failed Redis commands and lost
	// connections (the Log's, State's and Cluster's own OnError, when
	// set, win): the first error of a burst at once, then one summary per
	// ErrorSummaryEvery with how many more there were and the newest, so
	// that an outage, in which every command fails, is a few lines.
	OnError func(error)
	// ErrorSummaryEvery is how often OnError hears a summary while errors
	// go on (DefaultErrorSummaryEvery, 10s).
	ErrorSummaryEvery time.Duration
	// OnHealth, when set, is told when Redis is lost (err) and back (nil),
	// after the server was (its streams end and commands are refused as
	// unavailable while it is gone).
	OnHealth func(err error)
	// HealthEvery is how often Redis is pinged (500ms): three failed pings
	// in a row make the server unavailable, one answer available again.
	HealthEvery time.Duration
}

// New connects to the Redis at opts.URL (failing unless it answers a PING
// within ctx) and returns the engine a server uses to keep its threads
// there and share them with the other nodes of the same Redis:
//
//	eng, err := redisstore.New(ctx, redisstore.Options{URL: "redis://127.0.0.1:6379/0"})
//	srv := server.New(server.Config{Engine: eng})
//	defer srv.Close(ctx) // closes the engine too
//
// The server takes its stores (Engine.Stores) and starts it
// (Engine.Start).
func New(ctx context.Context, opts Options) (*Engine, error) {
	e, err := Open(ctx, opts.URL, opts.TTL)
	if err != nil {
		return nil, err
	}
	e.opts = opts
	return e, nil
}

// parts are what an engine made by New runs for its server.
type parts struct {
	once     sync.Once
	closed   sync.Once
	errs     *errorLimiter // OnError's limiter (nil: no OnError)
	stop     chan struct{} // closed by Close: ends the summaries' loop
	done     chan struct{} // closed when that loop has ended
	log      *Log
	state    *State
	live     *Live
	cluster  *Cluster
	detached *Detached
	health   *Health
}

var _ server.Engine = (*Engine)(nil)

// Stores implements server.Engine: the Log, State, Live (the Watcher),
// Cluster and Detached of opts, made on the first call, and what the Log
// and State can do (no IndexedCatalog: searches by metadata read every
// record).
func (e *Engine) Stores() server.EngineStores {
	e.parts.once.Do(func() {
		o := e.opts
		if o.OnError != nil {
			e.parts.errs = newErrorLimiter(o.OnError, o.ErrorSummaryEvery, nil)
			o.OnError = e.parts.errs.add
		}
		lo := o.Log
		lo.Publish = true
		if lo.OnError == nil {
			lo.OnError = o.OnError
		}
		p := &e.parts
		p.log = e.Log(lo)
		p.state = e.State()
		p.state.MaxCheckpoints, p.state.OnError, p.state.Flushed = o.MaxCheckpoints, o.OnError, p.log.Flushed
		p.live = e.Live(o.OnError)
		co := o.Cluster
		co.Flushed = p.log.Flushed
		if co.OnError == nil {
			co.OnError = o.OnError
		}
		p.cluster = e.Cluster(co)
		p.detached = e.Detached()
		p.detached.state.OnError = o.OnError
	})
	st := e.parts.state
	stores := e.parts.log.Stores()
	stores.State, stores.Watcher, stores.Cluster, stores.Workers, stores.Detached = st, e.parts.live, e.parts.cluster, e.parts.cluster, e.parts.detached
	stores.Catalog, stores.Deleter, stores.Runs, stores.Items = st, st, st, st
	return stores
}

// Start implements server.Engine: it follows the other nodes' events,
// renews leases and answers forwarded commands for the server, and
// watches Redis's health.
func (e *Engine) Start(h server.EngineHost) error {
	e.Stores()
	p := &e.parts
	if p.health != nil {
		return errors.New("redisstore: the engine is started already")
	}
	p.live.Start(h)
	p.cluster.Start(h)
	if p.errs != nil {
		p.stop, p.done = make(chan struct{}), make(chan struct{})
		go func() { // owned by the engine: Close stops it
			defer close(p.done)
			tick := time.NewTicker(p.errs.every)
			defer tick.Stop()
			for {
				select {
				case <-p.stop:
					p.errs.flush()
					return
				case <-tick.C:
					p.errs.flush()
				}
			}
		}()
	}
	p.health = e.Health(func(err error) {
		h.SetUnavailable(err)
		if e.opts.OnHealth != nil {
			e.opts.OnHealth(err)
		}
	}, e.opts.HealthEvery)
	return nil
}

// Node is this node's name among the nodes of the Redis (Stores first).
func (e *Engine) Node() string {
	e.Stores()
	return e.parts.cluster.Node()
}

// Collectors are the engine's Prometheus metrics (the write queue's).
func (e *Engine) Collectors() []prometheus.Collector {
	e.Stores()
	return e.parts.log.Collectors()
}

// Close implements server.Engine: it stops what Start started, gives up
// the leases this node holds, flushes the events not written yet and
// closes the connection. The server's Close calls it.
func (e *Engine) Close() error {
	e.parts.closed.Do(func() {
		p := &e.parts
		if p.health != nil { // started
			p.health.Close()
			p.cluster.Close()
			p.live.Close()
		}
		if p.stop != nil {
			close(p.stop)
			<-p.done
		}
		if p.log != nil {
			p.log.Close()
		}
		e.c.Close()
	})
	return nil
}

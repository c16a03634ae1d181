package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configure an Edge.
type Options struct {
	// URL is the upstream's base URL (http://host:port).
	URL string
	// Header is sent with every upstream request (an API key: X-Api-Key).
	Header http.Header
	// IdentityHeader, when set, names the header that carries the
	// caller's principal (its subject) with each command and state read
	// forwarded, for an upstream that authorizes by it.
	IdentityHeader string
	// IdleAfter is how long a thread's upstream stream stays open with no
	// subscriber here and no run under way (DefaultIdleAfter).
	IdleAfter time.Duration
	// MaxBackoff caps the wait between two attempts to reopen a lost
	// upstream stream (DefaultMaxBackoff).
	MaxBackoff time.Duration
	// ClaimEvery is how often, with several nodes on Redis, the node that
	// follows a thread renews its claim to write it, and the others ask
	// whether it is free (DefaultClaimEvery; well within --lease-ttl).
	ClaimEvery time.Duration
	// ResponseTimeout bounds the wait for the head of the upstream's
	// answer to a passed-through request (DefaultResponseTimeout): past
	// it the client gets 504. A join (GET .../join), whose answer is the
	// run's end, waits for as long as the client does.
	ResponseTimeout time.Duration
}

// Defaults of Options.
const (
	DefaultIdleAfter  = 30 * time.Second
	DefaultMaxBackoff = 5 * time.Second
	DefaultClaimEvery = time.Second
	// DefaultResponseTimeout is Options.ResponseTimeout's default.
	DefaultResponseTimeout = 30 * time.Second
)

// Edge is the upstream of a server in edge mode (server.Config.Upstream):
// it forwards commands and follows the threads in use. Create it with
// New, give it to server.New, then Start it with the server; Close stops
// its followers.
type Edge struct {
	c    *Client
	opts Options
	srv  *server.Server

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	open     atomic.Int64 // upstream streams held
	timeouts atomic.Int64 // passed-through requests answered 504 (Options.ResponseTimeout)

	mu      sync.Mutex
	follows map[string]*follower
	runs    map[string]string // a thread's last run started through the edge
}

// follower holds one thread's upstream stream.
type follower struct {
	thread string
	cancel context.CancelFunc
	// Guarded by Edge.mu:
	busy     bool      // the thread's root agent is running upstream
	lastUsed time.Time // its last event, subscription or command
	upLast   uint64    // the upstream's seq of the last event appended
	offset   uint64    // added to the upstream's seqs once its numbering went back
	// cancelled: the edge cancelled the thread's run, whose end the
	// upstream says as interrupted.
	cancelled bool
}

// New returns an edge in front of the upstream opts.URL; it does not
// contact it (Start does).
func New(opts Options) (*Edge, error) {
	c, err := NewClient(opts.URL, opts.Header)
	if err != nil {
		return nil, err
	}
	if opts.IdleAfter <= 0 {
		opts.IdleAfter = DefaultIdleAfter
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	if opts.ClaimEvery <= 0 {
		opts.ClaimEvery = DefaultClaimEvery
	}
	if opts.ResponseTimeout <= 0 {
		opts.ResponseTimeout = DefaultResponseTimeout
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Edge{c: c, opts: opts, ctx: ctx, cancel: cancel, follows: map[string]*follower{}, runs: map[string]string{}}, nil
}

// Start checks that the upstream answers and starts following threads
// into srv (whose Config.Upstream is e).
func (e *Edge) Start(ctx context.Context, srv *server.Server) error {
	if err := e.c.Check(ctx); err != nil {
		return fmt.Errorf("edge: the upstream %s does not answer: %w", auth.RedactURL(e.opts.URL), err)
	}
	e.mu.Lock()
	e.srv = srv
	e.mu.Unlock()
	e.wg.Add(1)
	go e.reap()
	return nil
}

// Close stops following every thread and waits for the followers.
func (e *Edge) Close() {
	e.cancel()
	e.wg.Wait()
}

// Following reports whether the edge holds thread's upstream stream.
func (e *Edge) Following(thread string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.follows[thread] != nil
}

// Watch implements server.Upstream: the thread's upstream stream is
// followed.
func (e *Edge) Watch(thread string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.followLocked(thread)
}

// followLocked starts following thread unless the edge does. The caller
// holds e.mu.
func (e *Edge) followLocked(thread string) *follower {
	if f := e.follows[thread]; f != nil {
		f.lastUsed = time.Now()
		return f
	}
	if e.srv == nil || e.ctx.Err() != nil {
		return nil
	}
	ctx, cancel := context.WithCancel(e.ctx)
	f := &follower{thread: thread, cancel: cancel, lastUsed: time.Now()}
	e.follows[thread] = f
	e.wg.Add(1)
	go e.follow(ctx, f)
	return f
}

// follow holds f's upstream stream until its context ends: each event is
// appended to the thread (server.Mirrors.Append). A lost stream is reopened,
// waiting longer after each failure, from the start of what the upstream
// keeps: the events up to the last one appended are checked against it
// (the same bytes under the same seq: the upstream's numbering holds, and
// they are skipped) and otherwise appended after the thread's last, since
// the upstream lost the thread and numbers its events anew (a `since` cursor
// would have made it leave out its first ones).
func (e *Edge) follow(ctx context.Context, f *follower) {
	defer e.wg.Done()
	backoff := 100 * time.Millisecond
	var lastRaw []byte // the upstream event appended last, as it sent it
	var shut closer    // what the upstream has open
	for ctx.Err() == nil {
		// One node of a cluster follows a thread: the one that may write
		// it. The others' clients get its events through the cluster.
		sctx, stop, mine := e.writer(ctx, f.thread)
		if !mine {
			select {
			case <-ctx.Done():
				return
			case <-time.After(e.opts.ClaimEvery):
			}
			continue
		}
		e.mu.Lock()
		upLast := f.upLast
		e.mu.Unlock()
		if upLast == 0 {
			// Taken over from another node (or new): where the thread
			// stands is the cluster's.
			lastRaw = nil
		}
		verifying := upLast > 0
		var held [][]byte // events at or below upLast, until the check decides
		appendAll := func(batch [][]byte, offset uint64) error {
			if len(batch) == 0 {
				return nil
			}
			_, err := e.srv.Mirrors().Append(f.thread, batch, offset)
			return err
		}
		e.open.Add(1)
		_ = e.c.Stream(sctx, f.thread, 0, func(b []byte) error {
			ev, ok := read(b)
			if !ok {
				return nil // a notice of the upstream's, not an event of the thread
			}
			seq := ev.Seq
			e.mu.Lock()
			offset := f.offset
			e.mu.Unlock()
			if verifying {
				switch {
				case seq < upLast:
					held = append(held, append([]byte(nil), b...))
					return nil
				case seq == upLast && bytes.Equal(b, lastRaw):
					verifying, held = false, nil // the same stream: what follows is new
					return nil
				case seq > upLast && len(held) == 0:
					verifying = false // the upstream keeps no more of it: a gap
				default:
					// Not the stream the edge followed: the upstream lost the
					// thread. Its events go on after this thread's last.
					verifying = false
					offset = e.srv.LastSeq(f.thread)
					e.mu.Lock()
					f.offset = offset
					e.mu.Unlock()
					if err := appendAll(held, offset); err != nil {
						return err
					}
					held = nil
				}
			}
			// What the upstream leaves open is ended first, as agentstream
			// ends its own runs; each event added moves the upstream's
			// numbering on by one here.
			e.mu.Lock()
			cancelled := f.cancelled
			e.mu.Unlock()
			if extra := shut.closing(ev, cancelled); len(extra) > 0 {
				if _, err := e.srv.Publish(ctx, f.thread, server.ProducerBatch{Events: extra}); err != nil {
					return err
				}
				e.mu.Lock()
				f.offset += uint64(len(extra))
				offset = f.offset
				e.mu.Unlock()
			}
			shut.see(ev)
			out := b
			if cancelled && ev.root() && (ev.Params.Data.Event == "interrupted" || ev.Params.Data.Event == "failed") {
				out = asCancelled(b)
			}
			if err := appendAll([][]byte{out}, offset); err != nil {
				return err
			}
			lastRaw = append(lastRaw[:0], b...)
			e.mu.Lock()
			f.upLast, f.lastUsed = seq, time.Now()
			if ev.root() {
				status := protocol.AgentStatus(ev.Params.Data.Event)
				f.busy = status == protocol.AgentStatusRunning || status == protocol.AgentStatusStarted
				if !f.busy {
					f.cancelled = false
				}
			}
			e.mu.Unlock()
			backoff = 100 * time.Millisecond
			return nil
		})
		e.open.Add(-1)
		stop()
		if ctx.Err() != nil {
			return
		}
		// The stream was lost (or refused): the downstream streams stay
		// open meanwhile.
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, e.opts.MaxBackoff)
	}
}

// writer returns a context for following thread while this node may
// write it, kept by claiming it again every Options.ClaimEvery (it ends
// when another node takes it); mine is false when another node holds it.
func (e *Edge) writer(ctx context.Context, thread string) (_ context.Context, stop func(), mine bool) {
	if _, mine, err := e.srv.Mirrors().ClaimWriter(thread); err != nil || !mine {
		return nil, func() {}, false
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(e.opts.ClaimEvery)
		defer tick.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-tick.C:
				if _, mine, err := e.srv.Mirrors().ClaimWriter(thread); err == nil && !mine {
					cancel() // another node writes it now
					return
				}
			}
		}
	}()
	return sctx, func() { cancel(); <-done }, true
}

// OpenStreams is how many upstream streams this edge holds now.
func (e *Edge) OpenStreams() int { return int(e.open.Load()) }

// Timeouts is how many passed-through requests were answered 504.
func (e *Edge) Timeouts() int64 { return e.timeouts.Load() }

// Collectors are the edge's metrics: the upstream streams it holds, and
// the passed-through requests the upstream did not answer in time.
func (e *Edge) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentstream_upstream_streams", Help: "Upstream streams the edge holds (one per thread in use)."},
			func() float64 { return float64(e.open.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "agentstream_upstream_timeouts_total", Help: "Passed-through requests answered 504: the upstream did not start its answer within --upstream-timeout."},
			func() float64 { return float64(e.timeouts.Load()) }),
	}
}

// reap stops the followers of threads with no subscriber here and no run
// under way upstream for Options.IdleAfter.
func (e *Edge) reap() {
	defer e.wg.Done()
	tick := time.NewTicker(max(e.opts.IdleAfter/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-tick.C:
		}
		e.mu.Lock()
		var idle []*follower
		for _, f := range e.follows {
			if !f.busy && time.Since(f.lastUsed) > e.opts.IdleAfter {
				idle = append(idle, f)
			}
		}
		e.mu.Unlock()
		for _, f := range idle {
			if e.srv.Mirrors().Watched(f.thread) {
				e.mu.Lock()
				f.lastUsed = time.Now()
				e.mu.Unlock()
				continue
			}
			e.mu.Lock()
			if e.follows[f.thread] == f {
				delete(e.follows, f.thread)
				f.cancel()
			}
			e.mu.Unlock()
		}
	}
}

// Forward implements server.Upstream: the commands on runs, input, state
// and the agent tree go to the upstream's POST /threads/{id}/commands;
// run.cancel, which the upstream lacks, to its run API; the subscription
// commands and auth.refresh are the edge's own.
func (e *Edge) Forward(ctx context.Context, thread string, cmd *protocol.ClientCommand) (*protocol.CommandResponse, *protocol.ErrorResponse, bool) {
	id := uint64(0)
	if cmd.Value != nil {
		id = cmd.Value.GetID()
	}
	switch c := cmd.Value.(type) {
	case *protocol.ClientCommandSubscriptionSubscribe, *protocol.ClientCommandSubscriptionUnsubscribe,
		*protocol.ClientCommandSubscriptionReconnect, *protocol.ClientCommandAuthRefresh, nil:
		return nil, nil, false
	case *protocol.ClientCommandRunCancel:
		resp, errResp := e.runCancel(ctx, thread, c)
		return resp, errResp, true
	}
	body, err := json.Marshal(cmd)
	if err != nil {
		return nil, protocol.NewError(&id, protocol.ErrorCodeInvalidArgument, "%v", err), true
	}
	if e.touch(thread, false) == nil {
		return nil, protocol.NewError(&id, protocol.ErrorCodeUnavailable, "the edge is not started, or closed"), true
	}
	status, b, err := e.c.DoWith(ctx, "POST", "/threads/"+url.PathEscape(thread)+"/commands", body, e.identity(ctx))
	if err != nil {
		return nil, protocol.NewError(&id, protocol.ErrorCodeUnavailable, "%v; retry later", err), true
	}
	var probe struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(b, &probe)
	switch probe.Type {
	case "error":
		var er protocol.ErrorResponse
		if err := json.Unmarshal(b, &er); err != nil {
			return nil, protocol.NewError(&id, protocol.ErrorCodeUnknownError, "the upstream answered %d: %s", status, b), true
		}
		return nil, &er, true
	case "success":
		var resp protocol.CommandResponse
		if err := json.Unmarshal(b, &resp); err != nil {
			return nil, protocol.NewError(&id, protocol.ErrorCodeUnknownError, "the upstream's answer: %v", err), true
		}
		e.shift(thread, &resp)
		if _, ok := cmd.Value.(*protocol.ClientCommandRunStart); ok {
			// The run's events come in whether or not anyone watches here.
			if m, ok := resp.Result.(map[string]any); ok {
				if run, ok := m["run_id"].(string); ok {
					e.mu.Lock()
					e.runs[thread] = run
					e.mu.Unlock()
				}
			}
			e.touch(thread, true)
		}
		return &resp, nil, true
	}
	code := protocol.ErrorCodeUnknownError
	if status >= 500 {
		code = protocol.ErrorCodeUnavailable
	}
	return nil, protocol.NewError(&id, code, "the upstream answered %d: %.500s", status, b), true
}

// touch starts following thread if the edge does not (busy: a run was
// just started there) and returns its follower.
func (e *Edge) touch(thread string, busy bool) *follower {
	e.mu.Lock()
	defer e.mu.Unlock()
	f := e.followLocked(thread)
	if f != nil && busy {
		f.busy = true
	}
	return f
}

// shift moves an upstream answer's applied_through_seq into the thread's
// numbering here (they differ once the upstream's numbering went back).
func (e *Edge) shift(thread string, resp *protocol.CommandResponse) {
	if resp.Meta == nil || resp.Meta.AppliedThroughSeq == nil {
		return
	}
	e.mu.Lock()
	offset := uint64(0)
	if f := e.follows[thread]; f != nil {
		offset = f.offset
	}
	e.mu.Unlock()
	if offset > 0 {
		v := *resp.Meta.AppliedThroughSeq + offset
		resp.Meta.AppliedThroughSeq = &v
	}
}

// runCancel cancels the thread's run started through the edge with the
// upstream's run API (POST /threads/{id}/runs/{run}/cancel): the upstream
// has no run.cancel command.
func (e *Edge) runCancel(ctx context.Context, thread string, c *protocol.ClientCommandRunCancel) (*protocol.CommandResponse, *protocol.ErrorResponse) {
	id := c.ID
	e.mu.Lock()
	run := e.runs[thread]
	e.mu.Unlock()
	if c.Params.RunID != nil {
		run = *c.Params.RunID
	}
	applied := e.srv.LastSeq(thread)
	if run == "" {
		return &protocol.CommandResponse{ID: id, Result: protocol.RunCancelResult{Cancelled: false}, Meta: &protocol.ResponseMeta{AppliedThroughSeq: &applied}}, nil
	}
	// Marked before the upstream is asked: its run's end may come first.
	setCancelled := func(v bool) {
		e.mu.Lock()
		if f := e.follows[thread]; f != nil {
			f.cancelled = v
		}
		e.mu.Unlock()
	}
	setCancelled(true)
	status, b, err := e.c.DoWith(ctx, "POST", "/threads/"+url.PathEscape(thread)+"/runs/"+url.PathEscape(run)+"/cancel?wait=false&action=interrupt", []byte("{}"), e.identity(ctx))
	if err != nil || status >= 300 {
		setCancelled(false)
	}
	if err != nil {
		return nil, protocol.NewError(&id, protocol.ErrorCodeUnavailable, "%v; retry later", err)
	}
	switch {
	case status < 300:
		return &protocol.CommandResponse{ID: id, Result: protocol.RunCancelResult{RunID: &run, Cancelled: true}, Meta: &protocol.ResponseMeta{AppliedThroughSeq: &applied}}, nil
	case status == http.StatusNotFound || status == http.StatusConflict:
		// Finished already, or unknown upstream: nothing to cancel.
		return &protocol.CommandResponse{ID: id, Result: protocol.RunCancelResult{Cancelled: false}, Meta: &protocol.ResponseMeta{AppliedThroughSeq: &applied}}, nil
	}
	code := protocol.ErrorCodeUnavailable
	if status < 500 {
		code = protocol.ErrorCodeInvalidArgument // its refusal, passed on (its run API takes UUID thread ids only)
	}
	return nil, protocol.NewError(&id, code, "the upstream's run cancel answered %d: %.300s", status, b)
}

// Assistants lists the upstream's graphs (the graph_id of each of its
// assistants, sorted, each once), for the server's banner.
func (e *Edge) Assistants(ctx context.Context) ([]string, error) {
	status, b, err := e.c.DoWith(ctx, "POST", "/assistants/search", []byte(`{"limit": 1000}`), nil)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("the upstream's assistants search answered %d: %.200s", status, b)
	}
	var list []struct {
		GraphID string `json:"graph_id"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("the upstream's assistants search: %w", err)
	}
	var out []string
	for _, a := range list {
		out = append(out, a.GraphID)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// State returns the upstream's answer to GET /threads/{id}/state with
// the request's query (subgraphs=true ...; a credential in access_token
// left out), for the transport to pass on.
func (e *Edge) State(ctx context.Context, thread string, query url.Values) (status int, body []byte, err error) {
	path := "/threads/" + url.PathEscape(thread) + "/state"
	q := url.Values{}
	for k, v := range query {
		if k != "access_token" {
			q[k] = v
		}
	}
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return e.c.DoWith(ctx, "GET", path, nil, e.identity(ctx))
}

// identity is the header that carries the caller's principal
// (Options.IdentityHeader), or none.
func (e *Edge) identity(ctx context.Context) http.Header {
	p := auth.FromContext(ctx)
	if e.opts.IdentityHeader == "" || p == nil {
		return nil
	}
	return http.Header{http.CanonicalHeaderKey(e.opts.IdentityHeader): {p.Subject}}
}

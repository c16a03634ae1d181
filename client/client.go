// Package client is a Go client for the Agent Streaming Protocol, for
// programs that consume agent streams from any server that speaks it
// (agentstream serve, or another): a backend relaying a thread, a bot, a
// test harness, `agentstream tail`.
//
// [Dial] makes a client for a server's base URL; [Client.Thread] names a
// thread, whose commands are methods returning typed results
// ([Thread.Run], [Thread.Input], [Thread.State], [Thread.Agent]) and whose
// events arrive through [Thread.Subscribe] as typed values. Errors the
// server answers with are [*Error] values, matchable with errors.Is against
// [ErrNoSuchRun], [ErrUnauthenticated] and the other codes.
//
// Subscriptions reconnect by themselves, with backoff: over WebSocket
// (the default) with subscription.reconnect, over SSE with Last-Event-ID.
// Events are delivered once each (deduplicated by their event id); when
// events were lost (the server no longer buffers them, or it restarted
// and its stream began again), the subscription delivers a notice first
// ([Event.Missed]).
//
// With the WebSocket transport commands travel in-band on a connection of
// the thread's, as the official SDK sends them; with SSE, over HTTP (POST
// /threads/{id}/commands). Each subscription has a connection (a WebSocket
// or an SSE stream) of its own. Every call takes a context; a subscription's
// goroutine ends when it is closed, when its context ends, or when the
// server refuses it for good.
//
// [Assembler] turns events into what a user reads: messages assembled
// from their deltas per namespace, the latest values, the agent tree and
// the pending interrupts. It takes the protocol's typed events, so it
// serves the in-process transport (transport/inproc) as well.
//
// [ServeWorker] is the other side: a Go program outside the server that
// serves assistants as a remote worker, handed the runs clients start.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentstream/agentstream/protocol"
)

// Transport is how a subscription receives events.
type Transport string

// The transports.
const (
	WebSocket Transport = "websocket"
	SSE       Transport = "sse"
)

// Options configure a Client. Zero fields take the defaults in their
// comments.
type Options struct {
	// Transport of subscriptions (WebSocket).
	Transport Transport
	// Token is sent as `Authorization: Bearer` (a JWT), APIKey as
	// `x-api-key`; set neither for a server without authentication.
	Token, APIKey string
	// TokenSource, when set, gives the bearer token for each command and
	// each connection instead of Token: a subscription whose credential
	// expires (the server closes it with 4401) then reconnects with a new
	// one and loses nothing, rather than ending.
	TokenSource func(ctx context.Context) (string, error)
	// HTTPClient carries commands, SSE streams and WebSocket handshakes
	// (a client with no overall timeout: streams last).
	HTTPClient *http.Client
	// MinBackoff and MaxBackoff bound the wait between reconnection
	// attempts, which doubles from MinBackoff (100 ms) to MaxBackoff (5 s).
	MinBackoff, MaxBackoff time.Duration
	// MaxAttempts is how many reconnections in a row a subscription tries
	// before it gives up with the last error (0: until its context ends).
	MaxAttempts int
	// MaxMessageBytes bounds everything read from the server in one piece
	// (DefaultMaxMessageBytes, 64 MiB): an SSE line and the data of one SSE
	// event, a WebSocket message, a command's answer. A server that sends
	// more ends the subscription or the command with ErrTooLarge.
	MaxMessageBytes int
	// OnDisconnect, when set, is called when a subscription's connection
	// drops and it starts reconnecting, with why; OnReconnect when it is
	// back. Both run on the subscription's goroutine: for telling a user,
	// not for blocking.
	OnDisconnect func(err error)
	OnReconnect  func()
}

// DefaultMaxMessageBytes is Options.MaxMessageBytes' default.
const DefaultMaxMessageBytes = 64 << 20

// ErrTooLarge is the error of a subscription or a command that read more
// from the server in one piece than Options.MaxMessageBytes.
var ErrTooLarge = errors.New("client: the server sent more than Options.MaxMessageBytes in one piece")

// Client talks to one server. It is safe for concurrent use.
type Client struct {
	base *url.URL
	opts Options
	http *http.Client
	ids  atomic.Uint64

	mu     sync.Mutex
	subs   map[*Subscription]struct{}
	cmds   map[*cmdConn]struct{} // the threads' WebSockets for commands
	closed bool
}

// Dial returns a client of the server at baseURL (http:// or https://),
// after checking that it answers (GET /healthz).
func Dial(ctx context.Context, baseURL string, opts Options) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("client: the URL must be http:// or https://, not %q", baseURL)
	}
	switch opts.Transport {
	case "":
		opts.Transport = WebSocket
	case WebSocket, SSE:
	default:
		return nil, fmt.Errorf("client: unknown transport %q", opts.Transport)
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 100 * time.Millisecond
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(5*time.Second, opts.MinBackoff)
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	c := &Client{base: u, opts: opts, http: hc, subs: map[*Subscription]struct{}{}, cmds: map[*cmdConn]struct{}{}}
	req, err := http.NewRequestWithContext(ctx, "GET", c.url("/healthz"), nil)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: %s does not answer: %w", u.Redacted(), err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("client: %s/healthz answered %s", u.Redacted(), resp.Status)
	}
	return c, nil
}

// Close closes every subscription and command connection of the client
// and waits for their goroutines to end.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	subs := make([]*Subscription, 0, len(c.subs))
	for s := range c.subs {
		subs = append(subs, s)
	}
	cmds := make([]*cmdConn, 0, len(c.cmds))
	for cc := range c.cmds {
		cmds = append(cmds, cc)
	}
	c.mu.Unlock()
	for _, s := range subs {
		s.Close()
	}
	for _, cc := range cmds {
		cc.close()
		<-cc.done
	}
	return nil
}

func (c *Client) url(path string) string { return c.base.String() + path }

func (c *Client) authorize(ctx context.Context, h http.Header) error {
	tok := c.opts.Token
	if c.opts.TokenSource != nil {
		var err error
		if tok, err = c.opts.TokenSource(ctx); err != nil {
			return fmt.Errorf("client: the token source: %w", err)
		}
	}
	if tok != "" {
		h.Set("Authorization", "Bearer "+tok)
	}
	if c.opts.APIKey != "" {
		h.Set("x-api-key", c.opts.APIKey)
	}
	return nil
}

// Thread returns the thread named id (nothing is sent until it is used).
func (c *Client) Thread(id string) *Thread {
	t := &Thread{c: c, id: id}
	t.Run = RunCommands{t}
	t.Input = InputCommands{t}
	t.State = StateCommands{t}
	t.Agent = AgentCommands{t}
	return t
}

// Thread is one thread of the server: its commands, grouped as the
// protocol groups their methods, and its subscriptions.
type Thread struct {
	c  *Client
	id string

	cmdMu sync.Mutex
	cmd   *cmdConn // over WebSocket: the connection commands travel on

	Run   RunCommands
	Input InputCommands
	State StateCommands
	Agent AgentCommands
}

// ID is the thread's id.
func (t *Thread) ID() string { return t.id }

func (t *Thread) path(rest string) string { return "/threads/" + url.PathEscape(t.id) + rest }

// Do sends one command (method and params, as the protocol spells them)
// and decodes its result into result (nil: ignored). The typed methods
// call it; it serves commands they do not cover. With the WebSocket
// transport commands travel in-band on a connection of the thread's
// (dialed on first use, again after it drops); with SSE, over HTTP (POST
// /threads/{id}/commands).
func (t *Thread) Do(ctx context.Context, method string, params, result any) error {
	id := t.c.ids.Add(1)
	body, err := encodeCommand(id, method, params)
	if err != nil {
		return err
	}
	if t.c.opts.Transport == WebSocket {
		return t.doWS(ctx, id, method, body, result)
	}
	req, err := http.NewRequestWithContext(ctx, "POST", t.c.url(t.path("/commands")), bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	// Lets net/http send the command again on a new connection when a
	// kept-alive one turns out closed before the request was read (the
	// server restarted): with it the transport takes the POST as safe to
	// replay in that case only, never once the server may have read it.
	req.Header.Set("Idempotency-Key", fmt.Sprintf("%s#%d", t.id, id))
	if err := t.c.authorize(ctx, req.Header); err != nil {
		return err
	}
	resp, err := t.c.http.Do(req)
	if err != nil {
		return fmt.Errorf("client: %s: %w", method, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, int64(t.c.opts.MaxMessageBytes)+1))
	if err != nil {
		return fmt.Errorf("client: %s: %w", method, err)
	}
	if len(data) > t.c.opts.MaxMessageBytes {
		return fmt.Errorf("%w: %s: an answer of more than %d bytes", ErrTooLarge, method, t.c.opts.MaxMessageBytes)
	}
	return decodeAnswer(method, resp.StatusCode, data, result)
}

// encodeCommand is a command's JSON: {"id", "method", "params"}.
func encodeCommand(id uint64, method string, params any) ([]byte, error) {
	b, err := json.Marshal(struct {
		ID     uint64 `json:"id"`
		Method string `json:"method"`
		Params any    `json:"params"`
	}{id, method, params})
	if err != nil {
		return nil, fmt.Errorf("client: %s: %w", method, err)
	}
	return b, nil
}

// decodeAnswer reads a command's answer: its result into result, or the
// server's ErrorResponse as an *Error.
func decodeAnswer(method string, status int, data []byte, result any) error {
	var head struct {
		Type    string                 `json:"type"`
		Result  json.RawMessage        `json:"result"`
		Error   protocol.ErrorCode     `json:"error"`
		Message string                 `json:"message"`
		Meta    *protocol.ResponseMeta `json:"meta"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return &Error{Code: protocol.ErrorCodeUnknownError, Message: fmt.Sprintf("%s: the server answered %d with %q", method, status, truncate(data)), Status: status}
	}
	switch head.Type {
	case "success":
		if m, ok := result.(metaReader); ok {
			m.setMeta(head.Meta)
		}
		if result == nil || len(head.Result) == 0 || string(head.Result) == "null" {
			return nil
		}
		if err := json.Unmarshal(head.Result, result); err != nil {
			return fmt.Errorf("client: %s: the result does not decode: %w", method, err)
		}
		return nil
	case "error":
		return &Error{Code: head.Error, Message: head.Message, Status: status}
	}
	return &Error{Code: protocol.ErrorCodeUnknownError, Message: fmt.Sprintf("%s: the server answered %d with %q", method, status, truncate(data)), Status: status}
}

func truncate(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}

// Error is a command or a stream the server refused: the protocol's
// error code and message, and the HTTP status when it came over HTTP
// (0 for an answer in-band on a WebSocket, which has no status: match on
// Code, which both transports set).
type Error struct {
	Code    protocol.ErrorCode
	Message string
	Status  int
}

func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Message
}

// Is matches errors of the same code: errors.Is(err, client.ErrNoSuchRun).
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == e.Code
}

// The protocol's error codes, to match with errors.Is.
var (
	ErrInvalidArgument    = &Error{Code: protocol.ErrorCodeInvalidArgument}
	ErrUnknownCommand     = &Error{Code: protocol.ErrorCodeUnknownCommand}
	ErrUnknown            = &Error{Code: protocol.ErrorCodeUnknownError}
	ErrNoSuchRun          = &Error{Code: protocol.ErrorCodeNoSuchRun}
	ErrNoSuchSubscription = &Error{Code: protocol.ErrorCodeNoSuchSubscription}
	ErrNoSuchNamespace    = &Error{Code: protocol.ErrorCodeNoSuchNamespace}
	ErrNoSuchInterrupt    = &Error{Code: protocol.ErrorCodeNoSuchInterrupt}
	ErrNoSuchCheckpoint   = &Error{Code: protocol.ErrorCodeNoSuchCheckpoint}
	ErrPermissionDenied   = &Error{Code: protocol.ErrorCodePermissionDenied}
	ErrNotSupported       = &Error{Code: protocol.ErrorCodeNotSupported}
	ErrRateLimited        = &Error{Code: protocol.ErrorCodeRateLimited}
	ErrResourceExhausted  = &Error{Code: protocol.ErrorCodeResourceExhausted}
	ErrUnauthenticated    = &Error{Code: protocol.ErrorCodeUnauthenticated}
	ErrUnavailable        = &Error{Code: protocol.ErrorCodeUnavailable}
)

// RunCommands are the run.* commands.
type RunCommands struct{ t *Thread }

// Started is run.start's answer: the run's id, and the last sequence
// number the thread had published when the run was accepted. Every event
// of the run comes after AppliedThroughSeq, so a reader that skips what is
// at or below it never takes an earlier run's end for this one's.
type Started struct {
	RunID             string
	AppliedThroughSeq uint64
}

// UnmarshalJSON reads the result (protocol.RunResult).
func (s *Started) UnmarshalJSON(b []byte) error {
	var r protocol.RunResult
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	if r.RunID != nil {
		s.RunID = *r.RunID
	}
	return nil
}

func (s *Started) setMeta(m *protocol.ResponseMeta) { s.AppliedThroughSeq = appliedThrough(m) }

// metaReader is a result that also reads the answer's meta.
type metaReader interface{ setMeta(*protocol.ResponseMeta) }

// appliedThrough is an answer's applied_through_seq (0 for none).
func appliedThrough(m *protocol.ResponseMeta) uint64 {
	if m == nil || m.AppliedThroughSeq == nil {
		return 0
	}
	return uint64(*m.AppliedThroughSeq)
}

// Head is the thread's last sequence number now: what a reader that
// attaches now has already missed (the applied_through_seq of a
// state.get). Events after it are the run under way now and later ones.
func (t *Thread) Head(ctx context.Context) (uint64, error) {
	var h headOnly
	if err := t.Do(ctx, "state.get", map[string]any{"namespace": []string{}, "keys": []string{}}, &h); err != nil {
		return 0, err
	}
	return h.seq, nil
}

// headOnly reads an answer's applied_through_seq and ignores its result.
type headOnly struct{ seq uint64 }

func (h *headOnly) UnmarshalJSON([]byte) error       { return nil }
func (h *headOnly) setMeta(m *protocol.ResponseMeta) { h.seq = appliedThrough(m) }

// Start starts (or resumes) a run: run.start.
func (r RunCommands) Start(ctx context.Context, p protocol.RunStartParams) (*Started, error) {
	var res Started
	if err := r.t.Do(ctx, "run.start", p, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Cancel cancels the thread's run: run.cancel.
func (r RunCommands) Cancel(ctx context.Context, p protocol.RunCancelParams) (*protocol.RunCancelResult, error) {
	var res protocol.RunCancelResult
	return &res, r.t.Do(ctx, "run.cancel", p, &res)
}

// InputCommands are the input.* commands.
type InputCommands struct{ t *Thread }

// Respond answers interrupts: input.respond.
func (i InputCommands) Respond(ctx context.Context, p protocol.InputRespondParams) error {
	return i.t.Do(ctx, "input.respond", p, nil)
}

// RespondOne answers one interrupt, the common case of Respond.
func (i InputCommands) RespondOne(ctx context.Context, namespace []string, interruptID string, response any) error {
	if namespace == nil {
		namespace = []string{}
	}
	return i.Respond(ctx, protocol.InputRespondParams{Value: &protocol.InputRespondOne{Namespace: namespace, InterruptID: interruptID, Response: response}})
}

// Inject adds input to the running run: input.inject.
func (i InputCommands) Inject(ctx context.Context, p protocol.InputInjectParams) error {
	return i.t.Do(ctx, "input.inject", p, nil)
}

// StateCommands are the state.* commands.
type StateCommands struct{ t *Thread }

// Get reads the thread's state: state.get.
func (s StateCommands) Get(ctx context.Context, p protocol.StateGetParams) (*protocol.StateGetResult, error) {
	if p.Namespace == nil {
		p.Namespace = []string{}
	}
	var res protocol.StateGetResult
	return &res, s.t.Do(ctx, "state.get", p, &res)
}

// ListCheckpoints lists the thread's checkpoints: state.listCheckpoints.
func (s StateCommands) ListCheckpoints(ctx context.Context, p protocol.ListCheckpointsParams) (*protocol.ListCheckpointsResult, error) {
	var res protocol.ListCheckpointsResult
	return &res, s.t.Do(ctx, "state.listCheckpoints", p, &res)
}

// Fork makes a new thread from a checkpoint: state.fork.
func (s StateCommands) Fork(ctx context.Context, p protocol.StateForkParams) (*protocol.StateForkResult, error) {
	var res protocol.StateForkResult
	return &res, s.t.Do(ctx, "state.fork", p, &res)
}

// AgentCommands are the agent.* commands.
type AgentCommands struct{ t *Thread }

// GetTree reads the agent tree: agent.getTree.
func (a AgentCommands) GetTree(ctx context.Context, p protocol.AgentGetTreeParams) (*protocol.AgentResult, error) {
	var res protocol.AgentResult
	return &res, a.t.Do(ctx, "agent.getTree", p, &res)
}

package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentstream/agentstream/protocol"
	"github.com/coder/websocket"
)

// Filter selects a subscription's events, as subscription.subscribe and
// the SSE stream request do: channels (none: all), namespace prefixes
// (none: the whole tree) and how deep below them (nil: any depth).
type Filter struct {
	Channels   []string
	Namespaces [][]string
	Depth      *int
	// Since starts the subscription after an event id ("EPOCH-SEQ") or a
	// bare sequence number, as a reconnection would ("": from everything
	// the server still buffers).
	Since string
}

// Event is one event of a thread.
type Event struct {
	// ID is the event id ("EPOCH-SEQ"); "" for a notice or a snapshot
	// that is not in the stream.
	ID string
	// Seq is the event's sequence number in its stream (0 for a notice).
	Seq uint64
	// Method is the event's method: its channel, or input.requested, ...,
	// or events.missed.
	Method string
	// Payload is the event as the protocol's types describe it.
	Payload protocol.ServerEventVariant
	// Missed is set on the missed-events notice: events after Since were
	// lost for this subscriber (the server no longer buffers them, or its
	// stream began again: Reset). Over WebSocket, where the server cannot
	// tell, the client makes this notice itself when the stream's epoch
	// changed across a reconnection.
	Missed *protocol.EventsMissedData
	// JSON is the event as received.
	JSON json.RawMessage
}

// Namespace is where in the agent tree the event happened.
func (e *Event) Namespace() []string {
	if e.Payload == nil {
		return nil
	}
	return e.Payload.GetNamespace()
}

// RunEnd is how the thread's run ended when e is its end (the root
// agent's lifecycle, completed or failed), and "" for any other event.
func (e *Event) RunEnd() protocol.AgentStatus {
	l, ok := e.Payload.(*protocol.ServerEventLifecycle)
	if !ok || len(l.Params.Namespace) != 0 {
		return ""
	}
	switch st := l.Params.Data.Event; st {
	case protocol.AgentStatusCompleted, protocol.AgentStatusFailed:
		return st
	}
	return ""
}

// TextDelta is the text e adds to a message being streamed (a message's
// text delta, in any namespace), and "" for any other event: printing it
// for every event prints a run's text as it arrives.
func (e *Event) TextDelta() string {
	m, ok := e.Payload.(*protocol.ServerEventMessages)
	if !ok {
		return ""
	}
	d, ok := m.Params.Data.Value.(*protocol.ContentBlockDeltaData)
	if !ok {
		return ""
	}
	return d.Delta.Text()
}

// RunEndAfter is RunEnd for a run that ended after sequence number seq:
// with seq from Started.AppliedThroughSeq (the run this program started)
// or from Thread.Head (the run under way when it attached, or the next),
// an earlier run's end in a replayed history is never taken for it.
func (e *Event) RunEndAfter(seq uint64) protocol.AgentStatus {
	if e.Seq <= seq {
		return ""
	}
	return e.RunEnd()
}

// ErrClosed is returned by Next once the subscription was closed.
var ErrClosed = errors.New("client: subscription closed")

// Subscription delivers a thread's events that match its filter, in
// order, each once, reconnecting when its connection drops.
type Subscription struct {
	c      *Client
	t      *Thread
	filter Filter
	ctx    context.Context
	cancel context.CancelFunc
	events chan *Event
	done   chan struct{}

	mu  sync.Mutex
	err error // why it ended; set before events is closed

	// Owned by the subscription's goroutine (and Subscribe before it).
	epoch    string
	seq      uint64
	subID    string // the server's id of the WebSocket subscription
	notified bool   // this connection has delivered a missed-events notice
	conns    int    // connections made so far
	// sinceOnly: the cursor is a bare sequence number (Filter.Since): the
	// first event's epoch is taken as the cursor's.
	sinceOnly bool
	stream    io.Closer
	next      func() (*Event, error) // reads the current connection

	dropMu sync.Mutex
	live   io.Closer // the current connection, for dropConnection (tests)
}

// Subscribe opens a subscription to the thread's events that match f. It
// returns once the server accepted it (or with the server's refusal: an
// *Error); its events are read with Next. It lasts until Close, or until
// ctx ends.
func (t *Thread) Subscribe(ctx context.Context, f Filter) (*Subscription, error) {
	sctx, cancel := context.WithCancel(ctx)
	s := &Subscription{c: t.c, t: t, filter: f, ctx: sctx, cancel: cancel, events: make(chan *Event, 256), done: make(chan struct{})}
	t.c.mu.Lock()
	if t.c.closed {
		t.c.mu.Unlock()
		cancel()
		return nil, errClientClosed
	}
	t.c.subs[s] = struct{}{}
	t.c.mu.Unlock()
	if f.Since != "" {
		epoch, seq, ok := splitID(f.Since)
		if !ok {
			s.forget()
			cancel()
			return nil, &Error{Code: protocol.ErrorCodeInvalidArgument, Message: fmt.Sprintf("since: %q is not an event id or a sequence number", f.Since)}
		}
		s.epoch, s.seq, s.sinceOnly = epoch, seq, epoch == ""
	}
	if err := s.connect(); err != nil {
		s.forget()
		cancel()
		return nil, err
	}
	go s.run()
	return s, nil
}

// Next returns the next event. It returns ErrClosed after Close, and the
// error that ended the subscription otherwise (the server refused it for
// good, or reconnecting failed MaxAttempts times, or its context ended).
func (s *Subscription) Next(ctx context.Context) (*Event, error) {
	select {
	case e, ok := <-s.events:
		if !ok {
			return nil, s.Err()
		}
		return e, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Events is the channel Next reads, for a select; it is closed when the
// subscription ends (Err says why).
func (s *Subscription) Events() <-chan *Event { return s.events }

// Err is why the subscription ended (nil while it goes on).
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the subscription and waits for its goroutine.
func (s *Subscription) Close() error {
	s.end(ErrClosed)
	<-s.done
	return nil
}

func (s *Subscription) end(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	s.cancel()
}

func (s *Subscription) forget() {
	s.c.mu.Lock()
	delete(s.c.subs, s)
	s.c.mu.Unlock()
}

// run reads events and reconnects, until the subscription ends.
func (s *Subscription) run() {
	defer close(s.done)
	defer s.forget()
	defer close(s.events)
	for {
		err := s.read()
		if s.stream != nil {
			s.stream.Close()
			s.stream = nil
		}
		if s.ctx.Err() != nil {
			s.end(s.ctx.Err())
			return
		}
		if permanent(err) && !(s.c.opts.TokenSource != nil && expired(err)) {
			s.end(err)
			return
		}
		if f := s.c.opts.OnDisconnect; f != nil {
			f(err)
		}
		if err := s.reconnect(); err != nil {
			s.end(err)
			return
		}
		if f := s.c.opts.OnReconnect; f != nil {
			f()
		}
	}
}

// read delivers the current connection's events until it fails.
func (s *Subscription) read() error {
	for {
		e, err := s.next()
		if err != nil {
			return err
		}
		if !s.accept(e) {
			continue
		}
		select {
		case s.events <- e:
		case <-s.ctx.Done():
			return s.ctx.Err()
		}
	}
}

// accept deduplicates by event id, and puts a notice before the first
// event of a new epoch when the server sent none.
func (s *Subscription) accept(e *Event) bool {
	if e.Missed != nil {
		s.notified = true
		return true
	}
	if e.ID == "" {
		return s.conns == 1 && s.filter.Since == "" // a snapshot: on the first connection only, and not after a cursor
	}
	epoch, seq, ok := splitID(e.ID)
	if !ok {
		return true
	}
	if s.sinceOnly {
		s.sinceOnly = false
		s.epoch = epoch
	}
	if epoch == s.epoch && seq <= s.seq {
		return false // delivered before the connection dropped
	}
	if s.epoch != "" && epoch != s.epoch && !s.notified {
		// The stream began again (a server restarted without keeping
		// it): what came after our cursor is lost. Say so first.
		reset := true
		ep := epoch
		notice := &Event{Method: "events.missed", Missed: &protocol.EventsMissedData{Since: protocol.JsUint(s.seq), FirstAvailableSeq: protocol.JsUint(seq), Epoch: &ep, Reset: &reset}}
		notice.Payload = &protocol.ServerEventEventsMissed{Params: protocol.ServerEventEventsMissedParams{Namespace: []string{}, Timestamp: protocol.Timestamp(time.Now().UnixMilli()), Data: *notice.Missed}}
		s.notified = true
		select {
		case s.events <- notice:
		case <-s.ctx.Done():
			return false
		}
	}
	s.epoch, s.seq = epoch, seq
	return true
}

func splitID(id string) (string, uint64, bool) {
	i := strings.LastIndexByte(id, '-')
	if i < 0 {
		n, err := strconv.ParseUint(id, 10, 64)
		return "", n, err == nil
	}
	n, err := strconv.ParseUint(id[i+1:], 10, 64)
	return id[:i], n, err == nil
}

func (s *Subscription) cursor() string {
	if s.epoch == "" && s.seq == 0 {
		return ""
	}
	if s.epoch == "" {
		return strconv.FormatUint(s.seq, 10)
	}
	return s.epoch + "-" + strconv.FormatUint(s.seq, 10)
}

// reconnect connects again with backoff.
func (s *Subscription) reconnect() error {
	wait := s.c.opts.MinBackoff
	var last error
	for attempt := 1; s.c.opts.MaxAttempts == 0 || attempt <= s.c.opts.MaxAttempts; attempt++ {
		jitter := time.Duration(rand.Int64N(int64(wait)/4 + 1))
		t := time.NewTimer(wait + jitter)
		select {
		case <-t.C:
		case <-s.ctx.Done():
			t.Stop()
			return s.ctx.Err()
		}
		last = s.connect()
		if last == nil {
			return nil
		}
		if permanent(last) || s.ctx.Err() != nil {
			return last
		}
		wait = min(2*wait, s.c.opts.MaxBackoff)
	}
	return fmt.Errorf("client: reconnecting failed %d times: %w", s.c.opts.MaxAttempts, last)
}

// expired reports whether err is the server ending a connection whose
// credential expired (the WebSocket close 4401, or the SSE stream's
// unauthenticated error event), as opposed to refusing a credential.
func expired(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == protocol.ErrorCodeUnauthenticated && e.Status == 0
}

// permanent reports whether err ends a subscription rather than calls for
// a reconnection: the server refused it (bad credentials, no permission,
// a bad filter).
func permanent(err error) bool {
	if errors.Is(err, ErrTooLarge) {
		return true // the server would send it again
	}
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code {
	case protocol.ErrorCodeUnavailable, protocol.ErrorCodeRateLimited, protocol.ErrorCodeUnknownError, protocol.ErrorCodeResourceExhausted:
		return false
	}
	return true
}

// connect opens a connection for the subscription, resuming after its
// cursor when it has one.
func (s *Subscription) connect() error {
	s.notified = false
	var err error
	if s.c.opts.Transport == SSE {
		err = s.connectSSE()
	} else {
		err = s.connectWS()
	}
	s.dropMu.Lock()
	s.conns++
	if err == nil {
		s.live = s.stream
	}
	s.dropMu.Unlock()
	return err
}

// ---- WebSocket ----

func (s *Subscription) connectWS() error {
	conn, err := s.t.dialWS(s.ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	ws := &wsStream{conn: conn, ctx: s.ctx}
	s.stream = ws
	s.next = ws.next
	// Resume the subscription the server remembers, else subscribe anew
	// (the replay is deduplicated by event id).
	if s.subID != "" {
		var res protocol.ReconnectResult
		last := s.cursor()
		p := protocol.ReconnectParams{RunID: "", Subscriptions: []string{s.subID}}
		if last != "" {
			p.LastEventID = &last
		}
		if err := ws.command(ctx, "subscription.reconnect", p, &res); err != nil {
			ws.Close()
			return err
		}
		if res.Restored {
			return nil
		}
	}
	p := protocol.SubscribeParams{Channels: s.filter.Channels, Namespaces: toNamespaces(s.filter.Namespaces)}
	if p.Channels == nil {
		p.Channels = []string{}
	}
	if s.filter.Depth != nil {
		d := protocol.JsUint(max(*s.filter.Depth, 0))
		p.Depth = &d
	}
	var res protocol.SubscribeResult
	if err := ws.command(ctx, "subscription.subscribe", p, &res); err != nil {
		ws.Close()
		return err
	}
	s.subID = res.SubscriptionID
	return nil
}

func toNamespaces(ns [][]string) []protocol.Namespace {
	if ns == nil {
		return nil
	}
	out := make([]protocol.Namespace, len(ns))
	for i, n := range ns {
		if n == nil {
			n = []string{}
		}
		out[i] = n
	}
	return out
}

// wsStream is one WebSocket connection of a subscription.
type wsStream struct {
	conn    *websocket.Conn
	ctx     context.Context
	ids     uint64
	pending []*Event // events read while waiting for a command's answer
}

func (w *wsStream) Close() error { return w.conn.Close(websocket.StatusNormalClosure, "") }

// command sends a command and waits for its answer; events read
// meanwhile are kept for next.
func (w *wsStream) command(ctx context.Context, method string, params, result any) error {
	w.ids++
	id := w.ids
	b, err := encodeCommand(id, method, params)
	if err != nil {
		return err
	}
	if err := w.conn.Write(ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("client: %s: %w", method, err)
	}
	for {
		_, data, err := w.conn.Read(ctx)
		if err != nil {
			return closeError(err)
		}
		var head struct {
			Type string  `json:"type"`
			ID   *uint64 `json:"id"`
		}
		if err := json.Unmarshal(data, &head); err != nil {
			return fmt.Errorf("client: a frame that is not JSON: %w", err)
		}
		if head.Type == "event" {
			e, err := decodeEvent("", data)
			if err != nil {
				return err
			}
			w.pending = append(w.pending, e)
			continue
		}
		if head.ID != nil && *head.ID == id {
			return decodeAnswer(method, 0, data, result)
		}
		if head.Type == "error" && head.ID == nil {
			return decodeAnswer(method, 0, data, nil)
		}
	}
}

// next reads the next event of the connection.
func (w *wsStream) next() (*Event, error) {
	if len(w.pending) > 0 {
		e := w.pending[0]
		w.pending = w.pending[1:]
		return e, nil
	}
	for {
		_, data, err := w.conn.Read(w.ctx)
		if err != nil {
			return nil, closeError(err)
		}
		var head struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(data, &head); err != nil {
			return nil, fmt.Errorf("client: a frame that is not JSON: %w", err)
		}
		switch head.Type {
		case "event":
			return decodeEvent("", data)
		case "error": // the server ends the connection (expired credentials, Redis gone)
			return nil, decodeAnswer("stream", 0, data, nil)
		}
	}
}

// closeError turns a WebSocket close into the protocol's error where its
// code says one (4401: credentials expired, 4403, 4503: unavailable).
func closeError(err error) error {
	switch websocket.CloseStatus(err) {
	case 4401:
		return &Error{Code: protocol.ErrorCodeUnauthenticated, Message: "the server closed the connection: " + err.Error()}
	case 4403:
		return &Error{Code: protocol.ErrorCodePermissionDenied, Message: "the server closed the connection: " + err.Error()}
	}
	// The WebSocket library ends a message over its read limit (set to
	// Options.MaxMessageBytes) with this text and no error value to match.
	if strings.Contains(err.Error(), "read limited at") {
		return fmt.Errorf("%w: a WebSocket message: %v", ErrTooLarge, err)
	}
	return fmt.Errorf("client: %w", err)
}

// ---- SSE ----

func (s *Subscription) connectSSE() error {
	body := struct {
		Channels   []string   `json:"channels"`
		Namespaces [][]string `json:"namespaces,omitempty"`
		Depth      *int       `json:"depth,omitempty"`
	}{s.filter.Channels, s.filter.Namespaces, s.filter.Depth}
	if body.Channels == nil {
		body.Channels = []string{}
	}
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(s.ctx, "POST", s.c.url(s.t.path("/stream")), bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if last := s.cursor(); last != "" {
		req.Header.Set("Last-Event-ID", last)
	}
	if err := s.c.authorize(s.ctx, req.Header); err != nil {
		return err
	}
	resp, err := s.c.http.Do(req)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return httpError(resp)
	}
	r := &sseStream{body: resp.Body, br: bufio.NewReaderSize(resp.Body, 64<<10), max: s.c.opts.MaxMessageBytes}
	s.stream = r
	s.next = r.next
	return nil
}

// httpError reads a refusal's ErrorResponse.
func httpError(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	err := decodeAnswer("subscribe", resp.StatusCode, data, nil)
	var e *Error
	if errors.As(err, &e) {
		e.Status = resp.StatusCode
		if e.Code == protocol.ErrorCodeUnknownError && resp.StatusCode >= 500 {
			e.Code = protocol.ErrorCodeUnavailable
		}
	}
	return err
}

// sseStream is one SSE response of a subscription.
type sseStream struct {
	body io.ReadCloser
	br   *bufio.Reader
	max  int // Options.MaxMessageBytes: a line and an event's data
}

func (r *sseStream) Close() error { return r.body.Close() }

func (r *sseStream) next() (*Event, error) {
	var id, event string
	var data []byte
	for {
		line, err := r.line(r.max - len(data))
		if err != nil {
			if errors.Is(err, ErrTooLarge) {
				return nil, err
			}
			if err == io.EOF {
				return nil, fmt.Errorf("client: the stream ended: %w", io.ErrUnexpectedEOF)
			}
			return nil, fmt.Errorf("client: %w", err)
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if event == "" && data == nil {
				continue
			}
			if event == "error" {
				return nil, decodeAnswer("stream", 0, data, nil)
			}
			return decodeEvent(id, data)
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id:"):
			id = strings.TrimSpace(line[3:])
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(line[6:])
		case strings.HasPrefix(line, "data:"):
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, strings.TrimPrefix(line[5:], " ")...)
		}
	}
}

// line reads one line of at most budget bytes (an event's data, so far
// and with this line, stays within max).
func (r *sseStream) line(budget int) (string, error) {
	var buf []byte
	for {
		frag, err := r.br.ReadSlice('\n')
		if len(buf)+len(frag) > budget {
			return "", fmt.Errorf("%w: an SSE line or event of more than %d bytes", ErrTooLarge, r.max)
		}
		buf = append(buf, frag...)
		if err != bufio.ErrBufferFull {
			return string(buf), err
		}
	}
}

// decodeEvent decodes an event frame; id is the SSE id when the frame came
// with one.
func decodeEvent(id string, data []byte) (*Event, error) {
	var se protocol.ServerEvent
	if err := json.Unmarshal(data, &se); err != nil {
		return nil, fmt.Errorf("client: an event that does not decode: %w", err)
	}
	e := &Event{JSON: append(json.RawMessage(nil), data...)}
	if se.Value == nil {
		var head struct {
			Method  string `json:"method"`
			EventID string `json:"event_id"`
		}
		_ = json.Unmarshal(data, &head)
		e.Method, e.ID = head.Method, head.EventID
		if e.ID == "" {
			e.ID = id
		}
		return e, nil // a kind of event this client does not know: kept as JSON
	}
	e.Payload = se.Value
	e.Method = se.Value.Method()
	if p := se.Value.GetEventID(); p != nil {
		e.ID = *p
	} else {
		e.ID = id
	}
	if p := se.Value.GetSeq(); p != nil {
		e.Seq = uint64(*p)
	} else if _, seq, ok := splitID(e.ID); ok && e.ID != "" {
		e.Seq = seq
	}
	if m, ok := se.Value.(*protocol.ServerEventEventsMissed); ok {
		d := m.Params.Data
		e.Missed = &d
		e.ID, e.Seq = "", 0
	}
	return e, nil
}

// dropConnection closes the current connection, as a network failure
// would (for tests).
func (s *Subscription) dropConnection() {
	s.dropMu.Lock()
	defer s.dropMu.Unlock()
	if s.live != nil {
		s.live.Close()
	}
}

// connections is how many connections the subscription made (for tests).
func (s *Subscription) connections() int {
	s.dropMu.Lock()
	defer s.dropMu.Unlock()
	return s.conns
}

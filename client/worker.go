package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentstream/agentstream/protocol"
)

// WorkerOptions configure [ServeWorker].
type WorkerOptions struct {
	// URL is the server's base URL (http://host:port).
	URL string
	// Token is sent as `Authorization: Bearer` (a JWT with role producer),
	// APIKey as `X-API-Key` (a key listed with producer).
	Token, APIKey string
	// Assistants are the assistant ids the worker serves.
	Assistants []string
	// MaxRuns is how many runs it takes at once (0: the server's cap).
	MaxRuns int
	// HTTPClient makes the requests (http.DefaultClient).
	HTTPClient *http.Client
	// FlushEvery is how long an event may wait to be sent with the next
	// ones (5 ms): a batch goes when it is that old or holds 256 events.
	FlushEvery time.Duration
}

// WorkerHandler serves one run: emit its events through run, and return
// nil to complete it or an error to fail it. ctx ends when the run is
// cancelled.
type WorkerHandler func(ctx context.Context, run *WorkerRun) error

// ServeWorker connects a worker to the server and serves the runs it is
// handed with handle, each in its own goroutine, until ctx ends. A
// dropped connection is made again under the same worker name, with
// backoff, keeping its runs (within the server's lease). When ctx ends,
// the handlers' contexts end, and once they have returned the worker
// tells the server it leaves (runs it did not end fail at once). It
// returns ctx's error, or the server's refusal when it refuses the worker.
func ServeWorker(ctx context.Context, opts WorkerOptions, handle WorkerHandler) error {
	if opts.HTTPClient == nil {
		opts.HTTPClient = http.DefaultClient
	}
	if opts.FlushEvery <= 0 {
		opts.FlushEvery = 5 * time.Millisecond
	}
	wk := &worker{opts: opts, handle: handle, runs: map[string]*WorkerRun{}}
	defer wk.leave()
	defer wk.wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	backoff := 100 * time.Millisecond
	for {
		err := wk.connect(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var he *Error
		if errors.As(err, &he) && he.Status >= 400 && he.Status < 500 && he.Status != http.StatusTooManyRequests {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

type worker struct {
	opts   WorkerOptions
	handle WorkerHandler
	wg     sync.WaitGroup

	mu        sync.Mutex
	id        string
	heartbeat time.Duration
	runs      map[string]*WorkerRun
}

func (wk *worker) header(h http.Header) {
	if wk.opts.Token != "" {
		h.Set("Authorization", "Bearer "+wk.opts.Token)
	}
	if wk.opts.APIKey != "" {
		h.Set("X-API-Key", wk.opts.APIKey)
	}
}

// connect holds one connect stream and serves what comes on it.
func (wk *worker) connect(ctx context.Context) error {
	q := url.Values{"assistants": {strings.Join(wk.opts.Assistants, ",")}}
	if wk.opts.MaxRuns > 0 {
		q.Set("max_runs", strconv.Itoa(wk.opts.MaxRuns))
	}
	req, err := http.NewRequestWithContext(ctx, "GET", strings.TrimRight(wk.opts.URL, "/")+"/workers/connect?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	wk.header(req.Header)
	wk.mu.Lock()
	if wk.id != "" {
		req.Header.Set("Agentstream-Worker", wk.id)
	}
	wk.mu.Unlock()
	resp, err := wk.opts.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return responseError(resp)
	}
	hbCtx, stopHB := context.WithCancel(ctx)
	defer stopHB()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var m protocol.WorkerMessage
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return fmt.Errorf("agentstream worker: %w", err)
		}
		switch v := m.Value.(type) {
		case *protocol.WorkerReady:
			wk.mu.Lock()
			wk.id, wk.heartbeat = v.WorkerID, time.Duration(v.HeartbeatMs)*time.Millisecond
			wk.mu.Unlock()
			go wk.beat(hbCtx)
		case *protocol.WorkerAssign:
			wk.start(ctx, v)
		case *protocol.WorkerCancel:
			if r := wk.run(v.RunID); r != nil {
				r.cancel(errors.New(v.Reason))
			}
		case *protocol.WorkerRespond:
			if r := wk.run(v.RunID); r != nil {
				r.answer(v.Ref, v.Response)
			}
		case *protocol.WorkerInject:
			if r := wk.run(v.RunID); r != nil {
				select {
				case r.injected <- v.Input:
				default: // the handler does not read them
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.ErrUnexpectedEOF
}

// leave tells the server the worker stops (DELETE /workers/{id}), so that
// its runs fail now rather than when its lease runs out.
func (wk *worker) leave() {
	wk.mu.Lock()
	id := wk.id
	wk.mu.Unlock()
	if id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	wk.notify(ctx, "DELETE", "/workers/"+url.PathEscape(id))
}

// notify sends a request whose answer says nothing the worker needs (a
// heartbeat, a goodbye): it goes or it does not.
func (wk *worker) notify(ctx context.Context, method, path string) {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(wk.opts.URL, "/")+path, nil)
	if err != nil {
		return
	}
	wk.header(req.Header)
	if resp, err := wk.opts.HTTPClient.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// beat renews the worker's lease while the connection lasts.
func (wk *worker) beat(ctx context.Context) {
	wk.mu.Lock()
	every, id := wk.heartbeat, wk.id
	wk.mu.Unlock()
	t := time.NewTicker(max(every, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			wk.notify(ctx, "POST", "/workers/"+url.PathEscape(id)+"/heartbeat")
		}
	}
}

func (wk *worker) run(id string) *WorkerRun {
	wk.mu.Lock()
	defer wk.mu.Unlock()
	return wk.runs[id]
}

// start serves an assigned run in a goroutine of its own.
func (wk *worker) start(ctx context.Context, a *protocol.WorkerAssign) {
	wk.mu.Lock()
	if _, dup := wk.runs[a.RunID]; dup {
		wk.mu.Unlock()
		return
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	r := &WorkerRun{ctx: runCtx, ID: a.RunID, ThreadID: a.ThreadID, AssistantID: a.AssistantID, Input: a.Input, Config: a.Config, Metadata: a.Metadata, Values: a.Values,
		wk: wk, cancel: cancel, injected: make(chan any, 64), waiting: map[string]chan any{}, kick: make(chan struct{}, 1)}
	wk.runs[a.RunID] = r
	wk.mu.Unlock()
	wk.wg.Add(2)
	go func() {
		defer wk.wg.Done()
		r.sender(runCtx)
	}()
	go func() {
		defer wk.wg.Done()
		err := wk.handle(runCtx, r)
		end := &protocol.WorkerEnd{Status: protocol.WorkerEndStatusCompleted}
		if err != nil {
			msg := err.Error()
			end = &protocol.WorkerEnd{Status: protocol.WorkerEndStatusFailed, Error: &msg}
		}
		r.mu.Lock()
		if r.err != nil { // a refused batch published nothing; the run still ends, failed with the refusal
			msg := r.err.Error()
			end = &protocol.WorkerEnd{Status: protocol.WorkerEndStatusFailed, Error: &msg}
			r.err, r.queued = nil, nil
		}
		r.mu.Unlock()
		if runCtx.Err() == nil {
			_ = r.op(end)
			_ = r.Flush(context.WithoutCancel(runCtx))
		}
		cancel(nil)
		wk.mu.Lock()
		delete(wk.runs, a.RunID)
		wk.mu.Unlock()
	}()
}

// WorkerRun is a run handed to the worker.
type WorkerRun struct {
	ID, ThreadID, AssistantID string
	// Input, Config and Metadata are the run's, as run.start gave them.
	Input            any
	Config, Metadata map[string]any
	// Values is the thread's state when the run was handed out.
	Values map[string]any

	wk       *worker
	ctx      context.Context // the run's: ends when it is cancelled
	cancel   context.CancelCauseFunc
	injected chan any
	kick     chan struct{}

	sendMu  sync.Mutex // one batch in flight at a time, in order
	mu      sync.Mutex
	queued  []json.RawMessage
	batch   uint64 // the last batch number used
	err     error  // what a batch was refused with: the run's emits fail from then on
	waiting map[string]chan any
	refs    atomic.Uint64
}

// Injected delivers the input clients send the running run (input.inject).
func (r *WorkerRun) Injected() <-chan any { return r.injected }

// Emit queues a protocol event (a ServerEvent without seq and event_id,
// as a map or a generated type) to be published in the run's name.
func (r *WorkerRun) Emit(event any) error {
	b, err := json.Marshal(event)
	if err != nil {
		return err
	}
	return r.op(map[string]json.RawMessage{"op": json.RawMessage(`"emit"`), "event": b})
}

func (r *WorkerRun) op(v any) error {
	if end, ok := v.(*protocol.WorkerEnd); ok {
		v = protocol.WorkerOp{Value: end}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	r.mu.Lock()
	if r.err != nil {
		r.mu.Unlock()
		return r.err
	}
	r.queued = append(r.queued, b)
	full := len(r.queued) >= maxQueuedOps
	r.mu.Unlock()
	if full {
		// A handler that emits faster than the server takes its batches
		// sends them itself, so that what waits stays bounded.
		return r.send(r.ctx)
	}
	select {
	case r.kick <- struct{}{}:
	default:
	}
	return nil
}

// maxQueuedOps is how many operations may wait to be sent before Emit
// sends a batch itself.
const maxQueuedOps = 1024

// Text streams an AI message made of chunks of text: its start, a text
// block with one delta per chunk, and its end.
func (r *WorkerRun) Text(chunks ...string) error {
	id := fmt.Sprintf("msg_%s_%d", r.ID, r.refs.Add(1))
	ev := func(data map[string]any) error {
		data["run_id"] = r.ID
		return r.Emit(map[string]any{"type": "event", "method": "messages", "params": map[string]any{"namespace": []string{}, "data": data}})
	}
	full := strings.Join(chunks, "")
	steps := []map[string]any{
		{"event": "message-start", "role": "ai", "id": id},
		{"event": "content-block-start", "index": 0, "content": map[string]any{"type": "text", "text": ""}},
	}
	for _, c := range chunks {
		steps = append(steps, map[string]any{"event": "content-block-delta", "index": 0, "delta": map[string]any{"type": "text-delta", "text": c}})
	}
	steps = append(steps,
		map[string]any{"event": "content-block-finish", "index": 0, "content": map[string]any{"type": "text", "text": full}},
		map[string]any{"event": "message-finish"})
	for _, s := range steps {
		if err := ev(s); err != nil {
			return err
		}
	}
	return nil
}

// Interrupt asks for input: clients see input.requested with payload, and
// the answer input.respond gives comes back. It returns ctx's cause if the
// run is cancelled first.
func (r *WorkerRun) Interrupt(ctx context.Context, payload any) (any, error) {
	ref := "i" + strconv.FormatUint(r.refs.Add(1), 10)
	ch := make(chan any, 1)
	r.mu.Lock()
	r.waiting[ref] = ch
	r.mu.Unlock()
	if err := r.op(protocol.WorkerOp{Value: &protocol.WorkerInterrupt{Ref: ref, Payload: payload}}); err != nil {
		return nil, err
	}
	if err := r.Flush(ctx); err != nil {
		return nil, err
	}
	select {
	case v := <-ch:
		return v, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

func (r *WorkerRun) answer(ref string, v any) {
	r.mu.Lock()
	ch := r.waiting[ref]
	delete(r.waiting, ref)
	r.mu.Unlock()
	if ch != nil {
		ch <- v
	}
}

// Flush sends what is queued and waits until the server took it.
func (r *WorkerRun) Flush(ctx context.Context) error {
	for {
		r.mu.Lock()
		n, err := len(r.queued), r.err
		r.mu.Unlock()
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if err := r.send(ctx); err != nil {
			return err
		}
	}
}

// sender sends the queued operations in batches while the run lasts.
func (r *WorkerRun) sender(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.wk.opts.FlushEvery):
		}
		_ = r.send(ctx)
	}
}

// send posts one batch of what is queued, retrying it (with the same
// number, so that nothing is published twice) while the network fails.
func (r *WorkerRun) send(ctx context.Context) error {
	r.sendMu.Lock()
	defer r.sendMu.Unlock()
	r.mu.Lock()
	if len(r.queued) == 0 || r.err != nil {
		err := r.err
		r.mu.Unlock()
		return err
	}
	n := min(len(r.queued), 256)
	ops := r.queued[:n]
	r.batch++
	seq := r.batch
	r.mu.Unlock()
	var body bytes.Buffer
	for _, op := range ops {
		body.Write(op)
		body.WriteByte('\n')
	}
	r.wk.mu.Lock()
	wid := r.wk.id
	r.wk.mu.Unlock()
	u := strings.TrimRight(r.wk.opts.URL, "/") + "/workers/" + url.PathEscape(wid) + "/runs/" + url.PathEscape(r.ID)
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, "POST", u, bytes.NewReader(body.Bytes()))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/x-ndjson")
		req.Header.Set("Agentstream-Producer-Seq", strconv.FormatUint(seq, 10))
		r.wk.header(req.Header)
		resp, err := r.wk.opts.HTTPClient.Do(req)
		if err == nil {
			if resp.StatusCode == http.StatusOK {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				r.mu.Lock()
				r.queued = r.queued[n:]
				r.mu.Unlock()
				return nil
			}
			err = responseError(resp)
			resp.Body.Close()
			if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode < 500 {
				r.mu.Lock()
				r.err = err
				r.mu.Unlock()
				return err
			}
		}
		if ctx.Err() != nil || attempt >= 20 {
			return err
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(time.Duration(attempt+1) * 50 * time.Millisecond):
		}
	}
}

// responseError reads the server's ErrorResponse from a refused request.
func responseError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	var e protocol.ErrorResponse
	if json.Unmarshal(b, &e) == nil && e.Code != "" {
		return &Error{Code: e.Code, Message: e.Message, Status: resp.StatusCode}
	}
	return &Error{Code: protocol.ErrorCodeUnknownError, Message: strings.TrimSpace(resp.Status + " " + string(b)), Status: resp.StatusCode}
}

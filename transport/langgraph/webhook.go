package langgraph

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"syscall"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
)

// WebhookOptions bound the webhooks of runs (a run's `webhook`: its end,
// POSTed there).
type WebhookOptions struct {
	// AllowPrivate lets webhooks reach loopback, private, link-local and
	// other non-public addresses (agentstream serve's
	// --webhook-allow-private); without it such a URL is refused (422)
	// and a name that resolves to one is not dialed.
	AllowPrivate bool
	// Timeout bounds each attempt (DefaultWebhookTimeout).
	Timeout time.Duration
	// Attempts is how many times a delivery is tried, 1 s, 2 s, 4 s ...
	// apart, while the receiver answers 5xx, 429 or not at all
	// (DefaultWebhookAttempts).
	Attempts int
	// MaxPending bounds the webhooks waiting for their run's end or their
	// delivery (DefaultMaxPendingWebhooks); a run asking for one past it
	// is refused (429, counted as limit webhooks).
	MaxPending int
}

// Defaults of WebhookOptions' zero fields.
const (
	DefaultWebhookTimeout     = 10 * time.Second
	DefaultWebhookAttempts    = 4
	DefaultMaxPendingWebhooks = 10_000
)

func (o WebhookOptions) withDefaults() WebhookOptions {
	if o.Timeout <= 0 {
		o.Timeout = DefaultWebhookTimeout
	}
	if o.Attempts <= 0 {
		o.Attempts = DefaultWebhookAttempts
	}
	if o.MaxPending <= 0 {
		o.MaxPending = DefaultMaxPendingWebhooks
	}
	return o
}

// webhooks delivers runs' ends: one goroutine per run that asked, which
// watches the thread until the run ends (on whichever node runs it), then
// POSTs the run's record there; all stop when the server closes.
type webhooks struct {
	opts    WebhookOptions
	client  *http.Client
	ctx     context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	pending int
	// outcome counts deliveries: sent, failed (every attempt), refused
	// (an address the egress guard does not dial).
	outcome func(string)
}

func newWebhooks(opts WebhookOptions, outcome func(string)) *webhooks {
	opts = opts.withDefaults()
	wh := &webhooks{opts: opts, outcome: outcome}
	wh.ctx, wh.stop = context.WithCancel(context.Background())
	dialer := &net.Dialer{Timeout: opts.Timeout, Control: func(_, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return err
		}
		if ip := net.ParseIP(host); ip != nil && !opts.AllowPrivate && !publicIP(ip) {
			return fmt.Errorf("%w: %s", errPrivateAddress, ip)
		}
		return nil
	}}
	wh.client = &http.Client{Timeout: opts.Timeout, Transport: &http.Transport{DialContext: dialer.DialContext, Proxy: nil},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return wh
}

// close stops every watch and delivery and waits for them.
func (wh *webhooks) close() {
	wh.stop()
	wh.wg.Wait()
}

var errPrivateAddress = errors.New("a webhook may not reach a non-public address (--webhook-allow-private)")

// publicIP reports whether ip is an address of the public internet: not
// loopback, private, link-local, multicast, unspecified, nor in the
// shared, benchmarking or documentation ranges.
func publicIP(ip net.IP) bool {
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() ||
		ip.IsMulticast() || ip.IsUnspecified() {
		return false
	}
	for _, cidr := range []string{"100.64.0.0/10", "198.18.0.0/15", "192.0.0.0/24", "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "240.0.0.0/4", "64:ff9b::/96", "2001:db8::/32"} {
		if _, n, _ := net.ParseCIDR(cidr); n.Contains(ip) {
			return false
		}
	}
	return true
}

// check refuses a webhook URL that is not served: not absolute http(s),
// or naming an address the guard does not dial (names are checked as
// they are dialed, so that one resolving to a private address later is
// refused then).
func (wh *webhooks) check(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("webhook: %q is not an absolute http or https URL (a path of this server is not served)", raw)
	}
	if u.User != nil {
		return fmt.Errorf("webhook: credentials in the URL are not served (the server's logs would show them)")
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil && !wh.opts.AllowPrivate && !publicIP(ip) {
		return fmt.Errorf("webhook: %w: %s", errPrivateAddress, ip)
	}
	if !wh.opts.AllowPrivate && u.Hostname() == "localhost" {
		return fmt.Errorf("webhook: %w: localhost", errPrivateAddress)
	}
	return nil
}

// reserve takes a pending webhook's place; false past MaxPending.
func (wh *webhooks) reserve() bool {
	wh.mu.Lock()
	defer wh.mu.Unlock()
	if wh.pending >= wh.opts.MaxPending {
		return false
	}
	wh.pending++
	return true
}

func (wh *webhooks) release() {
	wh.mu.Lock()
	wh.pending--
	wh.mu.Unlock()
}

// pendingHook is a run's webhook before the run starts: its place among
// the pending ones taken, its session on the thread subscribed from
// before the run's first event. nil when the run asks for none.
type pendingHook struct {
	h            *Handler
	thread, hook string
	ss           *server.Session
}

// webhookFor checks and reserves req's webhook, if it asks for one, and
// subscribes to what the webhook needs of thread after seq: the root
// lifecycle (its end) and the values (its last ones, for a thread deleted
// once it ended). It answers a webhook it cannot take itself (ok false).
func (h *Handler) webhookFor(w http.ResponseWriter, thread string, after uint64, req *LgRunCreate) (*pendingHook, bool) {
	if req.Webhook == nil || *req.Webhook == "" {
		return nil, true
	}
	hook := *req.Webhook
	if err := h.webhooks.check(hook); err != nil {
		if errors.Is(err, errPrivateAddress) {
			h.Observer.Refused("webhook_egress")
		}
		fail(w, http.StatusUnprocessableEntity, "%v", err)
		return nil, false
	}
	if !h.webhooks.reserve() {
		h.Observer.Refused("webhooks")
		fail(w, http.StatusTooManyRequests, "webhook: %d runs wait for theirs already, the most the server keeps (--max-pending-webhooks)", h.webhooks.opts.MaxPending)
		return nil, false
	}
	ss := h.Server.NewSession(thread)
	if _, _, err := ss.Subscribe(channels.Filter{Channels: []string{channels.Lifecycle, "values"}, Depth: 0}, server.SeqCursor(after)); err != nil {
		ss.Close()
		h.webhooks.release()
		serverError(w, err)
		return nil, false
	}
	return &pendingHook{h: h, thread: thread, hook: hook, ss: ss}, true
}

// started delivers the webhook once run runID ends, if it started (ok),
// or lets its place and session go.
func (p *pendingHook) started(runID string, ok bool) {
	switch {
	case p == nil:
	case ok:
		p.h.deliverAfter(p.thread, runID, p.hook, p.h.now(), p.ss)
	default:
		p.ss.Close()
		p.h.webhooks.release()
	}
}

// deliverAfter watches run runID of thread on ss (which it closes) until
// the run ends, then POSTs its record, with its status, times and last
// values, as the Platform sends it, to hook.
func (h *Handler) deliverAfter(thread, runID, hook string, started time.Time, ss *server.Session) {
	wh := h.webhooks
	wh.wg.Add(1)
	go func() {
		defer wh.wg.Done()
		defer wh.release()
		defer ss.Close()
		status, errMsg := "", ""
		var values any
		for status == "" {
			e, err := ss.Next(wh.ctx)
			if err != nil {
				return // the server closes (or the thread went): nothing to tell
			}
			switch p := e.Payload.(type) {
			case *protocol.ServerEventValues:
				values = p.Params.Data
			case *protocol.ServerEventLifecycle:
				if !e.EndsRun() && !e.WaitsOnInterrupts() {
					continue
				}
				switch d := p.Params.Data; {
				case e.WaitsOnInterrupts():
					status = server.RunInterrupted
				case d.Event == protocol.AgentStatusFailed:
					status = server.RunError
					if d.Error != nil {
						errMsg = *d.Error
					}
				default:
					status = server.RunSuccess
				}
			}
		}
		ended := h.now()
		rec := server.RunRecord{ID: runID, Thread: thread, Status: status, CreatedAt: started, UpdatedAt: ended}
		h.catalog.SyncRuns(wh.ctx)
		if runs, err := h.catalog.Runs(wh.ctx, thread); err == nil {
			for _, known := range runs {
				if known.ID == runID {
					rec = known
				}
			}
		}
		payload := map[string]any{}
		b, _ := json.Marshal(lgRun(rec))
		_ = json.Unmarshal(b, &payload)
		payload["status"] = status
		payload["run_started_at"] = stamp(started)
		payload["run_ended_at"] = stamp(ended)
		payload["values"] = values
		if errMsg != "" {
			payload["error"] = errMsg
		}
		wh.send(hook, payload)
	}()
}

// send POSTs payload to hook, trying again after a 5xx, a 429 or no
// answer, 1 s, 2 s, 4 s ... apart, Attempts times at most.
func (wh *webhooks) send(hook string, payload map[string]any) {
	wait := time.Second
	for attempt := 1; ; attempt++ {
		payload["webhook_sent_at"] = stamp(time.Now())
		body, _ := json.Marshal(payload)
		req, err := http.NewRequestWithContext(wh.ctx, http.MethodPost, hook, bytes.NewReader(body))
		if err != nil {
			wh.outcome("failed")
			return
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := wh.client.Do(req)
		retry := true
		if err == nil {
			resp.Body.Close()
			switch {
			case resp.StatusCode < 300:
				wh.outcome("sent")
				return
			case resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests:
				retry = false // the receiver refuses it: asking again changes nothing
			}
		} else if errors.Is(err, errPrivateAddress) {
			wh.outcome("refused")
			return
		}
		if !retry || attempt >= wh.opts.Attempts || wh.ctx.Err() != nil {
			wh.outcome("failed")
			return
		}
		select {
		case <-time.After(wait):
		case <-wh.ctx.Done():
			wh.outcome("failed")
			return
		}
		wait *= 2
	}
}

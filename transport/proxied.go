package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/records"
	"github.com/agentstream/agentstream/transport/internal/httpjson"
	"github.com/agentstream/agentstream/transport/wire"
)

// proxied puts the upstream's routes (edge mode) behind the checks every
// route gets, and authorizes each on what the upstream will resolve, not
// on the raw path:
//
//   - a path whose segments decode to "." or "..", hold an encoded slash
//     or backslash, or are empty, is refused (400) before anything else,
//     as is a request asking to upgrade the connection: the edge tunnels
//     nothing it does not read;
//   - a thread id spelled as a UUID other than in its canonical form
//     (lower case, hyphenated) is refused, in the path and in a body that
//     names one, since the upstream may read every spelling as one thread
//     (authorize checks it in edge mode: canonicalThreadID);
//   - a body is read here under the limits of every route (size, time,
//     depth and values, a JSON Content-Type) and forwarded as read;
//   - a read (GET, HEAD) is admitted as a read, a run stream or join as a
//     stream (its slot and rate), anything else as a command;
//   - with authentication on, each route is authorized by its rule
//     (proxyRule): a thread's routes as every thread route, a new thread
//     owned by its creator at once, listings limited to the principal's
//     threads, each principal's own store, assistants changed by admins
//     only, and any route the edge has no rule for for admins only.
func (h *Handler) proxied(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seg, err := proxyPath(r.URL)
		if err != nil {
			h.metrics.Refused("upstream_path")
			httpjson.Write(w, http.StatusBadRequest, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "%v", err))
			return
		}
		if r.Header.Get("Upgrade") != "" || headerHasToken(r.Header, "Connection", "upgrade") {
			h.metrics.Refused("upstream_upgrade")
			httpjson.Write(w, http.StatusBadRequest, protocol.NewError(nil, protocol.ErrorCodeNotSupported, "%s %s: this route does not upgrade the connection", r.Method, r.URL.Path))
			return
		}
		kind := wire.CommandRoute
		switch {
		case r.Method == http.MethodGet || r.Method == http.MethodHead:
			kind = wire.ReadRoute
		case seg[len(seg)-1] == "stream" || seg[len(seg)-1] == "join":
			kind = wire.StreamRoute
		}
		r, p, done, ok := h.admit(w, r, kind)
		if !ok {
			return
		}
		defer done()
		var body []byte
		if hasBody(r) {
			if body, ok = h.proxyBody(w, r); !ok {
				return
			}
		}
		rule := proxyRuleOf(r.Method, seg)
		// Without authentication authorize only checks the id's spelling.
		if rule.thread != "" && !h.authorize(w, p, rule.thread, true) {
			return
		}
		if p == nil {
			forward(next, w, r, body)
			return
		}
		r = r.WithContext(auth.NewContext(r.Context(), p))
		if !p.Admin && rule.adminOnly {
			h.metrics.AuthRefused("permission_denied")
			httpjson.Write(w, http.StatusForbidden, protocol.NewError(nil, protocol.ErrorCodePermissionDenied, "%s %s is for admins only through the edge (%s)", r.Method, r.URL.Path, rule.why))
			return
		}
		if rule.serve != nil {
			rule.serve(h, next, w, r, p, body)
			return
		}
		forward(next, w, r, body)
	})
}

// proxyPath splits a pass-through request's path into its decoded
// segments, refusing what an upstream could resolve to another path than
// the one authorized: "." and ".." (however encoded), encoded slashes and
// backslashes, and empty segments.
func proxyPath(u *url.URL) ([]string, error) {
	raw := strings.TrimPrefix(u.EscapedPath(), "/")
	if raw == "" {
		return []string{""}, nil
	}
	parts := strings.Split(raw, "/")
	seg := make([]string, len(parts))
	for i, p := range parts {
		d, err := url.PathUnescape(p)
		if err != nil {
			return nil, fmt.Errorf("the path's segment %q does not decode: %v", p, err)
		}
		switch {
		case d == "":
			return nil, fmt.Errorf("the path %q has an empty segment", u.EscapedPath())
		case d == "." || d == "..":
			return nil, fmt.Errorf("the path %q has a segment that names a directory (%q): paths are sent to the upstream as they are written", u.EscapedPath(), p)
		case strings.ContainsAny(d, "/\\"):
			return nil, fmt.Errorf("the path's segment %q holds a slash or backslash", p)
		}
		seg[i] = d
	}
	return seg, nil
}

// canonicalThreadID refuses, in edge mode, a thread id that spells a UUID
// in any form but the canonical one (36 characters, lower case,
// hyphenated as 8-4-4-4-12): upper case, no hyphens, other hyphens,
// braces, "urn:uuid:". An upstream that parses UUIDs (Python's
// uuid.UUID, PostgreSQL) reads them all as one thread, which the edge
// would authorize as several. Ids that spell no UUID are left as they
// are.
func canonicalThreadID(id string) error {
	s := strings.ToLower(id)
	s = strings.TrimPrefix(s, "urn:uuid:")
	s = strings.TrimPrefix(s, "{")
	s = strings.TrimSuffix(s, "}")
	s = strings.ReplaceAll(s, "-", "")
	if len(s) != 32 || strings.Trim(s, "0123456789abcdef") != "" {
		return nil
	}
	canonical := s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32]
	if id == canonical {
		return nil
	}
	return fmt.Errorf("%w: %q spells a UUID; write it as %q", server.ErrThreadID, id, canonical)
}

// headerHasToken reports whether a comma-separated header holds token.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// hasBody reports whether a request carries a body (a length, or chunks).
func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
}

// proxyBody reads a pass-through request's body under the limits of every
// route that reads one; it answers the request itself on a refusal.
func (h *Handler) proxyBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, status, refusal, errResp := httpjson.ReadBody(w, r, h.maxBody, h.bodyTimeout, "request")
	if errResp != nil {
		if refusal != "" {
			h.metrics.Refused(refusal)
		}
		httpjson.Write(w, status, errResp)
		return nil, false
	}
	if err := h.decoder.Limits.Check(body); err != nil {
		// As every route's body past the bounds (wire.Context.WithinLimits).
		var le *protocol.LimitError
		if errors.As(err, &le) {
			h.metrics.Refused("body_" + le.Limit)
		}
		httpjson.Write(w, http.StatusBadRequest, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "request: %v", err))
		return nil, false
	}
	return body, true
}

// forward sends r to the upstream with body (as read) in place of its own.
func forward(next http.Handler, w http.ResponseWriter, r *http.Request, body []byte) {
	if body == nil {
		r.Body = http.NoBody
		r.ContentLength = 0
		r.Header.Del("Content-Length")
	} else {
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.Header.Set("Content-Length", strconv.Itoa(len(body)))
	}
	r.TransferEncoding = nil
	next.ServeHTTP(w, r)
}

// proxyRule is how the edge authorizes one upstream route for a
// principal (admins pass every rule but adminOnly's serve).
type proxyRule struct {
	// thread, when set, is the thread the route acts on, authorized as
	// every thread route is (its owner, or the first to use it).
	thread string
	// adminOnly refuses the route to other principals, for why.
	adminOnly bool
	why       string
	// serve, when set, forwards the request itself (rewriting it or its
	// answer); otherwise it goes as it came.
	serve func(h *Handler, next http.Handler, w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte)
}

// proxyRuleOf is the rule of an upstream route: the LangGraph Platform
// API's routes as the reference server serves them.
func proxyRuleOf(method string, seg []string) proxyRule {
	get := method == http.MethodGet || method == http.MethodHead
	post := method == http.MethodPost
	n := len(seg)
	switch seg[0] {
	case "ok", "info":
		if n == 1 && get {
			return proxyRule{}
		}
	case "threads":
		switch {
		case n == 1 && post:
			return proxyRule{serve: (*Handler).proxyCreateThread}
		case n == 2 && post && (seg[1] == "search" || seg[1] == "count"):
			return proxyRule{serve: (*Handler).proxyListThreads}
		case n == 3 && post && seg[2] == "copy":
			return proxyRule{thread: seg[1], serve: (*Handler).proxyCopyThread}
		case n >= 2 && seg[1] != "search" && seg[1] != "count":
			return proxyRule{thread: seg[1]}
		}
	case "assistants":
		switch {
		case get:
			return proxyRule{}
		case post && n == 2 && (seg[1] == "search" || seg[1] == "count"):
			return proxyRule{}
		case post && n == 3 && seg[2] == "versions":
			return proxyRule{}
		}
		return proxyRule{adminOnly: true, why: "an assistant is every principal's: creating, changing and deleting one is an admin's"}
	case "store":
		return proxyRule{serve: (*Handler).proxyStore}
	case "runs":
		switch {
		case n == 1 && post:
			return proxyRule{serve: (*Handler).proxyStatelessRun}
		case n == 2 && post && (seg[1] == "wait" || seg[1] == "stream" || seg[1] == "batch"):
			return proxyRule{serve: (*Handler).proxyStatelessRun}
		case n == 3 && get && seg[2] == "stream":
			run := seg[1]
			return proxyRule{serve: func(h *Handler, next http.Handler, w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) {
				h.proxyJoinStatelessRun(next, w, r, p, run, body)
			}}
		}
		return proxyRule{adminOnly: true, why: "crons without a thread are no principal's"}
	}
	return proxyRule{adminOnly: true, why: "a route the edge has no rule for"}
}

// proxyCreateThread forwards POST /threads with the thread owned by its
// creator before the upstream makes it: a thread_id the body names is
// authorized as every thread (another's is refused, whatever its
// if_exists), one it does not name is chosen here; a principal that is
// not an admin has it marked metadata.owner.
func (h *Handler) proxyCreateThread(next http.Handler, w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) {
	m, ok := objectBody(w, body)
	if !ok {
		return
	}
	id, _ := m["thread_id"].(string)
	if id == "" {
		id = records.NewUUID()
		m["thread_id"] = id
	}
	if !h.authorize(w, p, id, true) { // the id's spelling too
		return
	}
	if !p.Admin {
		markOwner(m, "metadata", p)
	}
	out, _ := json.Marshal(m)
	forward(next, w, r, out)
}

// proxyListThreads forwards a search or count of threads limited to the
// principal's own (metadata.owner), unless it is an admin.
func (h *Handler) proxyListThreads(next http.Handler, w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) {
	if p.Admin {
		forward(next, w, r, body)
		return
	}
	m, ok := objectBody(w, body)
	if !ok {
		return
	}
	markOwner(m, "metadata", p)
	out, _ := json.Marshal(m)
	forward(next, w, r, out)
}

// proxyCopyThread forwards POST /threads/{id}/copy (the source thread is
// authorized already) and makes the copy its creator's.
func (h *Handler) proxyCopyThread(next http.Handler, w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) {
	h.rewriteAnswer(next, w, r, body, func(status int, b []byte) ([]byte, error) {
		var th struct {
			ThreadID string `json:"thread_id"`
		}
		if status/100 != 2 || json.Unmarshal(b, &th) != nil || th.ThreadID == "" {
			return b, nil
		}
		return b, h.srv.Authorize(p, th.ThreadID, true)
	})
}

// proxyStatelessRun forwards a run without a thread (POST /runs, /runs/wait,
// /runs/stream, /runs/batch): the run is remembered as its creator's (the
// answer's Content-Location, or each run of the answer), so that only it
// may join its stream by run id, and the thread the upstream made for it
// is its creator's.
func (h *Handler) proxyStatelessRun(next http.Handler, w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) {
	// A run may name its thread in the body (the Agent Protocol's
	// stateful run): authorized as the thread's own routes are.
	type run struct {
		RunID    string  `json:"run_id"`
		ThreadID *string `json:"thread_id"`
	}
	asked, err := oneOrMany[run](body)
	if err != nil {
		httpjson.Write(w, http.StatusBadRequest, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "the body is a run or a JSON array of runs: %v", err))
		return
	}
	for _, rn := range asked {
		if rn.ThreadID != nil && !h.authorize(w, p, *rn.ThreadID, true) {
			return
		}
	}
	if strings.HasSuffix(r.URL.Path, "/wait") || strings.HasSuffix(r.URL.Path, "/stream") {
		// The answer is a stream: its head says the run.
		forward(next, &headWriter{ResponseWriter: w, head: func(hd http.Header) {
			if run, ok := strings.CutPrefix(hd.Get("Content-Location"), "/runs/"); ok {
				h.runOwners.add(run, p.Subject)
			}
		}}, r, body)
		return
	}
	h.rewriteAnswer(next, w, r, body, func(status int, b []byte) ([]byte, error) {
		if status/100 != 2 {
			return b, nil
		}
		started, _ := oneOrMany[run](b)
		for _, rn := range started {
			h.runOwners.add(rn.RunID, p.Subject)
			if rn.ThreadID != nil && *rn.ThreadID != "" {
				if err := h.srv.Authorize(p, *rn.ThreadID, true); err != nil {
					return nil, err
				}
			}
		}
		return b, nil
	})
}

// proxyJoinStatelessRun forwards GET /runs/{run}/stream (of run) for the principal
// that started the run through this node (proxyStatelessRun), or an
// admin.
func (h *Handler) proxyJoinStatelessRun(next http.Handler, w http.ResponseWriter, r *http.Request, p *auth.Principal, run string, body []byte) {
	if !p.Admin && h.runOwners.owner(run) != p.Subject {
		h.metrics.AuthRefused("permission_denied")
		httpjson.Write(w, http.StatusForbidden, protocol.NewError(nil, protocol.ErrorCodePermissionDenied, "run %s was not started by %q through this node: join it by its thread (/threads/{id}/runs/{run}/stream)", run, p.Subject))
		return
	}
	forward(next, w, r, body)
}

// objectBody decodes a JSON object body (none is {}); it answers 400
// itself when it is not one.
func objectBody(w http.ResponseWriter, body []byte) (map[string]any, bool) {
	m := map[string]any{}
	if len(bytes.TrimSpace(body)) == 0 {
		return m, true
	}
	if err := json.Unmarshal(body, &m); err != nil || m == nil {
		httpjson.Write(w, http.StatusBadRequest, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "the body is a JSON object"))
		return nil, false
	}
	return m, true
}

// oneOrMany decodes a JSON value that is one T or an array of them (an
// empty body is none).
func oneOrMany[T any](b []byte) ([]T, error) {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0:
		return nil, nil
	case b[0] == '[':
		var many []T
		err := json.Unmarshal(b, &many)
		return many, err
	}
	var one T
	if err := json.Unmarshal(b, &one); err != nil {
		return nil, err
	}
	return []T{one}, nil
}

// markOwner sets m[member].owner to p's subject.
func markOwner(m map[string]any, member string, p *auth.Principal) {
	md, _ := m[member].(map[string]any)
	if md == nil {
		md = map[string]any{}
	}
	md["owner"] = p.Subject
	m[member] = md
}

// maxRewritten bounds an upstream answer the edge reads to rewrite.
const maxRewritten = 8 << 20

// rewriteAnswer forwards r and hands the upstream's answer to rewrite
// before it goes to the client; an answer larger than maxRewritten, or one
// rewrite refuses, is an error of its own.
func (h *Handler) rewriteAnswer(next http.Handler, w http.ResponseWriter, r *http.Request, body []byte, rewrite func(status int, b []byte) ([]byte, error)) {
	cw := &captureWriter{header: http.Header{}}
	forward(next, cw, r, body)
	if cw.over {
		httpjson.Write(w, http.StatusBadGateway, protocol.NewError(nil, protocol.ErrorCodeUnavailable, "the upstream's answer is larger than %d bytes", maxRewritten))
		return
	}
	if cw.status == 0 {
		cw.status = http.StatusOK
	}
	out, err := rewrite(cw.status, cw.body.Bytes())
	if err != nil {
		httpjson.WriteRefusal(w, err)
		return
	}
	for k, v := range cw.header {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(cw.status)
	_, _ = w.Write(out)
}

// captureWriter holds an upstream answer back, up to maxRewritten bytes.
type captureWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
	over   bool
}

func (c *captureWriter) Header() http.Header { return c.header }

func (c *captureWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
}

func (c *captureWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if c.body.Len()+len(b) > maxRewritten {
		c.over = true
		return 0, fmt.Errorf("the answer is larger than %d bytes", maxRewritten)
	}
	return c.body.Write(b)
}

// headWriter calls head with the answer's header as it is written.
type headWriter struct {
	http.ResponseWriter
	head  func(http.Header)
	wrote bool
}

func (h *headWriter) WriteHeader(code int) {
	if !h.wrote {
		h.wrote = true
		if code/100 == 2 {
			h.head(h.ResponseWriter.Header())
		}
	}
	h.ResponseWriter.WriteHeader(code)
}

func (h *headWriter) Write(b []byte) (int, error) {
	if !h.wrote {
		h.WriteHeader(http.StatusOK)
	}
	return h.ResponseWriter.Write(b)
}

// Flush passes the upstream's frames on as they come.
func (h *headWriter) Flush() {
	if !h.wrote {
		h.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(h.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection.
func (h *headWriter) Unwrap() http.ResponseWriter { return h.ResponseWriter }

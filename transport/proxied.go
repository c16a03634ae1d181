package transport

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/transport/internal/httpjson"
	"github.com/agentstream/agentstream/transport/wire"
)

// proxied puts the upstream's routes (edge mode) behind the checks every
// route gets: a read (GET, HEAD) a read's, a run stream a stream's (its
// slot and rate), anything else a command's (same-site rules, rate), and
// authentication when it is on. With authentication, a route of one
// thread (/threads/{id}/...) is authorized for it as every thread route
// is (the first principal to use a thread owns it); a principal that is
// not an admin has the threads it makes marked with its subject
// (metadata.owner, POST /threads) and its searches and counts limited to
// them, so that no principal lists another's threads.
func (h *Handler) proxied(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind := wire.CommandRoute
		switch {
		case r.Method == http.MethodGet || r.Method == http.MethodHead:
			kind = wire.ReadRoute
		case strings.HasSuffix(r.URL.Path, "/stream") || strings.HasSuffix(r.URL.Path, "/join"):
			kind = wire.StreamRoute
		}
		r, p, done, ok := h.admit(w, r, kind)
		if !ok {
			return
		}
		defer done()
		if p != nil {
			r = r.WithContext(auth.NewContext(r.Context(), p))
			if !h.proxyAuthorized(w, r, p) {
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// proxyAuthorized applies a principal's rights to an upstream route; it
// answers the request itself when they refuse it.
func (h *Handler) proxyAuthorized(w http.ResponseWriter, r *http.Request, p *auth.Principal) bool {
	seg := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(seg) >= 2 && seg[0] == "threads" && seg[1] != "search" && seg[1] != "count" {
		// One thread's route: the edge may not know a thread the
		// upstream made, so the first principal to use it owns it.
		return h.authorize(w, p, seg[1], true)
	}
	listing := r.Method == http.MethodPost && seg[0] == "threads" &&
		(len(seg) == 1 || len(seg) == 2 && (seg[1] == "search" || seg[1] == "count"))
	if p.Admin || !listing {
		return true
	}
	// POST /threads marks the thread as the principal's; a search or a
	// count selects only the principal's.
	const member = "metadata"
	body, status, refusal, errResp := httpjson.ReadBody(w, r, h.maxBody, h.bodyTimeout, "request")
	if errResp != nil {
		if refusal != "" {
			h.metrics.Refused(refusal)
		}
		httpjson.Write(w, status, errResp)
		return false
	}
	var m map[string]any
	if len(bytes.TrimSpace(body)) == 0 {
		m = map[string]any{}
	} else if err := json.Unmarshal(body, &m); err != nil || m == nil {
		httpjson.Write(w, http.StatusBadRequest, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "the body is a JSON object"))
		return false
	}
	md, _ := m[member].(map[string]any)
	if md == nil {
		md = map[string]any{}
	}
	md["owner"] = p.Subject
	m[member] = md
	out, _ := json.Marshal(m)
	r.Body = http.NoBody
	if len(out) > 0 {
		r.Body = readCloser{bytes.NewReader(out)}
	}
	r.ContentLength = int64(len(out))
	r.Header.Set("Content-Length", strconv.Itoa(len(out)))
	return true
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

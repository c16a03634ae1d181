package edge

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
)

// Proxy passes a request the edge does not serve itself to the upstream
// (the LangGraph Platform API's routes: threads, runs, assistants, store,
// run streams), so that a front end needs only the edge's address. It
// streams the answer as it comes (an SSE stream flushes each write),
// forwards Last-Event-ID and the request's other headers, replaces the
// client's credential with the edge's own headers (Options.Header) and
// sends the caller's principal in Options.IdentityHeader. An upstream that
// does not start its answer within Options.ResponseTimeout is answered
// 504, one that cannot be reached 502. The transport checks, reads,
// authenticates and authorizes the request first.
func (e *Edge) Proxy() http.Handler {
	target, err := url.Parse(e.opts.URL)
	if err != nil {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			proxyError(w, http.StatusBadGateway, "the upstream's URL does not parse")
		})
	}
	timed := http.DefaultTransport.(*http.Transport).Clone()
	timed.ResponseHeaderTimeout = e.opts.ResponseTimeout
	untimed := http.DefaultTransport.(*http.Transport).Clone()
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
			// The client's Host, scheme and address, as a reverse proxy
			// passes them (the upstream builds URLs from them): the
			// client's own X-Forwarded-* were dropped by Rewrite.
			pr.SetXForwarded()
			h := pr.Out.Header
			h.Del("Authorization")
			h.Del("X-Api-Key")
			h.Del("Cookie")
			// The transport refuses upgrades on these routes; nothing
			// that asks for one reaches the upstream.
			h.Del("Upgrade")
			if q := pr.Out.URL.Query(); q.Has("access_token") {
				q.Del("access_token")
				pr.Out.URL.RawQuery = q.Encode()
			}
			if e.opts.IdentityHeader != "" {
				h.Del(e.opts.IdentityHeader) // only the edge says who calls
			}
			for k, v := range e.opts.Header {
				h[k] = v
			}
			for k, v := range e.identity(pr.In.Context()) {
				h[k] = v
			}
		},
		Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
			if strings.HasSuffix(r.URL.Path, "/join") {
				return untimed.RoundTrip(r)
			}
			return timed.RoundTrip(r)
		}),
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				e.timeouts.Add(1)
				proxyError(w, http.StatusGatewayTimeout, "the upstream did not answer within "+e.opts.ResponseTimeout.String()+" (--upstream-timeout)")
				return
			}
			if r.Context().Err() != nil {
				return // the client went away
			}
			proxyError(w, http.StatusBadGateway, "the upstream did not answer: "+err.Error())
		},
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// proxyError answers status in the Platform's error shape.
func proxyError(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"detail": detail})
}

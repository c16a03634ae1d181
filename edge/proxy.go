package edge

import (
	"encoding/json"
	"net/http"
	"net/http/httputil"
	"net/url"
)

// Proxy passes a request the edge does not serve itself to the upstream
// (the LangGraph Platform API's routes: threads, runs, assistants, store,
// run streams), so that a front end needs only the edge's address. It
// streams the answer as it comes (an SSE stream flushes each write),
// forwards Last-Event-ID and the request's other headers, replaces the
// client's credential with the edge's own headers (Options.Header) and
// sends the caller's principal in Options.IdentityHeader. The transport
// authenticates and authorizes the request first.
func (e *Edge) Proxy() http.Handler {
	target, err := url.Parse(e.opts.URL)
	if err != nil {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			proxyError(w, "the upstream's URL: "+err.Error())
		})
	}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
			h := pr.Out.Header
			h.Del("Authorization")
			h.Del("X-Api-Key")
			h.Del("Cookie")
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
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			proxyError(w, "the upstream did not answer: "+err.Error())
		},
	}
}

// proxyError answers 502 in the Platform's error shape.
func proxyError(w http.ResponseWriter, detail string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadGateway)
	_ = json.NewEncoder(w).Encode(map[string]string{"detail": detail})
}

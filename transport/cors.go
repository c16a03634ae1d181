package transport

import (
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// LoopbackOrigins is the pattern (in --allowed-origins) that stands for
// every page served from this machine's loopback names: localhost,
// 127.0.0.1 and [::1], on any port, http or https. It is the default of
// agentstream serve, so that a front end a developer runs on localhost
// talks to a server on localhost without a flag; a page of any other
// origin is allowed only when named.
const LoopbackOrigins = "loopback"

// ExpandOrigins returns patterns with LoopbackOrigins replaced by the
// host patterns it stands for (path.Match syntax, as
// ws.Options.OriginPatterns takes them).
func ExpandOrigins(patterns []string) []string {
	var out []string
	for _, p := range patterns {
		if strings.EqualFold(p, LoopbackOrigins) {
			out = append(out, "localhost", "localhost:*", "127.0.0.1", "127.0.0.1:*", `\[::1\]`, `\[::1\]:*`)
			continue
		}
		out = append(out, p)
	}
	return out
}

// everyOrigin reports whether the patterns allow every origin ("*").
func everyOrigin(patterns []string) bool {
	for _, p := range patterns {
		if p == "*" {
			return true
		}
	}
	return false
}

// corsMethods are the methods a preflight allows: every one the HTTP
// routes use.
const corsMethods = "GET, POST, PUT, PATCH, DELETE"

// corsExposed are the answer headers a page of another origin may read:
// those the official SDKs read (a run's id in Content-Location, a
// page's total) and the server's own.
const corsExposed = "Content-Location, Location, X-Pagination-Total, X-Pagination-Next, Retry-After, Agentstream-Thread, Agentstream-Warning"

// allowedOrigin reports whether a browser page of origin may use the
// server: its host (or scheme://host, for a pattern with a scheme) matches
// one of the patterns, with path.Match and ignoring case, the way
// coder/websocket checks a WebSocket's origin.
func allowedOrigin(patterns []string, origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	for _, p := range patterns {
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(target)); ok {
			return true
		}
	}
	return false
}

// sameOrigin reports whether origin is a page of the host the request was
// sent to.
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, host)
}

// allowedHost reports whether a request's Host (the port aside) matches
// one of the patterns.
func allowedHost(patterns []string, host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(strings.ToLower(host), "[]")
	for _, p := range patterns {
		if ok, _ := path.Match(strings.ToLower(p), host); ok {
			return true
		}
	}
	return false
}

// cors answers a browser's cross-origin checks for the HTTP routes. A
// request from an allowed origin gets Access-Control-Allow-Origin (an SSE
// stream keeps it, taken over or not); a preflight from one is answered
// here. It reports whether the request was answered. Requests from other
// origins get no CORS headers, which browsers take as a refusal;
// credentials are never allowed.
func (h *Handler) cors(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" || len(h.corsOrigins) == 0 || !allowedOrigin(h.corsOrigins, origin) {
		return false
	}
	hdr := w.Header()
	hdr.Set("Access-Control-Allow-Origin", origin)
	hdr.Add("Vary", "Origin")
	if r.Method != http.MethodOptions || r.Header.Get("Access-Control-Request-Method") == "" {
		hdr.Set("Access-Control-Expose-Headers", corsExposed)
		return false
	}
	hdr.Set("Access-Control-Allow-Methods", corsMethods)
	if rh := r.Header.Get("Access-Control-Request-Headers"); rh != "" {
		hdr.Set("Access-Control-Allow-Headers", rh)
	}
	hdr.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
	return true
}

package transport

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// TrustedProxies are the peers (reverse proxies, load balancers) whose
// forwarding headers say who the client is. Behind a proxy every request
// comes from the proxy's address, so without them the per-client limits,
// the failed-authentication throttle and the logs would count all
// clients as one.
type TrustedProxies []netip.Prefix

// ParseTrustedProxies reads a comma-separated list of addresses and CIDR
// prefixes ("10.0.0.0/8,192.168.1.7,::1"); a bare address is a prefix of
// itself alone.
func ParseTrustedProxies(list string) (TrustedProxies, error) {
	var out TrustedProxies
	for _, item := range strings.Split(list, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		if strings.Contains(item, "/") {
			p, err := netip.ParsePrefix(item)
			if err != nil {
				return nil, fmt.Errorf("trusted proxy %q: %v", item, err)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(item)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: not an address or a CIDR prefix", item)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// trusts reports whether a is one of the proxies.
func (tp TrustedProxies) trusts(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range tp {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Client is the address of the client a request comes from: the peer's,
// or, when the peer is a trusted proxy, the address the forwarding
// headers name, each read from the right past every trusted proxy (the
// entries to the left of the first untrusted one are the client's to
// write, and are not believed). Forwarded's for= and X-Forwarded-For are
// one chain under one rule: when both are sent they must name the same
// client, else the client is the peer itself, since a proxy that keeps
// only one of them passes the other on as the client wrote it.
func (tp TrustedProxies) Client(r *http.Request) netip.Addr {
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		a, err := netip.ParseAddr(remoteIP(r.RemoteAddr))
		if err != nil {
			return netip.Addr{}
		}
		peer = netip.AddrPortFrom(a, 0)
	}
	client := peer.Addr().Unmap()
	if len(tp) == 0 || !tp.trusts(client) {
		return client
	}
	fwd, xff := forwardedFor(r.Header), xForwardedFor(r.Header)
	switch {
	case len(fwd) > 0 && len(xff) > 0:
		if a, b := tp.walk(client, fwd), tp.walk(client, xff); a == b {
			return a
		}
		return client
	case len(fwd) > 0:
		return tp.walk(client, fwd)
	}
	return tp.walk(client, xff)
}

// walk reads hops (the client first) from the right, from the trusted
// peer, to the first hop that is not a trusted proxy.
func (tp TrustedProxies) walk(peer netip.Addr, hops []string) netip.Addr {
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := parseHop(hops[i])
		if !ok {
			break // what is left of it cannot be read: the last hop known
		}
		client = a
		if !tp.trusts(a) {
			break
		}
	}
	return client
}

// Wrap returns next with each request's RemoteAddr set to its client's
// address (Client), so that limits, the throttle and logs count clients,
// not the proxy. Without trusted proxies it returns next.
func (tp TrustedProxies) Wrap(next http.Handler) http.Handler {
	if len(tp) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c := tp.Client(r); c.IsValid() && c.String() != remoteIP(r.RemoteAddr) {
			r = r.WithContext(r.Context()) // a copy: the server's own request stays as it came
			r.RemoteAddr = net.JoinHostPort(c.String(), "0")
		}
		next.ServeHTTP(w, r)
	})
}

// forwardedFor lists the hops Forwarded's for= parameters (RFC 7239)
// name, the client first.
func forwardedFor(h http.Header) []string {
	var hops []string
	for _, line := range h.Values("Forwarded") {
		for _, elem := range strings.Split(line, ",") {
			for _, pair := range strings.Split(elem, ";") {
				k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
				if ok && strings.EqualFold(k, "for") {
					hops = append(hops, strings.Trim(v, `"`))
				}
			}
		}
	}
	return hops
}

// xForwardedFor lists X-Forwarded-For's entries, the client first.
func xForwardedFor(h http.Header) []string {
	var hops []string
	for _, line := range h.Values("X-Forwarded-For") {
		for _, item := range strings.Split(line, ",") {
			if item = strings.TrimSpace(item); item != "" {
				hops = append(hops, item)
			}
		}
	}
	return hops
}

// parseHop reads one hop's address: "192.0.2.1", "192.0.2.1:4711",
// "[2001:db8::1]:4711" or "2001:db8::1"; not "unknown" or an obfuscated
// name.
func parseHop(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

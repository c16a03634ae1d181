package transport_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
)

// TestTrustedProxiesNameTheClient: from a trusted peer the forwarding
// headers name the client, read from the right past every trusted proxy
// (what a client wrote to the left of that is not believed); from any
// other peer they are ignored.
func TestTrustedProxiesNameTheClient(t *testing.T) {
	tp, err := transport.ParseTrustedProxies("10.0.0.0/8, 192.168.1.7,::1")
	require.NoError(t, err)
	for _, tc := range []struct{ peer, xff, fwd, want string }{
		{"203.0.113.9:5000", "198.51.100.1", "", "203.0.113.9"},                        // not a proxy: ignored
		{"10.1.2.3:5000", "", "", "10.1.2.3"},                                          // a proxy, no header
		{"10.1.2.3:5000", "198.51.100.1", "", "198.51.100.1"},                          // one proxy
		{"10.1.2.3:5000", "6.6.6.6, 198.51.100.1, 10.9.9.9", "", "198.51.100.1"},       // two proxies; a spoofed entry on the left
		{"[::1]:5000", "198.51.100.1", "", "198.51.100.1"},                             // IPv6 proxy
		{"192.168.1.7:5000", "10.0.0.1, 10.0.0.2", "", "10.0.0.1"},                     // all trusted: the leftmost
		{"10.1.2.3:5000", "garbage, 198.51.100.1", "", "198.51.100.1"},                 // garbage past the client
		{"10.1.2.3:5000", "198.51.100.1, garbage", "", "10.1.2.3"},                     // unreadable: the last known hop
		{"10.1.2.3:5000", "", `for="[2001:db8::7]:4711";proto=https`, "2001:db8::7"},   // Forwarded alone
		{"10.1.2.3:5000", "2001:db8::7", `for="[2001:db8::7]:4711"`, "2001:db8::7"},    // both, agreeing
		{"10.1.2.3:5000", "198.51.100.1", "for=6.6.6.6", "10.1.2.3"},                   // both, disagreeing: the proxy
		{"10.1.2.3:5000", "6.6.6.6, 198.51.100.1", "for=198.51.100.1", "198.51.100.1"}, // one chain, one rule
		{"10.1.2.3:5000", "", "for=192.0.2.60;by=10.1.2.3, for=10.4.4.4", "192.0.2.60"},
		{"10.1.2.3:5000", "", "for=unknown", "10.1.2.3"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.peer
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		if tc.fwd != "" {
			r.Header.Set("Forwarded", tc.fwd)
		}
		require.Equal(t, tc.want, tp.Client(r).String(), "%+v", tc)
	}
	for _, bad := range []string{"10.0.0.0/33", "example.com", "1.2.3"} {
		_, err := transport.ParseTrustedProxies(bad)
		require.Error(t, err, bad)
	}
}

// TestPerClientLimitsBehindATrustedProxy: behind a trusted proxy two
// clients have a command budget each; when the proxy is not trusted, the
// header is ignored and they share the proxy's.
func TestPerClientLimitsBehindATrustedProxy(t *testing.T) {
	for _, trusted := range []bool{true, false} {
		t.Run(fmt.Sprint("trusted=", trusted), func(t *testing.T) {
			srv := server.New(server.Config{})
			t.Cleanup(func() { _ = srv.Close(t.Context()) })
			h := transport.New(srv, transport.Options{HTTPCommandRate: 0.001, HTTPCommandBurst: 1})
			t.Cleanup(func() { _ = h.Shutdown(t.Context()) })
			list := "10.0.0.0/8"
			if trusted {
				list = "127.0.0.1"
			}
			tp, err := transport.ParseTrustedProxies(list)
			require.NoError(t, err)
			ts := httptest.NewServer(tp.Wrap(h))
			t.Cleanup(ts.Close)
			send := func(client string) int {
				req, _ := http.NewRequest("POST", ts.URL+"/threads/tp/commands", strings.NewReader(`{"id": 1, "method": "state.get", "params": {"namespace": []}}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Forwarded-For", client)
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				resp.Body.Close()
				return resp.StatusCode
			}
			require.Equal(t, 200, send("198.51.100.1"))
			require.Equal(t, 429, send("198.51.100.1"), "the first client's budget is spent")
			if trusted {
				require.Equal(t, 200, send("198.51.100.2"), "the second client has its own")
			} else {
				require.Equal(t, 429, send("198.51.100.2"), "one budget: the proxy's")
			}
		})
	}
}

// TestAForwardedHeaderTheProxyPassesOnIsNotBelieved: behind a proxy that
// appends the client to X-Forwarded-For and passes the client's own
// Forwarded on (nginx's default), a client rotating its Forwarded header
// is still one client: its failed authentications reach the throttle's
// 429.
func TestAForwardedHeaderTheProxyPassesOnIsNotBelieved(t *testing.T) {
	a, err := auth.New(t.Context(), auth.Config{APIKeys: map[string]auth.Principal{"k-ann": {Subject: "ann"}}})
	require.NoError(t, err)
	srv := server.New(server.Config{})
	t.Cleanup(func() { _ = srv.Close(t.Context()) })
	h := transport.New(srv, transport.Options{Auth: a, AuthFailureRate: 0.001, AuthFailureBurst: 5})
	t.Cleanup(func() { _ = h.Shutdown(t.Context()) })
	tp, err := transport.ParseTrustedProxies("127.0.0.1")
	require.NoError(t, err)
	ts := httptest.NewServer(tp.Wrap(h))
	t.Cleanup(ts.Close)
	limited := 0
	for i := range 20 {
		req, _ := http.NewRequest("POST", ts.URL+"/threads/tp/commands", strings.NewReader(`{"id": 1, "method": "state.get", "params": {"namespace": []}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Api-Key", fmt.Sprint("bad-", i))
		req.Header.Set("X-Forwarded-For", "198.51.100.9")               // what the proxy appended
		req.Header.Set("Forwarded", fmt.Sprintf("for=203.0.113.%d", i)) // what the client wrote
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		if resp.StatusCode == 429 {
			limited++
		}
	}
	require.Positive(t, limited, "the throttle counts one client")
}

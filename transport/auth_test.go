package transport_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/internal/testkit/servetest"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// authed runs a server that takes HS256 tokens for audience
// "agentstream" and the API keys k-alice (alice) and k-bob (bob).
func authed(t *testing.T, leeway time.Duration) (*httptest.Server, *server.Server, *auth.Authenticator) {
	t.Helper()
	a, err := auth.New(context.Background(), auth.Config{HS256Secret: testSecret, Audience: "agentstream", Leeway: leeway,
		APIKeys: map[string]auth.Principal{"k-alice": {Subject: "alice"}, "k-bob": {Subject: "bob"}}})
	require.NoError(t, err)
	t.Cleanup(a.Close)
	ts, _, srv := start(t, transport.Options{Auth: a})
	return ts, srv, a
}

func token(t *testing.T, o auth.TokenOptions) string {
	t.Helper()
	if o.Audience == "" {
		o.Audience = "agentstream"
	}
	if o.TTL == 0 {
		o.TTL = time.Hour
	}
	tok, err := auth.Mint(testSecret, o)
	require.NoError(t, err)
	return tok
}

// call makes one request of a route and returns its status, its
// ErrorResponse code (if any) and its WWW-Authenticate header. Streams
// are closed once their head arrives.
func call(t *testing.T, ts *httptest.Server, route, thread string, cred func(h http.Header, q url.Values)) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, q := http.Header{}, url.Values{}
	if cred != nil {
		cred(h, q)
	}
	if route == "ws" {
		u := "ws" + strings.TrimPrefix(ts.URL, "http") + "/threads/" + thread + "/stream?" + q.Encode()
		c, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: h})
		if err == nil {
			c.CloseNow()
			return resp.StatusCode, "", ""
		}
		require.NotNil(t, resp, "%v", err)
		return resp.StatusCode, errorCode(t, resp.Body), resp.Header.Get("WWW-Authenticate")
	}
	method, path, body := "GET", "/threads/"+thread+"/", ""
	switch route {
	case "sse-post":
		method, path, body = "POST", path+"stream", `{"channels": ["lifecycle"]}`
	case "sse-get":
		path += "stream/events"
	case "commands":
		method, path, body = "POST", path+"commands", `{"id": 1, "method": "state.get", "params": {"namespace": []}}`
	case "state":
		path += "state"
	case "metrics", "healthz":
		path = "/" + route
	}
	req, err := http.NewRequestWithContext(ctx, method, ts.URL+path+"?"+q.Encode(), strings.NewReader(body))
	require.NoError(t, err)
	req.Header = h
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	if resp.StatusCode < 300 {
		return resp.StatusCode, "", ""
	}
	return resp.StatusCode, errorCode(t, resp.Body), resp.Header.Get("WWW-Authenticate")
}

func errorCode(t *testing.T, body io.Reader) string {
	var e struct {
		Type, Error string
	}
	b, _ := io.ReadAll(body)
	require.NoError(t, json.Unmarshal(b, &e), "%s", b)
	require.Equal(t, "error", e.Type)
	return e.Error
}

// TestAuthMatrix: every route, both transports, and each kind of
// credential get the exact status and error code. alice owns thread
// "owned"; carol's token grants her "owned*"; root is an admin.
func TestAuthMatrix(t *testing.T) {
	ts, srv, _ := authed(t, 0)
	bearer := func(tok string) func(http.Header, url.Values) {
		return func(h http.Header, _ url.Values) { h.Set("Authorization", "Bearer "+tok) }
	}
	alice := token(t, auth.TokenOptions{Subject: "alice"})
	// alice creates the thread, and so owns it.
	status, _, _ := call(t, ts, "commands", "owned", bearer(alice))
	require.Equal(t, 200, status)
	require.Equal(t, "alice", servetest.Owner(t, srv, "owned"))

	other := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "alice", "aud": "agentstream", "exp": time.Now().Add(time.Hour).Unix()})
	badSig, err := other.SignedString([]byte("not the server's secret, 32 bytes+"))
	require.NoError(t, err)
	creds := []struct {
		name string
		cred func(http.Header, url.Values)
		want int    // for the thread routes
		code string // the error code with it
		// metrics: what /metrics answers
		metrics int
	}{
		{"no credential", nil, 401, "unauthenticated", 401},
		{"malformed token", bearer("not.a.jwt"), 401, "unauthenticated", 401},
		{"bad signature", bearer(badSig), 401, "unauthenticated", 401},
		{"expired", bearer(token(t, auth.TokenOptions{Subject: "alice", Now: time.Now().Add(-2 * time.Hour)})), 401, "unauthenticated", 401},
		{"wrong audience", bearer(token(t, auth.TokenOptions{Subject: "alice", Audience: "another-service"})), 401, "unauthenticated", 401},
		{"unknown API key", func(h http.Header, _ url.Values) { h.Set("X-Api-Key", "k-nobody") }, 401, "unauthenticated", 401},
		{"owner", bearer(alice), 200, "", 403},
		{"owner, token in the query", func(_ http.Header, q url.Values) { q.Set("access_token", alice) }, 200, "", 403},
		{"owner, API key", func(h http.Header, _ url.Values) { h.Set("X-Api-Key", "k-alice") }, 200, "", 403},
		{"other principal", bearer(token(t, auth.TokenOptions{Subject: "bob"})), 403, "permission_denied", 403},
		{"other principal, API key", func(h http.Header, _ url.Values) { h.Set("X-Api-Key", "k-bob") }, 403, "permission_denied", 403},
		{"admin", bearer(token(t, auth.TokenOptions{Subject: "root", Admin: true})), 200, "", 200},
		{"threads grant", bearer(token(t, auth.TokenOptions{Subject: "carol", Threads: []string{"own*"}})), 200, "", 403},
		{"grant of other threads", bearer(token(t, auth.TokenOptions{Subject: "carol", Threads: []string{"team-*"}})), 403, "permission_denied", 403},
	}
	for _, c := range creds {
		for _, route := range []string{"sse-post", "sse-get", "ws", "commands", "state", "metrics", "healthz"} {
			want, code := c.want, c.code
			switch route {
			case "ws":
				if want == 200 {
					want = http.StatusSwitchingProtocols
				}
			case "metrics":
				want = c.metrics
				code = map[int]string{401: "unauthenticated", 403: "permission_denied", 200: ""}[want]
			case "healthz":
				want, code = 200, ""
			}
			status, gotCode, challenge := call(t, ts, route, "owned", c.cred)
			require.Equal(t, want, status, "%s, %s", c.name, route)
			require.Equal(t, code, gotCode, "%s, %s", c.name, route)
			if status == 401 {
				require.True(t, strings.HasPrefix(challenge, "Bearer"), "%s, %s: WWW-Authenticate %q", c.name, route, challenge)
				require.Equal(t, c.cred != nil, strings.Contains(challenge, `error="invalid_token"`), challenge)
			}
		}
	}
	require.Equal(t, "alice", servetest.Owner(t, srv, "owned"), "no request changed the owner")
	require.Positive(t, srv.Metrics().Denied)
}

// TestFirstUserOwnsTheThread: whoever uses a new thread first owns it,
// whatever the route; a stranger's request for an unknown thread claims
// that thread for the stranger, not anyone else's.
func TestFirstUserOwnsTheThread(t *testing.T) {
	ts, srv, _ := authed(t, 0)
	bob := func(h http.Header, _ url.Values) { h.Set("X-Api-Key", "k-bob") }
	alice := func(h http.Header, _ url.Values) { h.Set("X-Api-Key", "k-alice") }
	for i, route := range []string{"sse-post", "sse-get", "ws", "commands"} {
		thread := fmt.Sprintf("new-%d", i)
		status, _, _ := call(t, ts, route, thread, bob)
		require.Less(t, status, 300, route)
		require.Equal(t, "bob", servetest.Owner(t, srv, thread), route)
		status, code, _ := call(t, ts, route, thread, alice)
		require.Equal(t, 403, status, route)
		require.Equal(t, "permission_denied", code)
	}
	// Reading the state of an unknown thread is 404 and claims nothing.
	status, code, _ := call(t, ts, "state", "unknown", bob)
	require.Equal(t, 404, status)
	require.Equal(t, "no_such_thread", code)
	require.Equal(t, "", servetest.Owner(t, srv, "unknown"))
	require.False(t, servetest.HasThread(t, srv, "unknown"))
	// A refused request claims nothing.
	status, _, _ = call(t, ts, "commands", "never", func(h http.Header, _ url.Values) { h.Set("X-Api-Key", "wrong") })
	require.Equal(t, 401, status)
	require.Equal(t, "", servetest.Owner(t, srv, "never"))
	require.False(t, servetest.HasThread(t, srv, "never"))
}

// TestAuthStopsTheSecondClient replays the incident of the issue: a second
// principal can neither read another's stream nor answer its interrupt
// nor cancel its run, over either transport.
func TestAuthStopsTheSecondClient(t *testing.T) {
	ts, _, _ := authed(t, 0)
	alice := token(t, auth.TokenOptions{Subject: "alice"})
	mallory := token(t, auth.TokenOptions{Subject: "mallory"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+"/threads/victim/stream", &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + alice}}})
	require.NoError(t, err)
	defer c.CloseNow()
	wsSend(t, c, `{"id": 1, "method": "run.start", "params": {"assistant_id": "demo", "input": {}}}`)
	require.Equal(t, "success", wsRead(t, c)["type"])

	for _, cmd := range []string{
		`{"id": 7, "method": "run.cancel", "params": {}}`,
		`{"id": 7, "method": "input.respond", "params": {"namespace": [], "interrupt_id": "x", "response": true}}`,
		`{"id": 7, "method": "state.get", "params": {"namespace": []}}`,
		`{"id": 7, "method": "run.start", "params": {"assistant_id": "echo", "input": {}, "multitask_strategy": "interrupt"}}`,
	} {
		req, _ := http.NewRequest("POST", ts.URL+"/threads/victim/commands", strings.NewReader(cmd))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+mallory)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.Equal(t, 403, resp.StatusCode, cmd)
		require.Equal(t, "permission_denied", errorCode(t, resp.Body))
		resp.Body.Close()
	}
	_, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+"/threads/victim/stream?access_token="+mallory, nil)
	require.Error(t, err)
	require.Equal(t, 403, resp.StatusCode)
}

// readUntilError reads a WebSocket until it closes and returns the last
// ErrorResponse code it sent and the close status.
func readUntilClose(t *testing.T, c *websocket.Conn, within time.Duration) (lastError string, status websocket.StatusCode) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			require.NoError(t, ctx.Err(), "the connection stayed open")
			return lastError, websocket.CloseStatus(err)
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		if m["type"] == "error" {
			lastError, _ = m["error"].(string)
		}
	}
}

// TestExpiryWhileStreaming: a token with a 2 s lifetime ends a WebSocket
// with an unauthenticated error and close code 4401, and an SSE stream with
// an error event; auth.refresh before expiry keeps a WebSocket open, and a
// refresh with a bad token or another principal's is refused.
func TestExpiryWhileStreaming(t *testing.T) {
	ts, _, _ := authed(t, -1) // no leeway: the connection ends at exp
	short := func() string { return token(t, auth.TokenOptions{Subject: "alice", TTL: 2 * time.Second}) }
	first := token(t, auth.TokenOptions{Subject: "alice"})
	status, _, _ := call(t, ts, "commands", "exp", func(h http.Header, _ url.Values) { h.Set("Authorization", "Bearer "+first) })
	require.Equal(t, 200, status)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dialWS := func(tok string) *websocket.Conn {
		c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+"/threads/exp/stream", &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}}})
		require.NoError(t, err)
		t.Cleanup(func() { c.CloseNow() })
		return c
	}

	start := time.Now()
	expiring := dialWS(short())
	refreshed := dialWS(short())
	wsSend(t, refreshed, `{"id": 1, "method": "auth.refresh", "params": {"token": "not.a.jwt"}}`)
	require.Equal(t, "unauthenticated", wsRead(t, refreshed)["error"])
	wsSend(t, refreshed, fmt.Sprintf(`{"id": 2, "method": "auth.refresh", "params": {"token": %q}}`, token(t, auth.TokenOptions{Subject: "bob"})))
	require.Equal(t, "permission_denied", wsRead(t, refreshed)["error"])
	wsSend(t, refreshed, fmt.Sprintf(`{"id": 3, "method": "auth.refresh", "params": {"token": %q}}`, token(t, auth.TokenOptions{Subject: "alice", TTL: time.Hour})))
	ok := wsRead(t, refreshed)
	require.Equal(t, "success", ok["type"], ok)
	require.Equal(t, "alice", ok["result"].(map[string]any)["subject"])

	// SSE: the stream ends with an error event at expiry.
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/threads/exp/stream", strings.NewReader(`{"channels": ["lifecycle"]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+short())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	frames := readFrames(t, resp.Body, func(f frame) bool { return f.event == "error" })
	last := frames[len(frames)-1]
	require.Contains(t, last.data, `"error":"unauthenticated"`)
	rest, _ := io.ReadAll(resp.Body)
	require.Empty(t, strings.TrimSpace(string(rest)), "the stream ends after the error event")

	code, closeStatus := readUntilClose(t, expiring, 10*time.Second)
	require.Equal(t, "unauthenticated", code)
	require.Equal(t, websocket.StatusCode(4401), closeStatus)
	require.GreaterOrEqual(t, time.Since(start), time.Second, "not before the token expired")

	// The refreshed connection is still open and working.
	wsSend(t, refreshed, `{"id": 4, "method": "state.get", "params": {"namespace": []}}`)
	require.Equal(t, "success", wsRead(t, refreshed)["type"])

	// An HTTP request cannot refresh anything.
	req, _ = http.NewRequest("POST", ts.URL+"/threads/exp/commands", strings.NewReader(`{"id": 5, "method": "auth.refresh", "params": {"token": "x"}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+first)
	hresp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer hresp.Body.Close()
	require.Equal(t, 400, hresp.StatusCode)
	require.Equal(t, "not_supported", errorCode(t, hresp.Body))
}

// TestOpenServerAcceptsEveryone: with no authenticator nothing is asked,
// as before.
func TestOpenServerAcceptsEveryone(t *testing.T) {
	ts, _, srv := start(t, transport.Options{})
	for _, route := range []string{"sse-post", "sse-get", "ws", "commands", "metrics"} {
		status, _, _ := call(t, ts, route, "open", nil)
		require.Less(t, status, 300, route)
	}
	require.Equal(t, "", servetest.Owner(t, srv, "open"))
}

func TestMetricsHandlerIsOpen(t *testing.T) {
	a, err := auth.New(context.Background(), auth.Config{HS256Secret: testSecret})
	require.NoError(t, err)
	defer a.Close()
	_, h, _ := start(t, transport.Options{Auth: a})
	ms := httptest.NewServer(h.MetricsHandler())
	defer ms.Close()
	resp, err := http.Get(ms.URL + "/metrics")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Contains(t, string(b), "agentstream_events_published_total")
}

// TestWebSocketCommandsAreAuthorizedOneByOne: a WebSocket authorized at
// its handshake still has each command authorized. Here alice's thread is
// forgotten (--thread-ttl) while her connection idles, bob claims the id,
// and alice's next command is refused in-band.
func TestWebSocketCommandsAreAuthorizedOneByOne(t *testing.T) {
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	a, err := auth.New(context.Background(), auth.Config{APIKeys: map[string]auth.Principal{"k-alice": {Subject: "alice"}, "k-bob": {Subject: "bob"}}})
	require.NoError(t, err)
	defer a.Close()
	srv := server.New(server.Config{Now: clock, ThreadTTL: time.Minute})
	h := transport.New(srv, transport.Options{Auth: a})
	ts := httptest.NewServer(h)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = h.Shutdown(ctx)
		ts.Close()
		require.NoError(t, srv.Close(ctx))
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+"/threads/x/stream", &websocket.DialOptions{HTTPHeader: http.Header{"X-Api-Key": {"k-alice"}}})
	require.NoError(t, err)
	defer c.CloseNow()
	wsSend(t, c, `{"id": 1, "method": "state.get", "params": {"namespace": []}}`)
	require.Equal(t, "success", wsRead(t, c)["type"])
	require.Equal(t, "alice", servetest.Owner(t, srv, "x"))

	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	servetest.Sweep(srv)
	require.Equal(t, "", servetest.Owner(t, srv, "x"), "forgotten")
	status, _, _ := call(t, ts, "commands", "x", func(h http.Header, _ url.Values) { h.Set("X-Api-Key", "k-bob") })
	require.Equal(t, 200, status)
	require.Equal(t, "bob", servetest.Owner(t, srv, "x"))

	wsSend(t, c, `{"id": 2, "method": "state.get", "params": {"namespace": []}}`)
	resp := wsRead(t, c)
	require.Equal(t, "error", resp["type"])
	require.Equal(t, "permission_denied", resp["error"])
	require.Equal(t, float64(2), resp["id"])
}

// TestHTTPCommandRate: POST /commands is limited per client: per
// principal with auth on (two principals do not share a bucket), per IP
// without; over the limit, 429 rate_limited with Retry-After, and the
// refusal is counted.
func TestHTTPCommandRate(t *testing.T) {
	a, err := auth.New(context.Background(), auth.Config{APIKeys: map[string]auth.Principal{"k-alice": {Subject: "alice"}, "k-bob": {Subject: "bob"}}})
	require.NoError(t, err)
	defer a.Close()
	for _, authOn := range []bool{true, false} {
		opts := transport.Options{HTTPCommandRate: 0.001, HTTPCommandBurst: 3}
		if authOn {
			opts.Auth = a
		}
		ts, _, _ := start(t, opts)
		send := func(key string) *http.Response {
			req, _ := http.NewRequest("POST", ts.URL+"/threads/rl-"+key+"/commands", strings.NewReader(`{"id": 1, "method": "state.get", "params": {"namespace": []}}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Api-Key", key)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			return resp
		}
		for i := 0; i < 3; i++ {
			require.Equal(t, 200, send("k-alice").StatusCode)
		}
		over := send("k-alice")
		require.Equal(t, 429, over.StatusCode)
		require.Equal(t, "1", over.Header.Get("Retry-After"))
		if authOn {
			require.Equal(t, 200, send("k-bob").StatusCode, "bob has a bucket of his own")
		} else {
			require.Equal(t, 429, send("k-bob").StatusCode, "without auth, one IP is one client")
		}
		resp, err := http.Get(ts.URL + "/metrics")
		require.NoError(t, err)
		if resp.StatusCode == 200 {
			b, _ := io.ReadAll(resp.Body)
			require.Contains(t, string(b), `agentstream_refusals_total{limit="http_command_rate"}`)
		}
		resp.Body.Close()
	}
}

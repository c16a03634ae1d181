package transport_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// quotaServer serves a server with cfg and API keys for mallory, alice,
// bob and an admin.
func quotaServer(t *testing.T, cfg server.Config, opts transport.Options) string {
	t.Helper()
	a, err := auth.New(context.Background(), auth.Config{APIKeys: map[string]auth.Principal{
		"k-mallory": {Subject: "mallory"}, "k-alice": {Subject: "alice"}, "k-bob": {Subject: "bob"}, "k-admin": {Subject: "root", Admin: true},
	}})
	require.NoError(t, err)
	t.Cleanup(a.Close)
	opts.Auth = a
	ts, _, _ := startWith(t, cfg, opts)
	return ts.URL
}

// command posts a command as key's principal and returns the status and
// the error code.
func command(t *testing.T, base, key, thread, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/threads/"+thread+"/commands", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var e struct{ Error string }
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &e)
	return resp.StatusCode, e.Error
}

const stateGet = `{"id": 1, "method": "state.get", "params": {"namespace": []}}`

// TestOnePrincipalCannotTakeEveryThread: with --max-threads 50, one
// principal touching 50 threads used to leave every other principal,
// admins included, with 429 for a day. Now it gets a tenth of them.
func TestOnePrincipalCannotTakeEveryThread(t *testing.T) {
	base := quotaServer(t, server.Config{MaxThreads: 50}, transport.Options{})
	refused := 0
	for i := range 50 {
		if status, code := command(t, base, "k-mallory", fmt.Sprintf("m-%d", i), stateGet); status != 200 {
			require.Equal(t, 429, status)
			require.Equal(t, "resource_exhausted", code)
			refused++
		}
	}
	require.Equal(t, 45, refused, "mallory gets 5 threads of 50")
	status, _ := command(t, base, "k-alice", "a-1", stateGet)
	require.Equal(t, 200, status, "another principal still gets a thread")
	for i := range 10 {
		status, _ := command(t, base, "k-admin", fmt.Sprintf("adm-%d", i), stateGet)
		require.Equal(t, 200, status, "admins are exempt")
	}
	// Using a thread it already has costs mallory nothing.
	status, _ = command(t, base, "k-mallory", "m-0", stateGet)
	require.Equal(t, 200, status)
	req, _ := http.NewRequest("GET", base+"/metrics", nil)
	req.Header.Set("X-Api-Key", "k-admin")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Contains(t, string(b), `agentstream_refusals_total{limit="principal_threads"} 45`)
}

// TestRunsPerMinutePerPrincipal: the fourth run.start in a minute is
// refused, over HTTP and in-band on a WebSocket alike; another principal
// and admins are not affected.
func TestRunsPerMinutePerPrincipal(t *testing.T) {
	base := quotaServer(t, server.Config{MaxRunsPerMinute: 3}, transport.Options{})
	start := func(i int) string {
		return fmt.Sprintf(`{"id": %d, "method": "run.start", "params": {"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "hi"}]}, "multitask_strategy": "enqueue"}}`, i)
	}
	for i := range 3 {
		status, code := command(t, base, "k-alice", "runs-a", start(i))
		require.Equal(t, 200, status, code)
	}
	status, code := command(t, base, "k-alice", "runs-a", start(4))
	require.Equal(t, 429, status)
	require.Equal(t, "resource_exhausted", code)
	status, _ = command(t, base, "k-bob", "runs-b", start(1))
	require.Equal(t, 200, status, "bob has a quota of his own")
	for i := range 5 {
		status, _ := command(t, base, "k-admin", "runs-adm", start(i))
		require.Equal(t, 200, status, "admins are exempt")
	}
	// The same quota in-band on a WebSocket.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/threads/runs-a/stream", &websocket.DialOptions{HTTPHeader: http.Header{"X-Api-Key": {"k-alice"}}})
	require.NoError(t, err)
	defer c.CloseNow()
	require.NoError(t, c.Write(ctx, websocket.MessageText, []byte(start(9))))
	_, b, err := c.Read(ctx)
	require.NoError(t, err)
	require.Contains(t, string(b), `"error":"resource_exhausted"`)
	require.Contains(t, string(b), "--max-runs-per-minute")
}

// TestStreamsPerPrincipal: a principal's open SSE streams and WebSockets
// are counted together; one closed gives its slot back.
func TestStreamsPerPrincipal(t *testing.T) {
	base := quotaServer(t, server.Config{}, transport.Options{MaxStreamsPerPrincipal: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	openSSE := func(key string) (*http.Response, context.CancelFunc) {
		sctx, scancel := context.WithCancel(ctx)
		req, _ := http.NewRequestWithContext(sctx, "GET", base+"/threads/s-"+key+"/stream?channels=lifecycle", nil)
		req.Header.Set("X-Api-Key", key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		return resp, scancel
	}
	first, stop := openSSE("k-alice")
	require.Equal(t, 200, first.StatusCode)
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/threads/s-k-alice/stream", &websocket.DialOptions{HTTPHeader: http.Header{"X-Api-Key": {"k-alice"}}})
	require.NoError(t, err)
	third, stop3 := openSSE("k-alice")
	require.Equal(t, 429, third.StatusCode)
	third.Body.Close()
	stop3()
	_, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/threads/s-k-alice/stream", &websocket.DialOptions{HTTPHeader: http.Header{"X-Api-Key": {"k-alice"}}})
	require.Error(t, err)
	require.Equal(t, 429, resp.StatusCode)
	bob, stopBob := openSSE("k-bob")
	require.Equal(t, 200, bob.StatusCode, "bob has slots of his own")
	stopBob()
	// Closing the WebSocket and the stream gives both slots back.
	ws.Close(websocket.StatusNormalClosure, "")
	stop()
	first.Body.Close()
	require.Eventually(t, func() bool {
		r, s := openSSE("k-alice")
		defer s()
		defer r.Body.Close()
		return r.StatusCode == 200
	}, 5*time.Second, 50*time.Millisecond)
}

// TestFailedAuthenticationsAreThrottled: past the burst of failures, an
// address gets 429 before its credential is even read.
func TestFailedAuthenticationsAreThrottled(t *testing.T) {
	base := quotaServer(t, server.Config{}, transport.Options{AuthFailureRate: 0.001, AuthFailureBurst: 3})
	for range 3 {
		status, code := command(t, base, "wrong", "x", stateGet)
		require.Equal(t, 401, status)
		require.Equal(t, "unauthenticated", code)
	}
	status, code := command(t, base, "wrong", "x", stateGet)
	require.Equal(t, 429, status)
	require.Equal(t, "rate_limited", code)
	status, _ = command(t, base, "k-alice", "x", stateGet)
	require.Equal(t, 429, status, "the address is throttled, whatever it sends now")
}

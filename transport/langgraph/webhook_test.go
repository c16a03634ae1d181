package langgraph_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentstream/agentstream/internal/testkit/wiretest"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/agentstream/agentstream/transport/langgraph"
)

// hookReceiver is a webhook's receiver: it answers each POST with the
// next of statuses (200 once they run out) and keeps the bodies.
type hookReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	statuses []int
	got      []map[string]any
}

func newHookReceiver(t *testing.T, statuses ...int) *hookReceiver {
	hr := &hookReceiver{statuses: statuses}
	hr.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var v map[string]any
		_ = json.Unmarshal(b, &v)
		hr.mu.Lock()
		hr.got = append(hr.got, v)
		status := 200
		if len(hr.statuses) > 0 {
			status, hr.statuses = hr.statuses[0], hr.statuses[1:]
		}
		hr.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(hr.Close)
	return hr
}

func (hr *hookReceiver) bodies() []map[string]any {
	hr.mu.Lock()
	defer hr.mu.Unlock()
	return append([]map[string]any(nil), hr.got...)
}

// TestRunWebhooks: a run's webhook gets its end once, as the Platform
// sends it (the run, its status, times and last values), for runs.wait,
// a background run, a stateless one deleted as it ends and one that ends
// at an interrupt; a receiver's 5xx is tried again; without
// --webhook-allow-private a loopback receiver is refused and counted.
func TestRunWebhooks(t *testing.T) {
	n := start(t, server.Config{}, transport.Options{Webhooks: langgraph.WebhookOptions{AllowPrivate: true}})
	hr := newHookReceiver(t)
	hook := `, "webhook": "` + hr.URL + `/hook"`
	run := func(path, assistant, text string) {
		require.Equal(t, 200, call(t, "POST", n.url+path, `{"assistant_id": "`+assistant+`", "input": {"messages": [{"role": "user", "content": "`+text+`"}]}`+hook+`}`, "", nil))
	}
	run("/threads/wh1/runs/wait", "echo", "waited")
	require.Eventually(t, func() bool { return len(hr.bodies()) == 1 }, 10*time.Second, 10*time.Millisecond)
	got := hr.bodies()[0]
	require.Equal(t, "success", got["status"])
	require.Equal(t, "wh1", got["thread_id"])
	require.NotEmpty(t, got["run_id"])
	for _, k := range []string{"run_started_at", "run_ended_at", "webhook_sent_at", "created_at", "assistant_id", "metadata", "kwargs"} {
		require.Contains(t, got, k)
	}
	msgs := got["values"].(map[string]any)["messages"].([]any)
	require.Len(t, msgs, 2, "the run's last values")

	run("/threads/wh2/runs", "echo", "in the background")
	run("/runs", "echo", "stateless") // its thread deleted as it ends
	run("/threads/wh3/runs", "demo", "asks")
	require.Eventually(t, func() bool { return len(hr.bodies()) == 4 }, 10*time.Second, 10*time.Millisecond)
	byThread := map[string]map[string]any{}
	for _, b := range hr.bodies()[1:] {
		byThread[b["thread_id"].(string)] = b
	}
	require.Equal(t, "success", byThread["wh2"]["status"])
	require.Equal(t, "interrupted", byThread["wh3"]["status"])
	stateless := 0
	for th, b := range byThread {
		if th != "wh2" && th != "wh3" {
			stateless++
			require.Len(t, b["values"].(map[string]any)["messages"], 2, "a stateless run's values, its thread deleted")
		}
	}
	require.Equal(t, 1, stateless)
	time.Sleep(100 * time.Millisecond)
	require.Len(t, hr.bodies(), 4, "once each")

	// A receiver that fails twice gets it the third time.
	flaky := newHookReceiver(t, 500, 503)
	require.Equal(t, 200, call(t, "POST", n.url+"/threads/wh4/runs/wait", `{"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "x"}]}, "webhook": "`+flaky.URL+`"}`, "", nil))
	require.Eventually(t, func() bool { return len(flaky.bodies()) == 3 }, 15*time.Second, 20*time.Millisecond)
	require.Equal(t, float64(5), wiretest.Metric(t, n.url, `agentstream_webhooks_total{outcome="sent"}`), "the four runs' and the flaky receiver's, once each")

	// Bad URLs are refused.
	require.Equal(t, 422, call(t, "POST", n.url+"/threads/wh5/runs/wait", `{"assistant_id": "echo", "input": {}, "webhook": "/relative"}`, "", nil))
	require.Equal(t, 422, call(t, "POST", n.url+"/threads/wh5/runs/wait", `{"assistant_id": "echo", "input": {}, "webhook": "ftp://example.com/x"}`, "", nil))
}

// TestWebhooksNeverReachPrivateAddresses: without AllowPrivate, a
// webhook to a loopback, private or link-local address is refused (422,
// counted), and none is sent.
func TestWebhooksNeverReachPrivateAddresses(t *testing.T) {
	n := start(t, server.Config{}, transport.Options{})
	hr := newHookReceiver(t)
	for _, u := range []string{hr.URL, "http://localhost:9/x", "http://10.1.2.3/x", "http://169.254.169.254/latest/meta-data", "http://[::1]:9/x", "http://192.168.0.1/x"} {
		require.Equal(t, 422, call(t, "POST", n.url+"/threads/p1/runs/wait", `{"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "x"}]}, "webhook": "`+u+`"}`, "", nil), u)
	}
	require.Equal(t, float64(6), wiretest.Metric(t, n.url, `agentstream_refusals_total{limit="webhook_egress"}`))
	time.Sleep(100 * time.Millisecond)
	require.Empty(t, hr.bodies(), "none reached the receiver")
}

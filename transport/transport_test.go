package transport_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentstream/agentstream/assistants"
	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/internal/testkit/sdktest"
	"github.com/agentstream/agentstream/internal/testkit/wiretest"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/agentstream/agentstream/transport/sse"
	"github.com/agentstream/agentstream/transport/ws"
	"github.com/coder/websocket"
	"github.com/fxamacker/cbor/v2"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start runs a server with the built-in assistants on a loopback port.
func start(t testing.TB, opts transport.Options) (*httptest.Server, *transport.Handler, *server.Server) {
	t.Helper()
	return startWith(t, server.Config{}, opts)
}

// startWith is start with a server of cfg.
func startWith(t testing.TB, cfg server.Config, opts transport.Options) (*httptest.Server, *transport.Handler, *server.Server) {
	t.Helper()
	srv := server.New(cfg)
	assistants.Register(srv)
	h := transport.New(srv, opts)
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = h.Shutdown(ctx)
		ts.Close()
		require.NoError(t, srv.Close(ctx))
	})
	return ts, h, srv
}

func post(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

const echoStart = `{"id": 1, "method": "run.start", "params": {"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "one two three"}]}}}`

// frame is one SSE frame.
type frame struct{ id, event, data string }

// readFrames reads SSE frames until stop says so.
func readFrames(t *testing.T, body io.Reader, stop func(frame) bool) []frame {
	t.Helper()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var out []frame
	var cur frame
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.event != "" {
				out = append(out, cur)
				if stop(cur) {
					return out
				}
			}
			cur = frame{}
		case strings.HasPrefix(line, "id: "):
			cur.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			cur.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			cur.data = line[6:]
		case strings.HasPrefix(line, ":"):
			out = append(out, frame{event: "comment", data: line})
			if stop(out[len(out)-1]) {
				return out
			}
		}
	}
	t.Fatalf("stream ended after %d frames: %v", len(out), sc.Err())
	return nil
}

func completed(f frame) bool {
	return f.event == "lifecycle" && strings.Contains(f.data, `"namespace":[],`) && strings.Contains(f.data, `"event":"completed"`)
}

func TestSSEStreamOfEcho(t *testing.T) {
	ts, _, _ := start(t, transport.Options{})
	req, _ := http.NewRequest("POST", ts.URL+"/threads/t1/stream/events", strings.NewReader(`{"channels": ["messages", "lifecycle"]}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	require.Equal(t, "no-cache", resp.Header.Get("Cache-Control"))
	require.Equal(t, "no", resp.Header.Get("X-Accel-Buffering"))
	code, out := post(t, ts.URL+"/threads/t1/commands", echoStart)
	require.Equal(t, 200, code, "%v", out)
	require.Equal(t, "success", out["type"])
	frames := readFrames(t, resp.Body, completed)
	var text strings.Builder
	for i, f := range frames {
		require.Equal(t, f.id, mustGet(t, f.data, "event_id"), "id: is the event_id")
		require.Equal(t, f.event, mustGet(t, f.data, "method"), "event: is the method")
		if i > 0 {
			require.NotEqual(t, frames[i-1].id, f.id)
		}
		var e struct {
			Params struct {
				Data struct {
					Event string
					Delta struct{ Type, Text string }
				}
			}
		}
		require.NoError(t, json.Unmarshal([]byte(f.data), &e))
		if e.Params.Data.Delta.Type == "text-delta" {
			text.WriteString(e.Params.Data.Delta.Text)
		}
	}
	require.Equal(t, "one two three", text.String())
}

func mustGet(t *testing.T, data, key string) string {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(data), &m))
	v, _ := m[key].(string)
	return v
}

func TestSSEGetWithLastEventIDAndHeartbeat(t *testing.T) {
	ts, _, _ := start(t, transport.Options{SSE: sse.Options{Heartbeat: 50 * time.Millisecond}})
	post(t, ts.URL+"/threads/t/commands", echoStart)
	// Wait for the run to finish, then resume after event 5 as EventSource would.
	require.Eventually(t, func() bool {
		_, out := post(t, ts.URL+"/threads/t/commands", `{"id": 2, "method": "agent.getTree", "params": {}}`)
		tree, _ := out["result"].(map[string]any)["tree"].(map[string]any)
		return tree["status"] == "completed"
	}, 5*time.Second, 20*time.Millisecond)
	req, _ := http.NewRequest("GET", ts.URL+"/threads/t/stream?channels=messages,lifecycle", nil)
	req.Header.Set("Last-Event-ID", "5")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	frames := readFrames(t, resp.Body, func(f frame) bool { return f.event == "comment" })
	c, err := server.ParseCursor(frames[0].id)
	require.NoError(t, err)
	require.Equal(t, uint64(6), c.Seq, "resumes after Last-Event-ID (a bare seq is of the current epoch)")
	require.Equal(t, ": heartbeat", frames[len(frames)-1].data, "a quiet stream gets heartbeats")

	// The same with the full id: EventSource sends back the id it was given.
	req.Header.Set("Last-Event-ID", c.String())
	resp2, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp2.Body.Close()
	frames = readFrames(t, resp2.Body, func(f frame) bool { return f.event == "comment" })
	require.Equal(t, (&server.Cursor{Epoch: c.Epoch, Seq: 7}).String(), frames[0].id)
	require.Equal(t, ": heartbeat", frames[len(frames)-1].data, "a quiet stream gets heartbeats")
}

func TestSSEBadRequests(t *testing.T) {
	ts, _, _ := start(t, transport.Options{})
	for _, tc := range []struct{ body, msg string }{
		{`{"channels": "messages"}`, "channels: expected array, but got string (rule EventStreamRequest)"},
		{`{"channels": ["gossip"]}`, "channels[0]: does not match pattern"},
		{`{"channels": [], "depth": -1}`, "depth: must be >= 0"},
		{`{"channels": [`, "malformed JSON"},
	} {
		code, out := post(t, ts.URL+"/threads/t/stream", tc.body)
		require.Equal(t, http.StatusBadRequest, code, tc.body)
		require.Equal(t, "error", out["type"])
		require.Nil(t, out["id"])
		require.Equal(t, "invalid_argument", out["error"])
		require.Contains(t, out["message"], tc.msg)
	}
	resp, err := http.Get(ts.URL + "/threads/t/stream?depth=deep")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

func TestCommandsEndpoint(t *testing.T) {
	ts, _, _ := start(t, transport.Options{MaxCommandBody: 4096})
	url := ts.URL + "/threads/t/commands"
	cases := []struct {
		name, body string
		code       int
		errCode    string
	}{
		{"run.start", echoStart, 200, ""},
		{"state.get", `{"id": 2, "method": "state.get", "params": {"namespace": []}}`, 200, ""},
		{"listCheckpoints", `{"id": 3, "method": "state.listCheckpoints", "params": {}}`, 200, ""},
		{"getTree", `{"id": 4, "method": "agent.getTree", "params": {}}`, 200, ""},
		{"run.cancel", `{"id": 5, "method": "run.cancel", "params": {}}`, 200, ""},
		{"input.inject without a run", `{"id": 6, "method": "input.inject", "params": {"namespace": [], "message": {"role": "user", "content": "x"}}}`, 404, "no_such_run"},
		{"unknown interrupt", `{"id": 7, "method": "input.respond", "params": {"namespace": [], "interrupt_id": "nope", "response": 1}}`, 404, "no_such_interrupt"},
		{"unknown checkpoint", `{"id": 8, "method": "state.fork", "params": {"checkpoint_id": "nope"}}`, 404, "no_such_checkpoint"},
		{"subscription over HTTP", `{"id": 9, "method": "subscription.subscribe", "params": {"channels": ["messages"]}}`, 400, "not_supported"},
		{"unknown method", `{"id": 10, "method": "run.explode", "params": {}}`, 400, "unknown_command"},
		{"wrong type", `{"id": 11, "method": "run.start", "params": {"assistant_id": 1, "input": null}}`, 400, "invalid_argument"},
		{"unknown assistant", `{"id": 12, "method": "run.start", "params": {"assistant_id": "ghost", "input": null}}`, 400, "invalid_argument"},
		{"malformed", `{"id": 13,`, 400, "invalid_argument"},
		{"too big", `{"id": 14, "method": "run.start", "params": {"assistant_id": "echo", "input": "` + strings.Repeat("x", 5000) + `"}}`, 413, "resource_exhausted"},
	}
	for _, tc := range cases {
		code, out := post(t, url, tc.body)
		require.Equal(t, tc.code, code, "%s: %v", tc.name, out)
		if tc.errCode == "" {
			require.Equal(t, "success", out["type"], tc.name)
			require.NotNil(t, out["meta"].(map[string]any)["applied_through_seq"], tc.name)
		} else {
			require.Equal(t, tc.errCode, out["error"], "%s: %v", tc.name, out)
		}
	}
	code, out := post(t, url, `{"id": 13,`)
	require.Equal(t, 400, code)
	require.Nil(t, out["id"], "malformed JSON has a null id")
}

func TestStateEndpoint(t *testing.T) {
	ts, _, _ := start(t, transport.Options{})
	resp, err := http.Get(ts.URL + "/threads/nope/state")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	post(t, ts.URL+"/threads/t/commands", `{"id": 1, "method": "run.start", "params": {"assistant_id": "demo", "input": null}}`)
	var st map[string]any
	require.Eventually(t, func() bool {
		resp, err := http.Get(ts.URL + "/threads/t/state")
		require.NoError(t, err)
		defer resp.Body.Close()
		st = nil
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
		tasks, _ := st["tasks"].([]any)
		return len(tasks) == 1
	}, 5*time.Second, 20*time.Millisecond)
	require.Equal(t, []any{"agent"}, st["next"], "an interrupted thread is active")
	ints := st["tasks"].([]any)[0].(map[string]any)["interrupts"].([]any)
	require.Contains(t, ints[0].(map[string]any)["value"], "question")
}

func TestHealthReadyAndMetrics(t *testing.T) {
	ts, h, _ := start(t, transport.Options{})
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := http.Get(ts.URL + p)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, p)
		if p == "/metrics" {
			for _, m := range []string{"agentstream_events_published_total", "agentstream_sse_streams", "agentstream_websocket_connections",
				"agentstream_slow_consumers_total", "agentstream_replays_total", "agentstream_subscriptions", "agentstream_events_delivered_total", "agentstream_event_writes_total"} {
				require.Contains(t, string(b), m)
			}
		}
	}
	require.NoError(t, h.Shutdown(context.Background()))
	resp, err := http.Get(ts.URL + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
}

func dial(t *testing.T, ts *httptest.Server, thread string, opts *websocket.DialOptions) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+"/threads/"+thread+"/stream/events", opts)
	require.NoError(t, err)
	t.Cleanup(func() { c.CloseNow() })
	return c
}

func wsSend(t *testing.T, c *websocket.Conn, msg string) {
	t.Helper()
	require.NoError(t, c.Write(context.Background(), websocket.MessageText, []byte(msg)))
}

func wsRead(t *testing.T, c *websocket.Conn) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, b, err := c.Read(ctx)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

func TestWebSocketCommandsEventsAndErrors(t *testing.T) {
	ts, _, _ := start(t, transport.Options{})
	c := dial(t, ts, "t", nil)
	wsSend(t, c, `{"id": 1, "method": "subscription.subscribe", "params": {"channels": ["messages", "lifecycle"]}}`)
	resp := wsRead(t, c)
	require.Equal(t, "success", resp["type"])
	subID := resp["result"].(map[string]any)["subscription_id"].(string)
	wsSend(t, c, echoStart)
	var text strings.Builder
	gotResponse, ended := false, false
	for !gotResponse || !ended { // the response and the events may come in either order
		m := wsRead(t, c)
		if m["type"] == "success" {
			gotResponse = true
			continue
		}
		require.Equal(t, "event", m["type"])
		params := m["params"].(map[string]any)
		data := params["data"].(map[string]any)
		if d, ok := data["delta"].(map[string]any); ok && d["type"] == "text-delta" {
			text.WriteString(d["text"].(string))
		}
		if m["method"] == "lifecycle" && data["event"] == "completed" {
			ended = true
		}
	}
	require.Equal(t, "one two three", text.String())
	// Bad input gets an error frame, and the connection stays usable.
	for _, tc := range []struct{ msg, code string }{
		{`{"id": 3, "method": `, "invalid_argument"},
		{`{"id": 4, "method": "nope", "params": {}}`, "unknown_command"},
		{`{"id": 5, "method": "subscription.unsubscribe", "params": {"subscription_id": "nope"}}`, "no_such_subscription"},
		{`{"id": 6, "method": "state.get", "params": {"namespace": "root"}}`, "invalid_argument"},
	} {
		wsSend(t, c, tc.msg)
		m := wsRead(t, c)
		require.Equal(t, "error", m["type"], tc.msg)
		require.Equal(t, tc.code, m["error"], tc.msg)
	}
	wsSend(t, c, `{"id": 7, "method": "subscription.unsubscribe", "params": {"subscription_id": "`+subID+`"}}`)
	require.Equal(t, "success", wsRead(t, c)["type"])
	// A frame over the read limit closes with 1009.
	wsSend(t, c, `{"id": 8, "method": "run.start", "params": {"assistant_id": "echo", "input": "`+strings.Repeat("x", 1<<20)+`"}}`)
	_, _, err := c.Read(context.Background())
	require.Equal(t, websocket.StatusMessageTooBig, websocket.CloseStatus(err))
}

func TestWebSocketCBOR(t *testing.T) {
	ts, _, _ := start(t, transport.Options{})
	c := dial(t, ts, "t", &websocket.DialOptions{Subprotocols: []string{ws.CBORSubprotocol}})
	require.Equal(t, ws.CBORSubprotocol, c.Subprotocol())
	cmd, _ := cbor.Marshal(map[string]any{"id": 1, "method": "subscription.subscribe", "params": map[string]any{"channels": []string{"lifecycle"}}})
	require.NoError(t, c.Write(context.Background(), websocket.MessageBinary, cmd))
	read := func() map[string]any {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		typ, b, err := c.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, websocket.MessageBinary, typ)
		var m map[string]any
		require.NoError(t, cbor.Unmarshal(b, &m))
		return m
	}
	require.Equal(t, "success", read()["type"])
	cmd, _ = cbor.Marshal(map[string]any{"id": 2, "method": "run.start", "params": map[string]any{"assistant_id": "echo", "input": map[string]any{"messages": []any{map[string]any{"role": "user", "content": "cbor"}}}}})
	require.NoError(t, c.Write(context.Background(), websocket.MessageBinary, cmd))
	methods := map[any]bool{}
	for i := 0; i < 4; i++ {
		m := read()
		methods[m["type"]] = true
	}
	require.True(t, methods["event"])
}

func TestWebSocketOriginCheck(t *testing.T) {
	ts, _, _ := start(t, transport.Options{})
	h := http.Header{"Origin": []string{"https://evil.example"}}
	_, resp, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(ts.URL, "http")+"/threads/t/stream", &websocket.DialOptions{HTTPHeader: h})
	require.Error(t, err)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	ts2, _, _ := start(t, transport.Options{WS: ws.Options{OriginPatterns: []string{"evil.example"}}})
	c, _, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(ts2.URL, "http")+"/threads/t/stream", &websocket.DialOptions{HTTPHeader: h})
	require.NoError(t, err, "an allowed origin")
	c.CloseNow()
}

func TestWebSocketReconnectRestoresSubscriptions(t *testing.T) {
	ts, _, _ := start(t, transport.Options{})
	c := dial(t, ts, "t", nil)
	wsSend(t, c, `{"id": 1, "method": "subscription.subscribe", "params": {"channels": ["lifecycle"]}}`)
	subID := wsRead(t, c)["result"].(map[string]any)["subscription_id"].(string)
	wsSend(t, c, `{"id": 2, "method": "run.start", "params": {"assistant_id": "demo", "input": null}}`)
	for {
		m := wsRead(t, c)
		if m["type"] == "event" && m["params"].(map[string]any)["data"].(map[string]any)["event"] == "interrupted" {
			break
		}
	}
	c.CloseNow() // dropped
	c2 := dial(t, ts, "t", nil)
	require.Eventually(t, func() bool {
		wsSend(t, c2, `{"id": 3, "method": "subscription.reconnect", "params": {"run_id": "r", "subscriptions": ["`+subID+`"]}}`)
		m := wsRead(t, c2)
		return m["type"] == "success" && m["result"].(map[string]any)["restored"] == true
	}, 5*time.Second, 50*time.Millisecond)
}

func TestShutdownEndsOpenStreams(t *testing.T) {
	ts, h, _ := start(t, transport.Options{})
	resp, err := http.Post(ts.URL+"/threads/t/stream", "application/json", strings.NewReader(`{"channels": ["messages"]}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	c := dial(t, ts, "t", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	closed := make(chan error, 1) // the client reads, as a real one does
	go func() {
		_, _, err := c.Read(ctx)
		closed <- err
	}()
	require.NoError(t, h.Shutdown(ctx))
	_, err = io.ReadAll(resp.Body)
	require.NoError(t, err, "the SSE response ends cleanly")
	require.Equal(t, websocket.StatusGoingAway, websocket.CloseStatus(<-closed))
}

// TestConformanceWithTheOfficialSDK runs tools/node/conformance.mjs: the
// official JavaScript SDK against this server over SSE and WebSocket.
func TestConformanceWithTheOfficialSDK(t *testing.T) {
	node, script := sdktest.Conformance(t)
	conformance := func(t *testing.T, ts *httptest.Server, env ...string) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, script, ts.URL)
		cmd.Env = append(os.Environ(), env...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		t.Log("\n" + out.String())
		require.NoError(t, err, "conformance failed")
		require.Contains(t, out.String(), "14 passed, 0 failed")
	}
	t.Run("open", func(t *testing.T) {
		ts, _, _ := start(t, transport.Options{})
		conformance(t, ts)
	})
	// With authentication on, the SDK's apiKey (x-api-key) and a bearer
	// token in defaultHeaders (and on the WebSocket handshake) both work.
	t.Run("api key", func(t *testing.T) {
		ts, srv, _ := authed(t, 0)
		conformance(t, ts, "AGENTSTREAM_API_KEY=k-alice")
		require.Zero(t, srv.Metrics().Denied)
	})
	t.Run("bearer", func(t *testing.T) {
		ts, srv, _ := authed(t, 0)
		conformance(t, ts, "AGENTSTREAM_BEARER="+token(t, auth.TokenOptions{Subject: "alice"}))
		require.Zero(t, srv.Metrics().Denied)
	})
	t.Run("refused without a credential", func(t *testing.T) {
		ts, _, _ := authed(t, 0)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, node, script, ts.URL).CombinedOutput()
		require.Error(t, err, "the suite must fail against a server that refuses it")
		require.Contains(t, string(out), "HTTP 401")
		require.NotContains(t, string(out), "14 passed")
	})
}

// TestWebSocketDeliversInSequenceOrder: the events of all the
// subscriptions of a connection that are not yet sent go out in sequence
// order, each once; a subscription added mid-run gets its replay before
// newer events of the others, so the run's end never arrives before the
// replayed events of that run.
func TestWebSocketDeliversInSequenceOrder(t *testing.T) {
	ts, _, _ := start(t, transport.Options{})
	c := dial(t, ts, "t", nil)
	wsSend(t, c, `{"id": 1, "method": "subscription.subscribe", "params": {"channels": ["lifecycle"]}}`)
	require.Equal(t, "success", wsRead(t, c)["type"])
	wsSend(t, c, `{"id": 2, "method": "run.start", "params": {"assistant_id": "firehose", "input": {"count": 300, "rate": 3000}}}`)
	wsSend(t, c, `{"id": 3, "method": "subscription.subscribe", "params": {"channels": ["custom"]}}`)
	var custom []float64
	responses := 0
	for {
		m := wsRead(t, c)
		if m["type"] == "success" {
			responses++
			continue
		}
		if m["method"] == "custom" {
			custom = append(custom, m["seq"].(float64))
			continue
		}
		data := m["params"].(map[string]any)["data"].(map[string]any)
		if data["event"] == "completed" {
			require.Equal(t, 2, responses)
			break
		}
	}
	require.Len(t, custom, 300, "every custom event before the run's end")
	for i := 1; i < len(custom); i++ {
		require.Greater(t, custom[i], custom[i-1], "in order and once")
	}
}

// TestSubscribesSentTogetherGetOneMergedReplay is what the official SDK
// does after run.start on a run that already ended: three subscribes back
// to back. They get three successes, then one replay, in sequence order
// with no event repeated, that is the union of their filters, values
// snapshot first. (The write interval is long here so that the hold
// certainly spans the three subscribes on a loaded machine.)
func TestSubscribesSentTogetherGetOneMergedReplay(t *testing.T) {
	ts, _, srv := start(t, transport.Options{WS: ws.Options{WriteInterval: 200 * time.Millisecond}})
	watch, _, err := srv.Subscribe("t", channels.Filter{Channels: []string{channels.Lifecycle}, Depth: 0}, nil)
	require.NoError(t, err)
	post(t, ts.URL+"/threads/t/commands", `{"id": 1, "method": "run.start", "params": {"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "fast"}]}}}`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		e, err := watch.Next(ctx)
		require.NoError(t, err)
		if l, ok := e.Payload.(*protocol.ServerEventLifecycle); ok && l.Params.Data.Event == protocol.AgentStatusCompleted {
			break
		}
	}
	watch.Close()
	union := channels.Filter{Channels: []string{channels.Messages, channels.Lifecycle, channels.Input, channels.Values}, Depth: channels.Unlimited}
	all, _, err := srv.Subscribe("t", union, nil)
	require.NoError(t, err)
	var want []float64
	for {
		e, ok, _ := all.TryNext()
		if !ok {
			break
		}
		if e.Seq > 0 {
			want = append(want, float64(e.Seq))
		}
	}
	all.Close()

	c := dial(t, ts, "t", nil)
	wsSend(t, c, `{"id": 1, "method": "subscription.subscribe", "params": {"channels": ["messages", "lifecycle", "input"]}}`)
	wsSend(t, c, `{"id": 2, "method": "subscription.subscribe", "params": {"channels": ["lifecycle", "input"]}}`)
	wsSend(t, c, `{"id": 3, "method": "subscription.subscribe", "params": {"channels": ["values", "lifecycle", "input"]}}`)
	var got []float64
	var methods []string
	for i := 0; i < 3; i++ {
		m := wsRead(t, c)
		require.Equal(t, "success", m["type"], "the three answers come before the replay: %v", m)
		require.Equal(t, float64(i+1), m["id"])
	}
	for len(got) < len(want) {
		m := wsRead(t, c)
		require.Equal(t, "event", m["type"])
		methods = append(methods, m["method"].(string))
		if seq, ok := m["seq"].(float64); ok {
			got = append(got, seq)
		}
	}
	require.Equal(t, "values", methods[0], "the values snapshot first")
	require.Equal(t, want, got, "one replay: the union of the filters, in order, each event once")
	// Nothing follows: the replay had every event once.
	rctx, rcancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer rcancel()
	_, extra, err := c.Read(rctx)
	require.Error(t, err, "an event was sent twice: %s", extra)
}

// TestRunEndBetweenSubscribesWaitsForTheNext: the official SDK sends its
// subscribes after run.start's answer; the run may end, live, after the
// first subscribe is read and before the next one is. The end waits for
// it: the values the second subscribe replays arrive before the end the
// first one receives (the SDK closes its projections one task after the
// end). The default write interval is used.
func TestRunEndBetweenSubscribesWaitsForTheNext(t *testing.T) {
	ts, _, srv := start(t, transport.Options{})
	watch, _, err := srv.Subscribe("t", channels.Filter{Channels: []string{channels.Lifecycle}, Depth: 0}, nil)
	require.NoError(t, err)
	defer watch.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waitFor := func(status protocol.AgentStatus) {
		for {
			e, err := watch.Next(ctx)
			require.NoError(t, err)
			if l, ok := e.Payload.(*protocol.ServerEventLifecycle); ok && l.Params.Data.Event == status {
				return
			}
		}
	}
	// Two words 10 ms apart: the run ends about 20 ms after it runs.
	post(t, ts.URL+"/threads/t/commands", `{"id": 1, "method": "run.start", "params": {"assistant_id": "echo", "config": {"token_delay_ms": 10}, "input": {"messages": [{"role": "user", "content": "one two"}]}}}`)
	waitFor(protocol.AgentStatusRunning)
	c := dial(t, ts, "t", nil)
	wsSend(t, c, `{"id": 1, "method": "subscription.subscribe", "params": {"channels": ["lifecycle", "input"]}}`)
	require.Equal(t, "success", wsRead(t, c)["type"])
	waitFor(protocol.AgentStatusCompleted) // live, to the WebSocket too
	wsSend(t, c, `{"id": 2, "method": "subscription.subscribe", "params": {"channels": ["values", "lifecycle", "input"]}}`)
	var methods []string
	for {
		m := wsRead(t, c)
		if m["type"] != "event" {
			continue
		}
		methods = append(methods, m["method"].(string))
		if d, _ := m["params"].(map[string]any)["data"].(map[string]any); m["method"] == "lifecycle" && d["event"] == "completed" {
			break
		}
	}
	require.Contains(t, methods, "values", "the second subscribe's replay came before the end: %v", methods)
}

// TestSlowSSEClientIsCutOffWithoutSlowingOthers: a client that stops
// reading is cut off (its queue overflows) while another receives every
// event; the cut-off one learns where to resume.
func TestSlowSSEClientIsCutOffWithoutSlowingOthers(t *testing.T) {
	// 6 MiB of queue is 0.75 s of slack for the reading client on a loaded
	// machine (with 2 MiB, a CI run whose CPU was shared cut it off too).
	srv := server.New(server.Config{QueueBytes: 6 << 20})
	assistants.Register(srv)
	h := transport.New(srv, transport.Options{})
	ts := httptest.NewServer(h)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = h.Shutdown(ctx)
		ts.Close()
		_ = srv.Close(ctx)
	}()
	open := func() *http.Response {
		resp, err := http.Post(ts.URL+"/threads/t/stream", "application/json", strings.NewReader(`{"channels": ["custom", "lifecycle"]}`))
		require.NoError(t, err)
		return resp
	}
	slow, fast := open(), open()
	defer slow.Body.Close()
	defer fast.Body.Close()
	// 32 MB at a pace a reading client keeps up with; more than the
	// non-reading client's socket buffers and queue can hold.
	post(t, ts.URL+"/threads/t/commands", `{"id": 1, "method": "run.start", "params": {"assistant_id": "firehose", "input": {"count": 8000, "rate": 2000, "size": 4000}}}`)
	frames := readFrames(t, fast.Body, completed)
	custom := 0
	for _, f := range frames {
		if f.event == "custom" {
			custom++
		}
	}
	require.Equal(t, 8000, custom, "the reading client got everything")
	// The slow one is ended: its stream closes after a comment naming the
	// event to resume after.
	b, err := io.ReadAll(slow.Body)
	require.NoError(t, err)
	require.Contains(t, string(b), ": slow consumer, resume after ")
	require.Equal(t, uint64(1), srv.Metrics().SlowConsumers)
}

// TestChurnWhileEventsFlow: while a run publishes, clients keep connecting
// over both transports and dropping without a goodbye; the clients that
// stay receive every event, in order, once, and nothing is left running
// afterwards (goleak, in TestMain).
func TestChurnWhileEventsFlow(t *testing.T) {
	ts, _, _ := start(t, transport.Options{})
	const events = 1500
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second) // under the race detector on two cores the run takes 10-20 s with the churners
	defer cancel()

	// Stable readers, subscribed before the run starts.
	type result struct {
		seqs []float64
		err  error
	}
	results := make(chan result, 6)
	var ready sync.WaitGroup
	for i := 0; i < 3; i++ {
		ready.Add(2)
		go func() { // WebSocket
			c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+"/threads/churn/stream", nil)
			if err != nil {
				ready.Done()
				results <- result{err: err}
				return
			}
			defer c.CloseNow()
			_ = c.Write(ctx, websocket.MessageText, []byte(`{"id": 1, "method": "subscription.subscribe", "params": {"channels": ["custom"]}}`))
			_, _, err = c.Read(ctx) // the subscription's response
			ready.Done()
			var r result
			for err == nil && len(r.seqs) < events {
				var b []byte
				if _, b, err = c.Read(ctx); err == nil {
					var m struct{ Seq float64 }
					err = json.Unmarshal(b, &m)
					r.seqs = append(r.seqs, m.Seq)
				}
			}
			r.err = err
			results <- r
		}()
		go func() { // SSE
			req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/threads/churn/stream", strings.NewReader(`{"channels": ["custom"]}`))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			ready.Done()
			if err != nil {
				results <- result{err: err}
				return
			}
			defer resp.Body.Close()
			var r result
			sc := bufio.NewScanner(resp.Body)
			for len(r.seqs) < events && sc.Scan() {
				if id, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
					c, err := server.ParseCursor(id)
					if err != nil {
						r.err = err
						break
					}
					r.seqs = append(r.seqs, float64(c.Seq))
				}
			}
			if r.err == nil && len(r.seqs) < events {
				r.err = fmt.Errorf("stream ended: %v", sc.Err())
			}
			results <- r
		}()
	}
	ready.Wait()

	// Churners: connect, take a few events, drop.
	stop := make(chan struct{})
	var churn sync.WaitGroup
	var dropped atomic.Int64 // churners that got in and dropped
	for i := 0; i < 8; i++ {
		churn.Add(1)
		go func() {
			defer churn.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				cctx, ccancel := context.WithTimeout(ctx, time.Second)
				if (i+n)%2 == 0 {
					if c, _, err := websocket.Dial(cctx, "ws"+strings.TrimPrefix(ts.URL, "http")+"/threads/churn/stream", nil); err == nil {
						_ = c.Write(cctx, websocket.MessageText, []byte(`{"id": 1, "method": "subscription.subscribe", "params": {"channels": ["custom"], "since": 0}}`))
						for range 3 {
							if _, _, err := c.Read(cctx); err != nil {
								break
							}
						}
						c.CloseNow()
						dropped.Add(1)
					}
				} else {
					req, _ := http.NewRequestWithContext(cctx, "POST", ts.URL+"/threads/churn/stream", strings.NewReader(`{"channels": ["custom"], "since": 0}`))
					req.Header.Set("Content-Type", "application/json")
					if resp, err := http.DefaultClient.Do(req); err == nil {
						_, _ = io.ReadFull(resp.Body, make([]byte, 512))
						resp.Body.Close()
						dropped.Add(1)
					}
				}
				ccancel()
				// A pause between connections: eight churners in a tight
				// loop under the race detector took both cores of a small
				// machine from the readers (the test then timed out on a
				// loaded day); a hundred connections a second still churn.
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}

	code, out := post(t, ts.URL+"/threads/churn/commands", fmt.Sprintf(`{"id": 1, "method": "run.start", "params": {"assistant_id": "firehose", "input": {"count": %d, "rate": 1000}}}`, events))
	require.Equal(t, 200, code, "%v", out)
	for range 6 {
		r := <-results
		require.NoError(t, r.err)
		require.Len(t, r.seqs, events)
		for j := 1; j < len(r.seqs); j++ {
			require.Greater(t, r.seqs[j], r.seqs[j-1], "in order and once")
		}
	}
	close(stop)
	churn.Wait()
	require.Greater(t, dropped.Load(), int64(20), "clients came and went meanwhile")
}

func TestCORSForAllowedOrigins(t *testing.T) {
	ts, _, _ := start(t, transport.Options{CORSOrigins: []string{"app.example", "*.trusted.example"}})
	do := func(method, path, origin string, hdr map[string]string, body string) *http.Response {
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		req.Header.Set("Origin", origin)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	preflight := map[string]string{"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}

	resp := do("OPTIONS", "/threads/t/commands", "https://app.example", preflight, "")
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Equal(t, "https://app.example", resp.Header.Get("Access-Control-Allow-Origin"))
	require.Equal(t, "GET, POST, PUT, PATCH, DELETE", resp.Header.Get("Access-Control-Allow-Methods"))
	require.Equal(t, "content-type", resp.Header.Get("Access-Control-Allow-Headers"))
	require.Empty(t, resp.Header.Get("Access-Control-Allow-Credentials"))

	resp = do("OPTIONS", "/threads/t/commands", "https://evil.example", preflight, "")
	require.NotEqual(t, http.StatusNoContent, resp.StatusCode)
	require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"))

	resp = do("POST", "/threads/t/commands", "https://a.trusted.example", map[string]string{"Content-Type": "application/json"},
		`{"id": 1, "method": "agent.getTree", "params": {}}`)
	require.Equal(t, "https://a.trusted.example", resp.Header.Get("Access-Control-Allow-Origin"))
	require.Contains(t, resp.Header.Values("Vary"), "Origin")
	require.Contains(t, resp.Header.Get("Access-Control-Expose-Headers"), "Content-Location", "the SDKs read a run's id there")
	require.Contains(t, resp.Header.Get("Access-Control-Expose-Headers"), "X-Pagination-Total")

	// A stream keeps the header, taken over from net/http or not.
	resp = do("GET", "/threads/t/stream", "https://app.example", nil, "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "https://app.example", resp.Header.Get("Access-Control-Allow-Origin"))

	// Without CORSOrigins, no CORS headers at all.
	ts2, _, _ := start(t, transport.Options{})
	req, _ := http.NewRequest("POST", ts2.URL+"/threads/t/commands", strings.NewReader(`{"id": 1, "method": "agent.getTree", "params": {}}`))
	req.Header.Set("Origin", "https://app.example")
	resp2, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp2.Body.Close()
	require.Empty(t, resp2.Header.Get("Access-Control-Allow-Origin"))
}

// TestCORSForLoopbackPages: "loopback" (agentstream serve's default)
// allows the pages of localhost, 127.0.0.1 and [::1] on any port, for
// every method, and no other origin, not even one whose name starts so.
func TestCORSForLoopbackPages(t *testing.T) {
	ts, _, _ := start(t, transport.Options{CORSOrigins: []string{transport.LoopbackOrigins}})
	preflight := func(origin, method string) *http.Response {
		req, _ := http.NewRequest("OPTIONS", ts.URL+"/threads/t/commands", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", method)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	for _, o := range []string{"http://localhost:3000", "http://localhost", "https://127.0.0.1:5173", "http://[::1]:8080"} {
		resp := preflight(o, "PATCH")
		require.Equal(t, http.StatusNoContent, resp.StatusCode, o)
		require.Equal(t, o, resp.Header.Get("Access-Control-Allow-Origin"))
		require.Contains(t, resp.Header.Get("Access-Control-Allow-Methods"), "PATCH")
	}
	for _, o := range []string{"http://localhost.evil.example", "http://127.0.0.2:3000", "https://app.example"} {
		resp := preflight(o, "POST")
		require.NotEqual(t, http.StatusNoContent, resp.StatusCode, o)
		require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"), o)
	}
	// Their writes are taken; another origin's are refused.
	post := func(origin string) int {
		req, _ := http.NewRequest("POST", ts.URL+"/threads/t/commands", strings.NewReader(`{"id": 1, "method": "agent.getTree", "params": {}}`))
		req.Header.Set("Origin", origin)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.NotEqual(t, http.StatusForbidden, post("http://localhost:3000"), "taken (the thread is unknown: 404)")
	require.Equal(t, http.StatusForbidden, post("https://evil.example"))
}

// TestDeliveryLatencyIsSampled: live events written to a stream are
// sampled, one in 16 by sequence number, into the delivery-latency
// histogram, once as taken from the queue and once as written; a replay
// of the same events adds no sample (their time on the way is not a live
// delivery's).
func TestDeliveryLatencyIsSampled(t *testing.T) {
	ts, _, _ := start(t, transport.Options{})
	queued := `agentstream_delivery_latency_seconds_count{stage="queued"}`
	written := `agentstream_delivery_latency_seconds_count{stage="written"}`
	require.Zero(t, wiretest.Metric(t, ts.URL, queued))
	stream := func() *http.Response {
		req, _ := http.NewRequest("POST", ts.URL+"/threads/t/stream", strings.NewReader(`{"channels": ["custom", "lifecycle"]}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return resp
	}
	live := stream()
	code, out := post(t, ts.URL+"/threads/t/commands", `{"id": 1, "method": "run.start", "params": {"assistant_id": "firehose", "input": {"count": 64}}}`)
	require.Equal(t, 200, code, "%v", out)
	frames := readFrames(t, live.Body, completed)
	live.Body.Close()
	var last uint64
	for _, f := range frames {
		var e struct{ Seq uint64 }
		require.NoError(t, json.Unmarshal([]byte(f.data), &e))
		last = max(last, e.Seq)
	}
	want := float64(last / 16) // every sequence number up to the last reached this stream
	require.GreaterOrEqual(t, want, 4.0)
	require.Eventually(t, func() bool { return wiretest.Metric(t, ts.URL, written) == want }, 5*time.Second, 10*time.Millisecond,
		"one written sample per sampled event (%v of %v)", wiretest.Metric(t, ts.URL, written), want)
	require.Equal(t, want, wiretest.Metric(t, ts.URL, queued))

	replay, err := http.Post(ts.URL+"/threads/t/stream", "application/json", strings.NewReader(`{"channels": ["custom", "lifecycle"], "since": 0}`))
	require.NoError(t, err)
	replayed := readFrames(t, replay.Body, completed)
	replay.Body.Close()
	require.Len(t, replayed, len(frames), "the replay carries the same events")
	require.Equal(t, want, wiretest.Metric(t, ts.URL, queued), "a replay is not sampled")
	require.Equal(t, want, wiretest.Metric(t, ts.URL, written))
}

// TestRunEndWaitsForTheSubscribesAfterRunStart: the official SDK sends the
// subscribes of a run's projections once it has read run.start's answer,
// on a loaded machine tens of milliseconds later, and counts the run's
// end, read on its earlier subscription, against them. A run that ends
// at once has its end held for pace.StartedHold after that answer: the
// values the later subscribe replays arrive before the end (120 ms
// later here; the subscribe-only hold, 50 ms, was too short and
// thread.values resolved to undefined).
func TestRunEndWaitsForTheSubscribesAfterRunStart(t *testing.T) {
	ts, _, _ := start(t, transport.Options{})
	c := dial(t, ts, "t-started", nil)
	wsSend(t, c, `{"id": 1, "method": "subscription.subscribe", "params": {"channels": ["lifecycle", "input"]}}`)
	require.Equal(t, "success", wsRead(t, c)["type"])
	wsSend(t, c, `{"id": 2, "method": "run.start", "params": {"assistant_id": "echo", "config": {"token_delay_ms": 0}, "input": {"messages": [{"role": "user", "content": "quick"}]}}}`)
	var methods []string
	record := func(m map[string]any) bool { // reports the run's end
		if m["type"] != "event" {
			return false
		}
		methods = append(methods, m["method"].(string))
		d, _ := m["params"].(map[string]any)["data"].(map[string]any)
		return m["method"] == "lifecycle" && d["event"] == "completed"
	}
	ended := false
	for {
		m := wsRead(t, c)
		ended = record(m) || ended
		if m["type"] == "success" && m["id"] == float64(2) {
			break
		}
	}
	require.False(t, ended, "the run's end was written before run.start's answer")
	time.Sleep(120 * time.Millisecond) // the client reads the answer, then subscribes
	wsSend(t, c, `{"id": 3, "method": "subscription.subscribe", "params": {"channels": ["values", "lifecycle", "input"]}}`)
	for !ended {
		ended = record(wsRead(t, c))
	}
	require.Contains(t, methods, "values", "the later subscribe's replay came before the end: %v", methods)
}

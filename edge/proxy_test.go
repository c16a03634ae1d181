package edge_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/edge"
	"github.com/agentstream/agentstream/internal/testkit/lgtest"
	"github.com/agentstream/agentstream/internal/testkit/sdktest"
	"github.com/stretchr/testify/require"
)

// TestEdgePassesThePlatformAPI: through the edge's address the official
// SDK's classic client gets what it gets from the upstream itself (the
// Platform API's threads, assistants and runs.wait, passed through), and
// a run stream (POST /threads/{id}/runs/stream) comes through as it is
// written, frame for frame, to its end.
func TestEdgePassesThePlatformAPI(t *testing.T) {
	nodeBin, script := sdktest.Script(t, "platform-resources.mjs")
	up := lgtest.Start(t)
	defer up.Kill()
	ts, e := startEdge(t, up.URL, edge.Options{IdleAfter: time.Second})
	graphs, err := e.Assistants(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{"approve", "chat", "demo", "echo", "firehose"}, graphs, "the upstream's graphs, for the banner")
	run := func(url string) map[string]any {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, nodeBin, script, url)
		cmd.Dir = filepath.Dir(script)
		out, err := cmd.Output()
		require.NoError(t, err)
		var steps map[string]any
		require.NoError(t, json.Unmarshal(out, &steps), "%s", out)
		return steps
	}
	direct, through := run(up.URL), run(ts.URL)
	// What the reference does to a run cancelled with rollback depends on
	// when the cancel falls: not compared.
	delete(direct, "runs.cancel rollback")
	delete(through, "runs.cancel rollback")
	require.Equal(t, direct, through, "the upstream's answers, through the edge")

	// A run stream, passed through as it comes: the same frames as the
	// upstream's own, to its end.
	runStream := func(base string) []string {
		var th struct {
			ThreadID string `json:"thread_id"`
		}
		resp, err := http.Post(base+"/threads", "application/json", strings.NewReader(`{}`))
		require.NoError(t, err)
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&th))
		resp.Body.Close()
		resp, err = http.Post(base+"/threads/"+th.ThreadID+"/runs/stream", "application/json",
			strings.NewReader(`{"assistant_id": "chat", "input": {"messages": [{"role": "user", "content": "hi"}]}, "stream_mode": ["values"]}`))
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
		require.Contains(t, resp.Header.Get("Content-Type"), "text/event-stream")
		var events []string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if ev, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				events = append(events, ev)
			}
		}
		return events
	}
	events := runStream(ts.URL)
	require.Equal(t, "metadata", events[0])
	require.Contains(t, events, "values")
	require.Equal(t, runStream(up.URL), events, "the upstream's frames")

	// The SDK's streaming scenario (every mode, joins, Last-Event-ID,
	// cancel, on_disconnect): the same through the edge as direct.
	nodeBin, script = sdktest.Script(t, "platform-stream.mjs")
	direct, through = run(up.URL), run(ts.URL)
	require.Equal(t, direct, through, "the upstream's streams, through the edge")
}

// TestEdgeKeepsEachPrincipalsPlatformThreads: with authentication on, the
// passed-through Platform routes need a credential; a principal's
// threads.search through the edge lists only the threads it made there,
// and another principal's thread is refused by id.
func TestEdgeKeepsEachPrincipalsPlatformThreads(t *testing.T) {
	a, err := auth.New(context.Background(), auth.Config{APIKeys: map[string]auth.Principal{"k-ann": {Subject: "ann"}, "k-bob": {Subject: "bob"}}})
	require.NoError(t, err)
	edgeAuth[t.Name()] = a
	up := lgtest.Start(t)
	defer up.Kill()
	ts, _ := startEdge(t, up.URL, edge.Options{IdleAfter: time.Second})
	do := func(method, path, body, key string) (int, []byte) {
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("x-api-key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	status, _ := do("POST", "/threads/search", `{}`, "")
	require.Equal(t, 401, status)
	status, body := do("POST", "/threads", `{"metadata": {"topic": "x"}}`, "k-ann")
	require.Equal(t, 200, status, "%s", body)
	var annThread struct {
		ThreadID string         `json:"thread_id"`
		Metadata map[string]any `json:"metadata"`
	}
	require.NoError(t, json.Unmarshal(body, &annThread))
	require.Equal(t, "ann", annThread.Metadata["owner"], "marked as ann's")
	status, body = do("POST", "/threads", `{}`, "k-bob")
	require.Equal(t, 200, status, "%s", body)
	var list []struct {
		ThreadID string `json:"thread_id"`
	}
	status, body = do("POST", "/threads/search", `{"limit": 100}`, "k-bob")
	require.Equal(t, 200, status, "%s", body)
	require.NoError(t, json.Unmarshal(body, &list))
	for _, th := range list {
		require.NotEqual(t, annThread.ThreadID, th.ThreadID, "bob does not list ann's thread")
	}
	status, _ = do("GET", "/threads/"+annThread.ThreadID, "", "k-ann")
	require.Equal(t, 200, status)
	status, _ = do("GET", "/threads/"+annThread.ThreadID, "", "k-bob")
	require.Equal(t, 403, status, "another's thread by id")

	// What the real upstream would resolve is what the edge authorizes.
	var bobThread struct {
		ThreadID string `json:"thread_id"`
	}
	status, body = do("POST", "/threads", `{}`, "k-bob")
	require.Equal(t, 200, status, "%s", body)
	require.NoError(t, json.Unmarshal(body, &bobThread))
	raw := func(method, path, key string) int {
		req, _ := http.NewRequest(method, ts.URL+"/", nil)
		req.URL.Opaque = path // as written: %2e%2e
		req.Header.Set("x-api-key", key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, m := range []string{"GET", "PATCH", "DELETE"} {
		require.Equal(t, 400, raw(m, "/threads/"+bobThread.ThreadID+"/%2e%2e/"+annThread.ThreadID+"/state", "k-bob"), m)
	}
	require.Equal(t, 400, raw("POST", "/threads/"+bobThread.ThreadID+"/%2e%2e/search", "k-bob"))
	require.Equal(t, 400, raw("GET", "/threads/"+strings.ToUpper(annThread.ThreadID), "k-bob"), "another spelling of ann's thread")
	status, body = do("POST", "/threads", `{"thread_id": "`+annThread.ThreadID+`", "if_exists": "do_nothing"}`, "k-bob")
	require.Equal(t, 403, status, "%s", body)
	require.NotContains(t, string(body), "topic")
	// A new thread is its creator's before anyone else reads it.
	status, body = do("POST", "/threads", `{}`, "k-ann")
	require.Equal(t, 200, status, "%s", body)
	require.NoError(t, json.Unmarshal(body, &annThread))
	status, _ = do("GET", "/threads/"+annThread.ThreadID, "", "k-bob")
	require.Equal(t, 403, status, "bob first: still ann's")
	status, _ = do("GET", "/threads/"+annThread.ThreadID, "", "k-ann")
	require.Equal(t, 200, status)
	status, _ = do("DELETE", "/assistants/echo", "", "k-bob")
	require.Equal(t, 403, status, "assistants are changed by admins")
}

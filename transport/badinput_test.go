package transport_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/transport"
	"github.com/stretchr/testify/require"
)

// TestBadHTTPInput is the table of bad requests the abuse review tried,
// each with the exact status and error code it must get.
func TestBadHTTPInput(t *testing.T) {
	ts, _, _ := start(t, transport.Options{BodyTimeout: 300 * time.Millisecond, CORSOrigins: []string{"app.example"}, Hosts: transport.LoopbackHosts})
	longID := strings.Repeat("a", 300)
	run := func(input string) string {
		return `{"id": 1, "method": "run.start", "params": {"assistant_id": "firehose", "input": ` + input + `}}`
	}
	deep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	cmd := func(method, params string) string {
		return `{"id": 1, "method": "` + method + `", "params": ` + params + `}`
	}
	for _, tc := range []struct {
		name, method, path, contentType, origin, body string
		status                                        int
		code                                          string
		header                                        map[string]string
	}{
		// Thread ids and paths.
		{"thread id too long", "POST", "/threads/" + longID + "/commands", "application/json", "", run("{}"), 400, "invalid_argument", nil},
		{"thread id with a space", "POST", "/threads/a%20b/commands", "application/json", "", run("{}"), 400, "invalid_argument", nil},
		{"state of a bad thread id", "GET", "/threads/a%00b/state", "", "", "", 400, "invalid_argument", nil},
		{"stream of a bad thread id", "POST", "/threads/" + longID + "/stream", "application/json", "", "{}", 400, "invalid_argument", nil},
		{"events into a bad thread id", "POST", "/threads/a%20b/events", "application/json", "", `[{"type":"event","method":"custom","params":{"namespace":[],"data":{"payload":1}}}]`, 400, "invalid_argument", nil},
		{"thread id with a slash", "POST", "/threads/a%2Fb/commands", "application/json", "", run("{}"), 400, "invalid_argument", nil},
		{"thread id ..", "GET", "/threads/../state", "", "", "", 404, "", nil},
		{"no such route", "GET", "/threads/t/nope", "", "", "", 404, "", nil},
		{"wrong verb on commands", "GET", "/threads/t/commands", "", "", "", 405, "", nil},
		{"state of an unknown thread", "GET", "/threads/never-seen/state", "", "", "", 404, "no_such_thread", nil},
		// Browsers as attackers.
		{"command as text/plain (a cross-site form)", "POST", "/threads/t/commands", "text/plain", "http://evil.example", run("{}"), 403, "permission_denied", nil},
		{"command as text/plain", "POST", "/threads/t/commands", "text/plain", "", run("{}"), 415, "invalid_argument", nil},
		{"command cross-site with no Origin", "POST", "/threads/t/commands", "application/json", "", run("{}"), 403, "permission_denied", map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{"stream as text/plain from a foreign origin", "POST", "/threads/csrf/stream", "text/plain", "http://evil.example", `{"channels": ["lifecycle"]}`, 403, "permission_denied", nil},
		{"stream as a form", "POST", "/threads/csrf/stream", "application/x-www-form-urlencoded", "", `{"channels": ["lifecycle"]}`, 415, "invalid_argument", nil},
		{"stream with a body and no content type", "POST", "/threads/csrf/stream", "", "", `{"channels": ["lifecycle"]}`, 415, "invalid_argument", nil},
		{"GET stream from a foreign origin", "GET", "/threads/csrf/stream?channels=lifecycle", "", "http://evil.example", "", 403, "permission_denied", nil},
		{"GET stream cross-site with no Origin (an image)", "GET", "/threads/csrf/stream?channels=lifecycle", "", "", "", 403, "permission_denied", map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{"state from a foreign origin (a read, CORS decides)", "GET", "/threads/never-seen/state", "", "http://evil.example", "", 404, "no_such_thread", nil},
		{"command with no content type", "POST", "/threads/t/commands", "", "", run("{}"), 415, "invalid_argument", nil},
		{"command from a foreign origin", "POST", "/threads/t/commands", "application/json", "http://evil.example", run("{}"), 403, "permission_denied", nil},
		{"command from an allowed origin", "POST", "/threads/t/commands", "application/json; charset=utf-8", "http://app.example", run(`{"count": 1}`), 200, "", nil},
		{"DNS rebinding: a foreign Host", "GET", "/threads/t/state", "", "", "", 403, "permission_denied", map[string]string{"Host": "evil.example"}},
		// Malformed, oversized, deep and mistyped JSON.
		{"malformed JSON", "POST", "/threads/t/commands", "application/json", "", `{"id": 1,`, 400, "invalid_argument", nil},
		{"not an object", "POST", "/threads/t/commands", "application/json", "", `[1, 2]`, 400, "invalid_argument", nil},
		{"empty body", "POST", "/threads/t/commands", "application/json", "", ``, 400, "invalid_argument", nil},
		{"invalid UTF-8", "POST", "/threads/t/commands", "application/json", "", "{\"id\": 1, \"method\": \"\xff\xfe\", \"params\": {}}", 400, "invalid_argument", nil},
		{"nesting 10,000 deep", "POST", "/threads/t/commands", "application/json", "", run(deep), 400, "invalid_argument", nil},
		{"unknown method", "POST", "/threads/t/commands", "application/json", "", cmd("nope", "{}"), 400, "unknown_command", nil},
		{"id of the wrong type", "POST", "/threads/t/commands", "application/json", "", `{"id": "one", "method": "state.get", "params": {}}`, 400, "invalid_argument", nil},
		{"negative id", "POST", "/threads/t/commands", "application/json", "", `{"id": -1, "method": "state.get", "params": {}}`, 400, "invalid_argument", nil},
		{"params of the wrong type", "POST", "/threads/t/commands", "application/json", "", cmd("run.start", `"go"`), 400, "invalid_argument", nil},
		{"missing assistant_id", "POST", "/threads/t/commands", "application/json", "", cmd("run.start", `{}`), 400, "invalid_argument", nil},
		{"body over 1 MiB", "POST", "/threads/t/commands", "application/json", "", `{"x": "` + strings.Repeat("x", 1<<20) + `"}`, 413, "resource_exhausted", nil},
		{"stream body over 64 KiB", "POST", "/threads/t/stream", "application/json", "", `{"channels": ["` + strings.Repeat("x", 1<<16) + `"]}`, 413, "resource_exhausted", nil},
		{"command of 1 MiB of empty maps", "POST", "/threads/t/commands", "application/json", "", run(`{"x": [` + strings.Repeat(`{},`, 300_000) + `{}]}`), 400, "invalid_argument", nil},
		{"stream body of many values", "POST", "/threads/t/stream", "application/json", "", `{"channels": [` + strings.Repeat(`1,`, 10000) + `1]}`, 400, "invalid_argument", nil},
		// Built-in assistants' inputs (the remote crash).
		{"firehose size 1e14 (was a crash)", "POST", "/threads/t/commands", "application/json", "", run(`{"size": 1e14}`), 400, "invalid_argument", nil},
		{"firehose a billion events", "POST", "/threads/t/commands", "application/json", "", run(`{"count": 1e9, "rate": 0}`), 400, "invalid_argument", nil},
		{"firehose negative count", "POST", "/threads/t/commands", "application/json", "", run(`{"count": -5}`), 400, "invalid_argument", nil},
		{"echo with no message", "POST", "/threads/t/commands", "application/json", "", cmd("run.start", `{"assistant_id": "echo", "input": {}}`), 400, "invalid_argument", nil},
		{"unknown assistant", "POST", "/threads/t/commands", "application/json", "", cmd("run.start", `{"assistant_id": "nope", "input": {}}`), 400, "invalid_argument", nil},
		// Lifecycle abuse: commands about things that do not exist.
		{"respond to no interrupt", "POST", "/threads/t/commands", "application/json", "", cmd("input.respond", `{"namespace": [], "interrupt_id": "i9", "response": true}`), 404, "no_such_interrupt", nil},
		{"fork from no checkpoint", "POST", "/threads/t/commands", "application/json", "", cmd("state.fork", `{"checkpoint_id": "nope"}`), 404, "no_such_checkpoint", nil},
		{"unsubscribe over HTTP", "POST", "/threads/t/commands", "application/json", "", cmd("subscription.unsubscribe", `{"subscription_id": "s1"}`), 400, "not_supported", nil},
		// Streams: filters and cursors.
		{"stream of an unknown channel", "POST", "/threads/t/stream", "application/json", "", `{"channels": ["nope"]}`, 400, "invalid_argument", nil},
		{"stream with a negative depth", "GET", "/threads/t/stream?channels=lifecycle&depth=-1", "", "", "", 400, "invalid_argument", nil},
		{"stream since a word", "GET", "/threads/t/stream?channels=lifecycle&since=ten", "", "", "", 400, "invalid_argument", nil},
		{"stream since a float", "POST", "/threads/t/stream", "application/json", "", `{"channels": ["lifecycle"], "since": 1.5}`, 400, "invalid_argument", nil},
		{"a Last-Event-ID this server never gave", "GET", "/threads/t/stream?channels=lifecycle", "", "", "", 400, "invalid_argument", map[string]string{"Last-Event-ID": "a-b-c"}},
		{"stream body deep", "POST", "/threads/t/stream", "application/json", "", `{"channels": ` + deep + `}`, 400, "invalid_argument", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, ts.URL+tc.path, strings.NewReader(tc.body))
			require.NoError(t, err)
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			for k, v := range tc.header {
				if k == "Host" {
					req.Host = v
				} else {
					req.Header.Set(k, v)
				}
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			require.Equal(t, tc.status, resp.StatusCode, "%s", b)
			if tc.code != "" {
				var e struct{ Error string }
				require.NoError(t, json.Unmarshal(b, &e), "%s", b)
				require.Equal(t, tc.code, e.Error, "%s", b)
			}
		})
	}
	// A body that never comes (Content-Length promises more than is sent)
	// holds nothing past the body timeout.
	for _, path := range []string{"/threads/t/commands", "/threads/t/stream"} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
		require.NoError(t, err)
		require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
		_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\":", path)
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err, path)
		require.Equal(t, http.StatusRequestTimeout, resp.StatusCode, path)
		conn.Close()
	}
	// Nothing refused above created a thread, and every refusal was counted.
	resp, err := http.Get(ts.URL + "/threads/csrf/state")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	resp, err = http.Get(ts.URL + "/metrics")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, limit := range []string{"origin", "content_type", "body_timeout", "body_size", "command_values"} {
		require.Regexp(t, `agentstream_refusals_total\{limit="`+limit+`"\} [1-9]`, string(b))
	}
}

// TestRefusedBeforeTheBodyIsNotHeld: a request refused before its body is
// read (no credential, here) with a body trickled in slowly is answered
// within the body timeout, not held as long as the client trickles; 200
// of them at once hold nothing past it.
func TestRefusedBeforeTheBodyIsNotHeld(t *testing.T) {
	a, err := auth.New(t.Context(), auth.Config{APIKeys: map[string]auth.Principal{"k-ann": {Subject: "ann"}}})
	require.NoError(t, err)
	ts, _, _ := start(t, transport.Options{BodyTimeout: 300 * time.Millisecond, Auth: a, AuthFailureBurst: 1000})
	const n = 50
	lines := make(chan string, n)
	start := time.Now()
	for range n {
		go func() {
			c, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
			if err != nil {
				lines <- err.Error()
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			_, _ = io.WriteString(c, "POST /threads/t/commands HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 200000\r\n\r\n{")
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				line = err.Error()
			}
			lines <- line
		}()
	}
	for range n {
		require.Contains(t, <-lines, " 401 ", "answered, not held")
	}
	require.Less(t, time.Since(start), 10*time.Second)
}

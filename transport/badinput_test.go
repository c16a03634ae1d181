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

	"github.com/agentstream/agentstream/transport"
	"github.com/stretchr/testify/require"
)

// TestBadHTTPInput is the table of bad requests the abuse review tried,
// each with the exact status and error code it must get.
func TestBadHTTPInput(t *testing.T) {
	ts, _, _ := start(t, transport.Options{BodyTimeout: 300 * time.Millisecond, CORSOrigins: []string{"app.example"}})
	longID := strings.Repeat("a", 300)
	run := func(input string) string {
		return `{"id": 1, "method": "run.start", "params": {"assistant_id": "firehose", "input": ` + input + `}}`
	}
	for _, tc := range []struct {
		name, method, path, contentType, origin, body string
		status                                        int
		code                                          string
	}{
		{"thread id too long", "POST", "/threads/" + longID + "/commands", "application/json", "", run("{}"), 400, "invalid_argument"},
		{"thread id with a space", "POST", "/threads/a%20b/commands", "application/json", "", run("{}"), 400, "invalid_argument"},
		{"state of a bad thread id", "GET", "/threads/a%00b/state", "", "", "", 400, "invalid_argument"},
		{"stream of a bad thread id", "POST", "/threads/" + longID + "/stream", "application/json", "", "{}", 400, "invalid_argument"},
		{"command as text/plain (a cross-site form)", "POST", "/threads/t/commands", "text/plain", "http://evil.example", run("{}"), 415, "invalid_argument"},
		{"command with no content type", "POST", "/threads/t/commands", "", "", run("{}"), 415, "invalid_argument"},
		{"command from a foreign origin", "POST", "/threads/t/commands", "application/json", "http://evil.example", run("{}"), 403, "permission_denied"},
		{"command from an allowed origin", "POST", "/threads/t/commands", "application/json; charset=utf-8", "http://app.example", run(`{"count": 1}`), 200, ""},
		{"malformed JSON", "POST", "/threads/t/commands", "application/json", "", `{"id": 1,`, 400, "invalid_argument"},
		{"unknown method", "POST", "/threads/t/commands", "application/json", "", `{"id": 1, "method": "nope", "params": {}}`, 400, "unknown_command"},
		{"body over 1 MiB", "POST", "/threads/t/commands", "application/json", "", `{"x": "` + strings.Repeat("x", 1<<20) + `"}`, 413, "invalid_argument"},
		{"firehose size 1e14 (was a crash)", "POST", "/threads/t/commands", "application/json", "", run(`{"size": 1e14}`), 400, "invalid_argument"},
		{"firehose a billion events", "POST", "/threads/t/commands", "application/json", "", run(`{"count": 1e9, "rate": 0}`), 400, "invalid_argument"},
		{"echo with no message", "POST", "/threads/t/commands", "application/json", "", `{"id": 1, "method": "run.start", "params": {"assistant_id": "echo", "input": {}}}`, 400, "invalid_argument"},
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
		_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\":", path)
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err, path)
		require.Contains(t, []int{http.StatusRequestTimeout, http.StatusBadRequest}, resp.StatusCode, path)
		conn.Close()
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSecretsAreNeverPrinted: a run whose flags carry secrets (a password
// in --upstream's and --redis's URLs, --upstream-api-key, an
// Authorization header) never prints them: not in any log line at debug
// level (the listening line, requests, the upstream's refusals), not in
// the errors of an unreachable upstream or a bad Redis URL, not in
// --print-config, which says REDACTED.
func TestSecretsAreNeverPrinted(t *testing.T) {
	const pw, key, hdr = "PW-s3cr3t-pw", "KEY-s3cr3t-key", "HDR-s3cr3t-hdr"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/ok":
			_, _ = io.WriteString(w, `{"ok": true}`)
		case "/assistants/search":
			_, _ = io.WriteString(w, `[]`)
		default:
			w.WriteHeader(500)
			_, _ = io.WriteString(w, `{"detail": "no"}`)
		}
	}))
	defer up.Close()
	upURL := strings.Replace(up.URL, "http://", "http://user:"+pw+"@", 1)
	flags := []string{"--upstream", upURL, "--upstream-api-key", key, "--upstream-header", "Authorization: Bearer " + hdr, "--log-level", "debug", "--log-format", "json"}
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	addr, done := startServe(t, ctx, &logs, flags...)
	for _, p := range []string{"/threads/search", "/assistants/x", "/threads/00000000-0000-4000-8000-000000000001/runs"} {
		resp, err := http.Post("http://"+addr+p, "application/json", strings.NewReader(`{}`))
		require.NoError(t, err)
		resp.Body.Close()
	}
	cancel()
	require.Equal(t, 0, <-done)
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Greater(t, len(lines), 3, "the run logged")
	for _, line := range lines {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), "a JSON log line: %s", line)
		for _, secret := range []string{pw, key, hdr} {
			require.NotContains(t, line, secret)
		}
	}
	require.Contains(t, logs.String(), "REDACTED", "the URL is logged with its password redacted")

	// --print-config.
	var out bytes.Buffer
	require.Equal(t, 0, run(context.Background(), append([]string{"serve", "--print-config", "--redis", "redis://u:" + pw + "@127.0.0.1:6399/0"}, flags...), &out, io.Discard, nil))
	for _, secret := range []string{pw, key, hdr} {
		require.NotContains(t, out.String(), secret)
	}
	require.Contains(t, out.String(), `upstream-api-key = "REDACTED"`)
	require.Contains(t, out.String(), "user:REDACTED@")

	// Errors: an upstream that does not answer, Redis URLs that do not
	// parse or reach nothing.
	for _, args := range [][]string{
		{"--upstream", "http://user:" + pw + "@127.0.0.1:1"},
		{"--redis", "redis://u:" + pw + "@127.0.0.1:notaport/0"},
		{"--redis", "redis://u:" + pw + "@127.0.0.1:1/0"},
		{"--redis", "redis://u:" + pw + "@127.0.0.1:1,127.0.0.1:x/0"},
	} {
		var errOut syncBuffer
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		code := run(ctx, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...), io.Discard, &errOut, nil)
		cancel()
		require.Equal(t, 1, code, "%v: %s", args, errOut.String())
		require.NotContains(t, errOut.String(), pw, "%v", args)
	}
}

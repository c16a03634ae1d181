package playground_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/internal/testkit/servetest"
	"github.com/agentstream/agentstream/playground"
	"github.com/agentstream/agentstream/transport"
	"github.com/stretchr/testify/require"
)

// serve runs the server with the playground on a loopback port.
func serve(t *testing.T) string {
	t.Helper()
	return servetest.Start(t, transport.Options{Playground: playground.Handler()}).URL()
}

func get(t *testing.T, url string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestServesThePage: / is the page, its assets are under /playground/,
// nothing is listed, nothing is fetched from elsewhere.
func TestServesThePage(t *testing.T) {
	base := serve(t)
	code, h, body := get(t, base+"/")
	require.Equal(t, 200, code)
	require.Contains(t, h.Get("Content-Type"), "text/html")
	require.Contains(t, h.Get("Content-Security-Policy"), "default-src 'self'")
	require.Contains(t, h.Get("Content-Security-Policy"), "frame-ancestors 'none'", "no page may frame it")
	require.Equal(t, "DENY", h.Get("X-Frame-Options"))
	require.Contains(t, body, `<script type="module" src="/playground/app.js">`)
	require.NotContains(t, body, "http://", "no external resource")
	require.NotContains(t, body, "https://", "no external resource")
	for _, asset := range []string{"app.js", "style.css"} {
		code, _, body := get(t, base+"/playground/"+asset)
		require.Equal(t, 200, code, asset)
		require.NotContains(t, body, "https://", "%s fetches nothing from elsewhere", asset)
	}
	code, _, _ = get(t, base+"/playground/")
	require.Equal(t, 404, code, "no listing")
	code, _, _ = get(t, base+"/nope")
	require.Equal(t, 404, code)
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	require.NoError(t, err)
	return filepath.Dir(wd)
}

// TestPageTypeChecks: app.js type-checks against the generated
// TypeScript bindings (tsc --checkJs --strict).
func TestPageTypeChecks(t *testing.T) {
	if testing.Short() {
		t.Skip("runs tsc")
	}
	tsc := filepath.Join(moduleRoot(t), "tools/node/node_modules/.bin/tsc")
	if _, err := os.Stat(tsc); err != nil {
		if os.Getenv("AGENTSTREAM_REQUIRE_TOOLS") == "1" {
			t.Fatal("tsc is not installed (npm ci --prefix tools/node)")
		}
		t.Skip("tsc is not installed (npm ci --prefix tools/node)")
	}
	out, err := exec.Command(tsc, "--allowJs", "--checkJs", "--noEmit", "--strict", "--target", "es2022", "--module", "es2022",
		"--moduleResolution", "bundler", "--lib", "es2022,dom", "web/app.js").CombinedOutput()
	require.NoError(t, err, "%s", out)
}

// TestInChromium drives the page in Debian's Chromium with playwright-core
// (tools/node/playground-e2e.mjs): start demo from the page, see the tree
// and the text, approve the interrupt by clicking, see the run
// complete; start a run from the keyboard; drop the WebSocket mid-run and recover with no duplicated
// text; follow 2,000 events/s. Screenshots of each state go to
// testdata/artifacts. It skips, naming what is missing, without chromium
// (apt-get install chromium) or tools/node, unless
// AGENTSTREAM_REQUIRE_CHROMIUM=1 (as .ci/run sets).
func TestInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Chromium")
	}
	root := moduleRoot(t)
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	node, nodeErr := exec.LookPath("node")
	_, pwErr := os.Stat(filepath.Join(root, "tools/node/node_modules/playwright-core"))
	_, chErr := os.Stat(chromium)
	var missing []string
	if nodeErr != nil {
		missing = append(missing, "node")
	}
	if pwErr != nil {
		missing = append(missing, "playwright-core (npm ci --prefix tools/node)")
	}
	if chErr != nil {
		missing = append(missing, chromium+" (apt-get install chromium)")
	}
	if len(missing) > 0 {
		if os.Getenv("AGENTSTREAM_REQUIRE_CHROMIUM") == "1" {
			t.Fatalf("missing: %s", strings.Join(missing, ", "))
		}
		t.Skipf("missing: %s", strings.Join(missing, ", "))
	}
	base := serve(t)
	keys, err := auth.New(context.Background(), auth.Config{APIKeys: map[string]auth.Principal{"k-alice": {Subject: "alice"}}})
	require.NoError(t, err)
	defer keys.Close()
	authed := servetest.Start(t, transport.Options{Playground: playground.Handler(), Auth: keys}).URL()
	artifacts := filepath.Join("testdata", "artifacts")
	require.NoError(t, os.MkdirAll(artifacts, 0o755))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(root, "tools/node/playground-e2e.mjs"), base, artifacts, authed)
	cmd.Env = append(os.Environ(), "CHROMIUM="+chromium)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	require.NoError(t, err, "%s", out)
	for _, shot := range []string{"1-interrupt.png", "2-completed.png", "3-dropped.png", "4-recovered.png", "5-firehose.png", "6-refused.png"} {
		require.FileExists(t, filepath.Join(artifacts, shot))
	}
}

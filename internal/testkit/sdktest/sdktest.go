// Package sdktest finds, for tests, the official JavaScript SDK's
// conformance suite (tools/node/conformance.mjs) and the node binary that
// runs it.
package sdktest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Conformance returns node's path and the suite's. Without node or the
// installed tools (npm ci --prefix tools/node) the test is skipped, or
// fails when AGENTSTREAM_REQUIRE_TOOLS=1 (as test.sh sets), and under
// -short it is skipped.
func Conformance(t testing.TB) (node, script string) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs node")
	}
	root, err := moduleRoot()
	node, nodeErr := exec.LookPath("node")
	_, sdkErr := os.Stat(filepath.Join(root, "tools/node/node_modules/@langchain/langgraph-sdk"))
	if err != nil || nodeErr != nil || sdkErr != nil {
		if os.Getenv("AGENTSTREAM_REQUIRE_TOOLS") == "1" {
			t.Fatal("node and tools/node (npm ci --prefix tools/node) are needed")
		}
		t.Skip("node or tools/node is not installed")
	}
	return node, filepath.Join(root, "tools/node/conformance.mjs")
}

// Script is Conformance for another script of tools/node (name, such as
// "platform-resources.mjs").
func Script(t testing.TB, name string) (node, script string) {
	t.Helper()
	node, conformance := Conformance(t)
	return node, filepath.Join(filepath.Dir(conformance), name)
}

// moduleRoot is the directory of go.mod above the test's directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}

// Chromium is the path of the Chromium a browser test of script (a
// tools/node script on playwright-core) drives: $CHROMIUM or
// /usr/bin/chromium. Without it or the page's node modules the test is
// skipped naming what is missing, or fails when
// AGENTSTREAM_REQUIRE_CHROMIUM=1 (as .ci/run sets); under -short it is
// skipped.
func Chromium(t testing.TB, script string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs Chromium")
	}
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	var missing []string
	if _, err := os.Stat(chromium); err != nil {
		missing = append(missing, chromium+" (apt-get install chromium)")
	}
	for _, mod := range []string{"playwright-core", "esbuild", "react", "react-dom"} {
		if _, err := os.Stat(filepath.Join(filepath.Dir(script), "node_modules", mod)); err != nil {
			missing = append(missing, mod+" (npm ci --prefix tools/node)")
		}
	}
	if len(missing) > 0 {
		if os.Getenv("AGENTSTREAM_REQUIRE_CHROMIUM") == "1" {
			t.Fatalf("missing: %s", strings.Join(missing, ", "))
		}
		t.Skipf("missing: %s", strings.Join(missing, ", "))
	}
	return chromium
}

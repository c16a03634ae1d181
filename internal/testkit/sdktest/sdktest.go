// Package sdktest finds, for tests, the official JavaScript SDK's
// conformance suite (tools/node/conformance.mjs) and the node binary that
// runs it.
package sdktest

import (
	"os"
	"os/exec"
	"path/filepath"
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

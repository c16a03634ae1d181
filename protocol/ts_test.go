package protocol

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// upstreamTS is the official binding of protocol 0.0.21, installed by
// tools/node (npm @langchain/protocol).
const upstreamTS = "../tools/node/node_modules/@langchain/protocol/protocol.ts"

// upstreamDefects lists the shared type names that are not assignable in
// one direction, each because of a defect of the upstream binding (it is
// generated from the upstream CDDL by a tool that mistypes some
// constructs). "ours->theirs" means a value of our type does not fit
// theirs. Anything not listed must be assignable both ways.
var upstreamDefects = map[string]string{
	"TextContentBlock theirs->ours": textTypeDefect,
	// These contain TextContentBlock, so they inherit its defect.
	"ContentBlock theirs->ours":           textTypeDefect,
	"FinalizedContentBlock theirs->ours":  textTypeDefect,
	"ContentBlockStartData theirs->ours":  textTypeDefect,
	"ContentBlockFinishData theirs->ours": textTypeDefect,
	"MessagesData theirs->ours":           textTypeDefect,
	"MessagesEvent theirs->ours":          textTypeDefect,
	"EventData theirs->ours":              textTypeDefect,
	"Event theirs->ours":                  textTypeDefect,
	"Message theirs->ours":                textTypeDefect,
	// agentstream may answer with two error codes of its own.
	"ErrorCode ours->theirs":     extensionErrorCodes,
	"ErrorResponse ours->theirs": extensionErrorCodes,
	"Message ours->theirs":       extensionErrorCodes,
}

// extensionErrorCodes: ErrorCode has agentstream's rate_limited and
// resource_exhausted (EXTENSION in protocol.cddl), which upstream lacks.
const extensionErrorCodes = "agentstream's extension error codes"

// textTypeDefect: upstream types TextContentBlock's `type` as string. The
// schema says the literal "text", which its generator mistook for the
// prelude type `text`; every other block has its literal.
const textTypeDefect = "upstream types TextContentBlock.type as string instead of the literal \"text\""

var exportRe = regexp.MustCompile(`(?m)^export (?:type|interface) ([A-Za-z_][A-Za-z0-9_]*)`)

func exportedTypes(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	out := map[string]bool{}
	for _, m := range exportRe.FindAllStringSubmatch(string(b), -1) {
		out[m[1]] = true
	}
	return out
}

// TestTypeScriptMatchesUpstream: for every type name our TypeScript binding
// shares with @langchain/protocol 0.0.21, each is assignable to the other
// (tsc --strict), except the documented upstream defects.
func TestTypeScriptMatchesUpstream(t *testing.T) {
	if testing.Short() {
		t.Skip("runs tsc")
	}
	tsc, err := filepath.Abs("../tools/node/node_modules/.bin/tsc")
	require.NoError(t, err)
	if _, err := os.Stat(tsc); err != nil || func() bool { _, err := os.Stat(upstreamTS); return err != nil }() {
		if os.Getenv("AGENTSTREAM_REQUIRE_TOOLS") == "1" {
			t.Fatal("tools/node is not installed (npm ci --prefix tools/node)")
		}
		t.Skip("tools/node is not installed (npm ci --prefix tools/node)")
	}
	ours := exportedTypes(t, "../bindings/ts/protocol.ts")
	theirs := exportedTypes(t, upstreamTS)
	var shared []string
	for n := range theirs {
		if ours[n] {
			shared = append(shared, n)
		}
	}
	sort.Strings(shared)
	require.Greater(t, len(shared), 100, "most upstream names should be shared")
	var missing []string
	for n := range theirs {
		if !ours[n] {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing, "upstream types our binding lacks")

	dir := t.TempDir()
	copyFile(t, "../bindings/ts/protocol.ts", filepath.Join(dir, "ours.ts"))
	copyFile(t, upstreamTS, filepath.Join(dir, "theirs.ts"))
	var b strings.Builder
	b.WriteString("import type * as O from \"./ours\";\nimport type * as T from \"./theirs\";\n")
	line := 3
	where := map[int]string{}
	for _, n := range shared {
		fmt.Fprintf(&b, "export function ot_%s(x: O.%s): T.%s { return x; }\n", n, n, n)
		where[line] = n + " ours->theirs"
		line++
		fmt.Fprintf(&b, "export function to_%s(x: T.%s): O.%s { return x; }\n", n, n, n)
		where[line] = n + " theirs->ours"
		line++
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "check.ts"), []byte(b.String()), 0o644))
	cmd := exec.Command(tsc, "--noEmit", "--strict", "--target", "es2020", "--module", "esnext",
		"--moduleResolution", "bundler", "--skipLibCheck", "check.ts")
	cmd.Dir = dir
	out, _ := cmd.CombinedOutput()
	errLine := regexp.MustCompile(`(?m)^check\.ts\((\d+),\d+\): error (TS\d+: .*)$`)
	failed := map[string]string{}
	for _, m := range errLine.FindAllStringSubmatch(string(out), -1) {
		var n int
		fmt.Sscan(m[1], &n)
		key, ok := where[n]
		require.True(t, ok, "unexpected tsc error: %s\n%s", m[0], out)
		failed[key] = m[2]
	}
	if len(failed) == 0 && strings.Contains(string(out), "error") {
		t.Fatalf("tsc failed outside the checks:\n%s", out)
	}
	for key, msg := range failed {
		if _, ok := upstreamDefects[key]; !ok {
			t.Errorf("%s is not assignable and not a documented upstream defect: %s", key, msg)
		}
	}
	for key := range upstreamDefects {
		if _, ok := failed[key]; !ok {
			t.Errorf("%s is documented as an upstream defect but is assignable now: remove it", key)
		}
	}
	t.Logf("%d shared type names checked both ways; %d documented exceptions", len(shared), len(upstreamDefects))
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, b, 0o644))
}

// TestPythonBindingImports imports the generated Python module as it is.
func TestPythonBindingImports(t *testing.T) {
	if testing.Short() {
		t.Skip("runs python3")
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("AGENTSTREAM_REQUIRE_TOOLS") == "1" {
			t.Fatal("python3 is not installed")
		}
		t.Skip("python3 is not installed")
	}
	cmd := exec.Command(py, "-c", "import agentstream_protocol.protocol as p; print(len(p.__dict__))")
	cmd.Dir = "../bindings/python"
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
}

package bindings

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentstream/agentstream/protocol"
	"github.com/stretchr/testify/require"
)

// tool finds a program, or skips (fails under AGENTSTREAM_REQUIRE_TOOLS=1).
func tool(t *testing.T, path string) string {
	t.Helper()
	p, err := exec.LookPath(path)
	if err != nil {
		if os.Getenv("AGENTSTREAM_REQUIRE_TOOLS") == "1" {
			t.Fatalf("%s is not installed", path)
		}
		t.Skipf("%s is not installed", path)
	}
	abs, _ := filepath.Abs(p)
	return abs
}

func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %s:\n%s", name, strings.Join(args, " "), out)
	return string(out)
}

// TestVersionsFollowTheProtocol: both packages carry protocol.Version.
func TestVersionsFollowTheProtocol(t *testing.T) {
	b, err := os.ReadFile("ts/package.json")
	require.NoError(t, err)
	var pkg struct{ Version string }
	require.NoError(t, json.Unmarshal(b, &pkg))
	require.Equal(t, protocol.Version, pkg.Version, "bindings/ts/package.json")
	b, err = os.ReadFile("python/pyproject.toml")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^version = "`+regexp.QuoteMeta(protocol.Version)+`"$`, string(b), "bindings/python/pyproject.toml")
	b, err = os.ReadFile("python/agentstream_protocol/__init__.py")
	require.NoError(t, err)
	require.Contains(t, string(b), `__version__ = "`+protocol.Version+`"`)
}

// TestTypeScriptPackage: npm pack makes a tarball that installs into a
// scratch project offline, where tsc --strict compiles a file that imports
// its types, and refuses one that misuses them.
func TestTypeScriptPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs npm and tsc")
	}
	npm := tool(t, "npm")
	tsc := tool(t, "../tools/node/node_modules/.bin/tsc")
	tmp := t.TempDir()
	run(t, "ts", npm, "pack", "--pack-destination", tmp)
	tgz := filepath.Join(tmp, "agentstream-protocol-"+protocol.Version+".tgz")
	require.FileExists(t, tgz)
	app := filepath.Join(tmp, "app")
	require.NoError(t, os.Mkdir(app, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(app, "package.json"), []byte(`{"name": "app", "private": true, "type": "module"}`), 0o644))
	run(t, app, npm, "install", "--offline", "--no-audit", "--no-fund", tgz)
	require.FileExists(t, filepath.Join(app, "node_modules", "@agentstream", "protocol", "protocol.schema.json"))
	good := `import type { ClientCommand, Message } from "@agentstream/protocol";
const cmd: ClientCommand = { id: 1, method: "run.start", params: { assistant_id: "a", input: null } };
export function kind(m: Message): string { return m.type; }
export { cmd };
`
	require.NoError(t, os.WriteFile(filepath.Join(app, "worker.ts"), []byte(workerTS), 0o644))
	require.FileExists(t, filepath.Join(app, "node_modules", "@agentstream", "protocol", "worker.js"))
	require.NoError(t, os.WriteFile(filepath.Join(app, "good.ts"), []byte(good), 0o644))
	flags := []string{"--strict", "--noEmit", "--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022"}
	run(t, app, tsc, append(flags, "good.ts", "worker.ts")...)
	bad := `import type { ClientCommand } from "@agentstream/protocol";
export const cmd: ClientCommand = { id: 1, method: "run.start", params: { input: null } };
`
	require.NoError(t, os.WriteFile(filepath.Join(app, "bad.ts"), []byte(bad), 0o644))
	out, err := exec.Command(tsc, append(flags, filepath.Join(app, "bad.ts"))...).CombinedOutput()
	require.Error(t, err, "a run.start without assistant_id must not compile")
	require.Contains(t, string(out), "assistant_id")
}

// workerTS uses the package's worker with its types, as a TypeScript
// worker would.
const workerTS = `import { Worker, Cancelled, type Run } from "@agentstream/protocol/worker";
async function shout(run: Run): Promise<void> {
  const text = JSON.stringify(run.input).toUpperCase();
  const id: string = await run.text([text], { delayMs: 1 });
  run.setValues({ ...run.values, last: id });
  const answer: unknown = await run.interrupt({ question: "ok?" });
  if (answer === null) throw new Cancelled("no answer");
}
export const worker = new Worker({ url: "http://127.0.0.1:2024", apiKey: "k", maxRuns: 4 });
export const serving: Promise<void> = worker.serve({ shout });
`

// TestPythonPackage: the wheel builds offline with pip wheel --no-deps
// --no-build-isolation, installs into a fresh virtualenv and imports; mypy
// --strict accepts a typed example when mypy is installed.
func TestPythonPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs python3 and pip")
	}
	py := tool(t, "python3")
	tmp := t.TempDir()
	dist := filepath.Join(tmp, "dist")
	run(t, ".", py, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "--disable-pip-version-check", "-w", dist, "./python")
	whl := filepath.Join(dist, "agentstream_protocol-"+protocol.Version+"-py3-none-any.whl")
	require.FileExists(t, whl)
	venv := filepath.Join(tmp, "venv")
	run(t, tmp, py, "-m", "venv", venv)
	vpy := filepath.Join(venv, "bin", "python")
	run(t, tmp, vpy, "-m", "pip", "install", "--no-index", "--no-deps", "--disable-pip-version-check", whl)
	example := `from agentstream_protocol import ClientCommandRunStart, __version__
from agentstream_protocol.worker import Run, Worker


def shout(run: Run) -> None:
    run.text([str(run.input).upper()])


worker = Worker("http://127.0.0.1:2024", api_key="k")

cmd: ClientCommandRunStart = {"id": 1, "method": "run.start", "params": {"assistant_id": "a", "input": None}}
print(__version__, cmd["method"])
`
	require.NoError(t, os.WriteFile(filepath.Join(tmp, "example.py"), []byte(example), 0o644))
	out := run(t, tmp, vpy, "example.py")
	require.Equal(t, protocol.Version+" run.start\n", out)
	if mypy, err := exec.LookPath("mypy"); err == nil {
		run(t, tmp, mypy, "--strict", "example.py")
	} else {
		t.Log("mypy is not installed: the typed example is imported and run, not type-checked")
	}
}

package codegen

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// requireTools makes a missing compiler a failure instead of a skip; CI sets it.
func requireTools() bool { return os.Getenv("AGENTSTREAM_REQUIRE_TOOLS") == "1" }

func findTool(t *testing.T, candidates ...string) string {
	t.Helper()
	for _, c := range candidates {
		if p, err := exec.LookPath(c); err == nil {
			return p
		}
	}
	if requireTools() {
		t.Fatalf("none of %v is installed", candidates)
	}
	t.Skipf("none of %v is installed (set AGENTSTREAM_REQUIRE_TOOLS=1 to fail instead)", candidates)
	return ""
}

// tscPath is the TypeScript compiler installed by tools/node.
func tscPath(t *testing.T) string {
	t.Helper()
	return findTool(t, "../tools/node/node_modules/.bin/tsc")
}

// checkGo builds Go sources (package dir -> file contents) as packages of
// this module, without writing into the source tree (go build -overlay).
func checkGo(t *testing.T, files map[string][]byte) {
	t.Helper()
	goBin := findTool(t, "go")
	tmp := t.TempDir()
	wd, err := os.Getwd()
	require.NoError(t, err)
	overlay := map[string]map[string]string{"Replace": {}}
	var pkgs []string
	i := 0
	for dir, src := range files {
		real := filepath.Join(tmp, fmt.Sprintf("gen%d.go", i))
		i++
		require.NoError(t, os.WriteFile(real, src, 0o644))
		virtual := filepath.Join(wd, "internal", "gencheck", dir, "gen.go")
		overlay["Replace"][virtual] = real
		pkgs = append(pkgs, "./internal/gencheck/"+dir)
	}
	ov, _ := json.Marshal(overlay)
	ovPath := filepath.Join(tmp, "overlay.json")
	require.NoError(t, os.WriteFile(ovPath, ov, 0o644))
	cmd := exec.Command(goBin, append([]string{"build", "-overlay=" + ovPath}, pkgs...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "generated Go does not build:\n%s", out)
}

// checkTS type-checks TypeScript files with tsc --strict.
func checkTS(t *testing.T, files map[string][]byte) {
	t.Helper()
	tsc := tscPath(t)
	tmp := t.TempDir()
	var names []string
	for name, src := range files {
		p := filepath.Join(tmp, name+".ts")
		require.NoError(t, os.WriteFile(p, src, 0o644))
		names = append(names, p)
	}
	args := append([]string{"--noEmit", "--strict", "--target", "es2020", "--skipLibCheck"}, names...)
	out, err := exec.Command(tsc, args...).CombinedOutput()
	require.NoError(t, err, "generated TypeScript does not type-check:\n%s", out)
}

// checkPython imports each module in a fresh interpreter.
func checkPython(t *testing.T, files map[string][]byte) {
	t.Helper()
	py := findTool(t, "python3")
	tmp := t.TempDir()
	var imports []string
	for name, src := range files {
		require.NoError(t, os.WriteFile(filepath.Join(tmp, name+".py"), src, 0o644))
		imports = append(imports, name)
	}
	script := "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"
	cmd := exec.Command(py, append([]string{"-c", script}, imports...)...)
	cmd.Dir = tmp
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "generated Python does not import:\n%s", out)
}

// TestCorpusOutputsCompile: the Go output of every complete corpus schema
// builds and vets, the TypeScript type-checks and the Python imports.
func TestCorpusOutputsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles generated code with external tools")
	}
	goFiles := map[string][]byte{}
	tsFiles := map[string][]byte{}
	pyFiles := map[string][]byte{}
	for i, cs := range completeCorpus(t) {
		pkg := fmt.Sprintf("c%03d", i)
		m := Lower(cs.res)
		for _, lang := range []Lang{LangGo, LangTS, LangPython} {
			out, _, err := Generate(m, Options{Lang: lang, Package: pkg, Source: cs.name})
			require.NoError(t, err, cs.name)
			switch lang {
			case LangGo:
				goFiles[pkg] = out
			case LangTS:
				tsFiles[pkg] = out
			case LangPython:
				pyFiles[pkg] = out
			}
		}
	}
	t.Run("go", func(t *testing.T) { checkGo(t, goFiles) })
	t.Run("ts", func(t *testing.T) { checkTS(t, tsFiles) })
	t.Run("python", func(t *testing.T) { checkPython(t, pyFiles) })
}

var _ = strings.TrimSpace

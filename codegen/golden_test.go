package codegen

import (
	"go/format"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// goldenCase is a schema under testdata/golden with its expected outputs.
// The Go output lives in internal/golden/<name>/ so that the test build
// compiles it, beside hand-written round-trip tests.
type goldenCase struct {
	name      string
	fieldCase FieldCase
}

var goldenCases = []goldenCase{
	{name: "kitchen", fieldCase: CaseSnake},
}

func goldenPath(name string, lang Lang) string {
	switch lang {
	case LangGo:
		return filepath.Join("internal", "golden", name, name+".go")
	case LangJSONSchema:
		return filepath.Join("testdata", "golden", name+".schema.json")
	case LangTS:
		return filepath.Join("testdata", "golden", name+".ts")
	default:
		return filepath.Join("testdata", "golden", name+".py")
	}
}

// TestGolden compares every generator's output for the golden schemas with
// the checked-in files; -update rewrites them.
func TestGolden(t *testing.T) {
	for _, gc := range goldenCases {
		src, err := os.ReadFile(filepath.Join("testdata", "golden", gc.name+".cddl"))
		require.NoError(t, err)
		for _, lang := range Langs {
			t.Run(gc.name+"/"+string(lang), func(t *testing.T) {
				out, _, err := Compile("testdata/golden/"+gc.name+".cddl", src, Options{
					Lang: lang, Package: gc.name, FieldCase: gc.fieldCase, Source: gc.name + ".cddl",
				})
				require.NoError(t, err)
				path := goldenPath(gc.name, lang)
				if *update {
					require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
					require.NoError(t, os.WriteFile(path, out, 0o644))
				}
				want, err := os.ReadFile(path)
				require.NoError(t, err)
				if string(want) != string(out) {
					t.Fatalf("%s is stale (go test ./codegen -update):\n%s", path, Diff(path, "generated", want, out))
				}
			})
		}
	}
}

// TestGoldenOutputsCompile type-checks the TypeScript and imports the Python
// of the golden schemas (the Go is compiled by the test build).
func TestGoldenOutputsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("uses external tools")
	}
	ts := map[string][]byte{}
	py := map[string][]byte{}
	for _, gc := range goldenCases {
		for lang, into := range map[Lang]map[string][]byte{LangTS: ts, LangPython: py} {
			b, err := os.ReadFile(goldenPath(gc.name, lang))
			require.NoError(t, err)
			into[strings.ReplaceAll(gc.name, "-", "_")] = b
		}
	}
	t.Run("ts", func(t *testing.T) { checkTS(t, ts) })
	t.Run("python", func(t *testing.T) { checkPython(t, py) })
}

// TestGeneratedGoIsGofmted: the Go generator lays out most code itself
// rather than running go/format over the whole file; the result must be
// exactly what gofmt would produce, for the golden schemas and the corpus.
func TestGeneratedGoIsGofmted(t *testing.T) {
	check := func(t *testing.T, name string, out []byte) {
		t.Helper()
		formatted, err := format.Source(out)
		require.NoError(t, err, name)
		if string(formatted) != string(out) {
			t.Fatalf("%s is not gofmt-ed:\n%s", name, Diff("generated", "gofmt", out, formatted))
		}
	}
	for _, gc := range goldenCases {
		b, err := os.ReadFile(goldenPath(gc.name, LangGo))
		require.NoError(t, err)
		check(t, gc.name, b)
	}
	out, _, err := Compile("bench.cddl", benchSchema(130), Options{Lang: LangGo, Package: "bench"})
	require.NoError(t, err)
	check(t, "bench", out)
	t.Run("corpus", func(t *testing.T) {
		for _, cs := range completeCorpus(t) {
			out, _, err := Generate(Lower(cs.res), Options{Lang: LangGo, Package: "x"})
			require.NoError(t, err)
			check(t, cs.name, out)
		}
	})
}

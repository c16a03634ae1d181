package codegen

import (
	"bytes"
	"encoding/json"
	"go/format"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v5"
	"github.com/stretchr/testify/require"
)

// goldenCase is a schema under testdata/golden with its expected outputs.
// The Go output lives in internal/golden/<name>/ so that the test build
// compiles it, beside hand-written round-trip tests.
type goldenCase struct {
	name      string
	fieldCase FieldCase
	// warns: the schema has constructs a target only approximates (the
	// others must generate without a warning).
	warns bool
	// goFast: the unions given fast paths (Options.GoFast), goRoutes
	// their routed members (Options.GoRoutes).
	goFast   []string
	goRoutes map[string][]string
}

var goldenCases = []goldenCase{
	{name: "kitchen", fieldCase: CaseSnake, warns: true},
	{name: "splice"},
	{name: "nested"},
	{name: "unwrap"},
	{name: "defaults"},
	{name: "kinds", warns: true},
	{name: "validate", warns: true}, // Python: an optional group's members one by one
	{name: "fast", goFast: []string{"Event"}, goRoutes: map[string][]string{"Event": {"params.data.graph", "params.node", "params.data.name"}}, warns: true},
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
				out, warns, err := Compile("testdata/golden/"+gc.name+".cddl", src, Options{
					Lang: lang, Package: gc.name, FieldCase: gc.fieldCase, Source: gc.name + ".cddl", GoFast: gc.goFast, GoRoutes: gc.goRoutes,
				})
				require.NoError(t, err)
				if !gc.warns {
					require.Empty(t, warns)
				}
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

// TestGoldenSchemasDecide checks the golden JSON Schemas against
// hand-written documents: what each reproduction of issue 15 lost or
// accepted wrongly.
func TestGoldenSchemasDecide(t *testing.T) {
	cases := []struct {
		golden, rule, doc string
		valid             bool
	}{
		{"splice", "M", `{"id": 1, "method": "y", "params": "p"}`, true},
		{"splice", "M", `{"id": 1}`, false},
		{"splice", "M", `{"id": 1, "method": "z", "params": "p"}`, false},
		{"splice", "Event", `{"type": "event", "method": "log.entryAdded", "params": {"text": "hi"}}`, true},
		{"splice", "Event", `{"type": "event", "method": "net.request", "params": {"url": "u"}}`, true},
		{"splice", "Event", `{"type": "event", "method": "net.request", "params": {"text": "hi"}}`, false},
		{"splice", "Event", `{"type": "event"}`, false},
		{"nested", "Message", `{"type": "event", "method": "m1", "p": 1}`, true},
		{"nested", "Message", `{"type": "event", "method": "m1", "q": "x"}`, false},
		{"nested", "Message", `{"type": "success", "id": 2}`, true},
		{"unwrap", "advanced-header", `[1, "a", "aGk", 1.5]`, true},
		{"unwrap", "advanced-header", `[[1, "a"], "aGk", 1.5]`, false},
		{"defaults", "Opts", `{"verbose": true, "label": null}`, true},
		{"validate", "Order", `{"id": "o", "qty": 1, "code": "ABC-1", "tags": ["a"], "lines": [], "version": 2, "lat": 1, "lon": 2}`, true},
		{"validate", "Order", `{"id": "o", "qty": 1, "code": "ABC-1", "tags": ["a"], "lines": [], "version": 2, "lat": 1}`, false},
	}
	schemas := map[string]*jsonschema.Schema{}
	for _, c := range cases {
		key := c.golden + "#" + c.rule
		sch := schemas[key]
		if sch == nil {
			b, err := os.ReadFile(goldenPath(c.golden, LangJSONSchema))
			require.NoError(t, err)
			comp := jsonschema.NewCompiler()
			comp.Draft = jsonschema.Draft2020
			require.NoError(t, comp.AddResource("schema.json", bytes.NewReader(b)))
			sch, err = comp.Compile("schema.json#/$defs/" + c.rule)
			require.NoError(t, err)
			schemas[key] = sch
		}
		var doc any
		require.NoError(t, json.Unmarshal([]byte(c.doc), &doc))
		if err := sch.Validate(doc); c.valid {
			require.NoError(t, err, "%s %s", key, c.doc)
		} else {
			require.Error(t, err, "%s %s", key, c.doc)
		}
	}
	// The defaults are in the schema.
	b, err := os.ReadFile(goldenPath("defaults", LangJSONSchema))
	require.NoError(t, err)
	var sch struct {
		Defs map[string]struct {
			Properties map[string]map[string]any `json:"properties"`
		} `json:"$defs"`
	}
	require.NoError(t, json.Unmarshal(b, &sch))
	got := map[string]any{}
	for name, p := range sch.Defs["Opts"].Properties {
		v, ok := p["default"]
		require.True(t, ok, "%s has its default", name)
		got[name] = v
	}
	require.Equal(t, map[string]any{"verbose": false, "color": true, "label": nil, "retries": 5.0, "mode": "fast", "quiet": false}, got)
}

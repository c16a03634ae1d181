package codegen

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/agentstream/agentstream/codegen/cddl"
	"github.com/santhosh-tekuri/jsonschema/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// corpusDir is the shared corpus of real-world CDDL (see its MANIFEST.md):
// ../shared/cddl-corpus beside the repository, which CI has. It is not
// part of the repository; the tests that read it skip without it.
const corpusDir = "../../shared/cddl-corpus"

// needCorpus skips t, naming the corpus, when it is not there.
func needCorpus(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(corpusDir); err != nil {
		t.Skipf("SKIP: needs the shared CDDL corpus, ../shared/cddl-corpus beside the repository (%s): not found", corpusDir)
	}
}

func corpusFiles(t testing.TB) []string {
	t.Helper()
	needCorpus(t)
	var files []string
	err := filepath.WalkDir(corpusDir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "vectors" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".cddl") {
			files = append(files, path)
		}
		return nil
	})
	require.NoError(t, err)
	sort.Strings(files)
	require.NotEmpty(t, files)
	return files
}

func rel(path string) string {
	r, _ := filepath.Rel(corpusDir, path)
	return filepath.ToSlash(r)
}

// notCDDL lists corpus files that are not CDDL at all, with the reason.
var notCDDL = map[string]string{
	"ietf/rfc9393.cddl": "a cddlc include list (one file name), not a schema",
}

// TestCorpusParses: the parser accepts every valid file of the corpus and
// rejects the invalid ones with a position.
func TestCorpusParses(t *testing.T) {
	for _, f := range corpusFiles(t) {
		name := rel(f)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			src, err := os.ReadFile(f)
			require.NoError(t, err)
			_, err = cddl.Parse(name, src)
			switch {
			case strings.HasPrefix(name, "invalid/"), notCDDL[name] != "":
				require.Error(t, err)
				var list cddl.ErrorList
				require.ErrorAs(t, err, &list)
				require.Positive(t, list[0].Pos.Line)
			case strings.HasPrefix(name, "rfc8610/") && err != nil:
				// Some RFC snippets are bare groups shown outside any rule.
				_, gerr := cddl.ParseGroup(name, src)
				require.NoError(t, gerr, "neither a schema (%v) nor a group", err)
			default:
				require.NoError(t, err)
			}
		})
	}
}

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// fragmentsFile lists the corpus schemas that use rules defined in other
// documents (the RFC 8610 snippets aside), with the names they leave
// undefined. Resolve must report exactly those names for them.
const fragmentsFile = "testdata/corpus-fragments.txt"

type corpusSchema struct {
	name string
	res  *cddl.Resolved
}

// completeCorpus resolves every schema of the corpus and returns the
// complete ones; it checks the incomplete ones against fragmentsFile.
func completeCorpus(t *testing.T) []corpusSchema {
	t.Helper()
	var complete []corpusSchema
	var fragments []string
	for _, f := range corpusFiles(t) {
		name := rel(f)
		if strings.HasPrefix(name, "invalid/") || strings.HasPrefix(name, "rfc8610/") || notCDDL[name] != "" {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		s, err := cddl.Parse(name, src)
		require.NoError(t, err)
		res, err := cddl.Resolve(s)
		if err == nil {
			complete = append(complete, corpusSchema{name, res})
			continue
		}
		var list cddl.ErrorList
		require.ErrorAs(t, err, &list)
		var undefined []string
		for _, e := range list {
			n, ok := strings.CutPrefix(e.Msg, "undefined name ")
			require.True(t, ok, "%s: unexpected error %v", name, e)
			undefined = append(undefined, n)
		}
		sort.Strings(undefined)
		fragments = append(fragments, name+": "+strings.Join(slices.Compact(undefined), " "))
	}
	got := strings.Join(fragments, "\n") + "\n"
	if *update {
		require.NoError(t, os.WriteFile(fragmentsFile, []byte(got), 0o644))
	}
	want, err := os.ReadFile(fragmentsFile)
	require.NoError(t, err)
	require.Equal(t, string(want), got, "run go test ./codegen -update after checking the difference")
	return complete
}

// TestCorpusGenerates: every complete schema goes through every generator
// without an error, deterministically.
func TestCorpusGenerates(t *testing.T) {
	for _, cs := range completeCorpus(t) {
		for _, lang := range Langs {
			out, _, err := Generate(Lower(cs.res), Options{Lang: lang, Package: "x"})
			require.NoError(t, err, "%s %s", cs.name, lang)
			require.NotEmpty(t, out)
			again, _, err := Generate(Lower(cs.res), Options{Lang: lang, Package: "x"})
			require.NoError(t, err)
			require.Equal(t, string(out), string(again), "%s %s is not deterministic", cs.name, lang)
		}
	}
}

// vectorRoots names the root rule of vector sets whose root is not the
// schema's first rule (MANIFEST.md, section V).
var vectorRoots = map[string]string{
	"rfc8610/cut-none":         "extensible-map-example",
	"rfc8610/cut-explicit":     "extensible-map-example",
	"rfc8610/cut-colon":        "extensible-map-example",
	"rfc8610/unlimited-people": "unlimited-people",
	"rfc8610/personal-data":    "PersonalData",
	"rfc8610/regexp-nai":       "nai",
	"rfc8610/reputon-verbose":  "reputation-object",
	"rfc8610/reputon-compact":  "reputation-object",
	"rfc8610/jcr-fig2":         "root",
}

// jsonCannotTell lists vectors that JSON Schema cannot decide as CDDL does,
// with the reason. Everything else must come out as the corpus says.
var jsonCannotTell = map[string]string{
	"cddlc-tests/1/invalid-1.json":              intFloat,
	"cddlc-tests/10-rangetrue/invalid-5.json":   intFloat,
	"cddlc-tests/10a-rangefalse/invalid-6.json": intFloat,
	"cddlc-tests/15-default/invalid-2.json":     intFloat,
	"cddlc-tests/16-feature/invalid-1.json":     floatInt,
	"cddlc-tests/16-feature/invalid-2.json":     intFloat,
	"cddlc-tests/16a-feature/invalid-1.json":    floatInt,
	"cddlc-tests/16a-feature/invalid-2.json":    intFloat,
	"cddlc-tests/18-abnf/invalid-1.json":        ".abnf has no JSON Schema counterpart (warned)",
	"cddlc-tests/2-int/invalid-1.json":          intFloat,
	"cddlc-tests/2-uint/invalid-1.json":         intFloat,
	"cddlc-tests/20-plus-i/invalid-2.json":      intFloat,
	"cddlc-tests/3-bstr/invalid-1.json":         "JSON has no byte strings; cddlgen writes them as base64url text",
	"cddlc-tests/6-bigint/invalid-1.json":       intFloat,
	"cddlc-tests/6-bigint/invalid-2.json":       intFloat,
	"cddlc-tests/7-float16/invalid-1.json":      "JSON Schema cannot ask whether a number fits a float16",
}

const (
	intFloat = "JSON Schema's integer accepts integral floats such as 1.0, which CDDL's int rejects"
	floatInt = "JSON Schema's number accepts integers, which CDDL's float rejects"
)

// TestCorpusVectors: the JSON Schema generated from each vector set's
// schema accepts its valid instances and rejects its invalid ones.
func TestCorpusVectors(t *testing.T) {
	needCorpus(t)
	root := filepath.Join(corpusDir, "vectors")
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "schema.cddl" {
			dirs = append(dirs, filepath.Dir(path))
		}
		return err
	})
	require.NoError(t, err)
	require.NotEmpty(t, dirs)
	checked := 0
	for _, dir := range dirs {
		set, _ := filepath.Rel(root, dir)
		set = filepath.ToSlash(set)
		src, err := os.ReadFile(filepath.Join(dir, "schema.cddl"))
		require.NoError(t, err)
		s, err := cddl.Parse(set, src)
		require.NoError(t, err, set)
		res, err := cddl.Resolve(s)
		require.NoError(t, err, set)
		m := Lower(res)
		out, _, err := Generate(m, Options{Lang: LangJSONSchema})
		require.NoError(t, err, set)
		rootRule := m.Decls[0].Name
		if r, ok := vectorRoots[set]; ok {
			rootRule = r
		}
		c := jsonschema.NewCompiler()
		c.Draft = jsonschema.Draft2020
		require.NoError(t, c.AddResource("schema.json", bytes.NewReader(out)), set)
		sch, err := c.Compile("schema.json#/$defs/" + rootRule)
		require.NoError(t, err, "%s\n%s", set, out)
		files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		for _, f := range files {
			base := filepath.Base(f)
			key := set + "/" + base
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			var inst any
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.UseNumber()
			require.NoError(t, dec.Decode(&inst), key)
			verr := sch.Validate(inst)
			wantValid := strings.HasPrefix(base, "valid-") || (!strings.HasPrefix(base, "invalid-") && !strings.HasPrefix(base, "bad-"))
			if reason, ok := jsonCannotTell[key]; ok {
				t.Logf("%s: not decided by JSON Schema (%s)", key, reason)
				continue
			}
			checked++
			if wantValid {
				assert.NoError(t, verr, "%s should be valid\n%s", key, data)
			} else {
				assert.Error(t, verr, "%s should be invalid: %s", key, data)
			}
		}
	}
	t.Logf("%d instances checked", checked)
}

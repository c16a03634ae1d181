// Package gentest checks, in a package's tests, that the files its
// `//go:generate go run .../cmd/cddlgen` lines write are fresh: each line
// runs again with --check, and a stale file fails the test with a diff.
// It also compiles a generated JSON Schema, for tests that check what a
// wire sends against it.
package gentest

import (
	"bufio"
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/agentstream/agentstream/cmd/cddlgen/cli"
	"github.com/santhosh-tekuri/jsonschema/v5"
	"github.com/stretchr/testify/require"
)

// Fresh runs every `//go:generate go run PATH/cmd/cddlgen ...` line of
// docFile (in the test's package directory) with --check, and requires
// that there are want of them.
func Fresh(t *testing.T, docFile string, want int) {
	t.Helper()
	f, err := os.Open(docFile)
	require.NoError(t, err)
	defer f.Close()
	lines := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "//go:generate go run ")
		if !ok {
			continue
		}
		tool, args, _ := strings.Cut(rest, " ")
		if !strings.HasSuffix(tool, "cmd/cddlgen") {
			continue
		}
		lines++
		var stdout, stderr bytes.Buffer
		code := cli.Main(append([]string{"--check"}, strings.Fields(args)...), &stdout, &stderr)
		require.Equal(t, 0, code, "stale output; run go generate in this package\n%s%s", stderr.String(), stdout.String())
	}
	require.NoError(t, sc.Err())
	require.Equal(t, want, lines, "the go:generate lines of %s", docFile)
}

// Schema compiles the JSON Schema in file (the test's package directory).
func Schema(t *testing.T, file string) *jsonschema.Schema { return SchemaRule(t, file, "") }

// SchemaRule compiles the definition of one CDDL rule in the JSON Schema
// in file (its $defs member rule; the whole schema when rule is "").
func SchemaRule(t *testing.T, file, rule string) *jsonschema.Schema {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource(file, bytes.NewReader(b)))
	url := file
	if rule != "" {
		url += "#/$defs/" + rule
	}
	s, err := c.Compile(url)
	require.NoError(t, err, rule)
	return s
}

package jobs_test

import (
	"bufio"
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/agentstream/agentstream/codegen"
	"github.com/stretchr/testify/require"
)

// TestGeneratedFilesAreFresh runs every `//go:generate` line of doc.go
// with --check: a stale jobs_gen.go or schema.json fails with a diff.
func TestGeneratedFilesAreFresh(t *testing.T) {
	f, err := os.Open("doc.go")
	require.NoError(t, err)
	defer f.Close()
	lines := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		args, ok := strings.CutPrefix(sc.Text(), "//go:generate go run ../../cmd/cddlgen ")
		if !ok {
			continue
		}
		lines++
		var stdout, stderr bytes.Buffer
		code := codegen.Main(append([]string{"--check"}, strings.Fields(args)...), &stdout, &stderr)
		require.Equal(t, 0, code, "stale output; run go generate ./transport/jobs\n%s%s", stderr.String(), stdout.String())
	}
	require.NoError(t, sc.Err())
	require.Equal(t, 2, lines, "doc.go generates the Go types and the JSON Schema")
}

package codegen

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// CLIOptions is what the cddlgen command was asked to do.
type CLIOptions struct {
	Input  string // the schema file
	Output string // the output file; "" writes to stdout
	Check  bool   // compare Output with what would be generated instead of writing
	Quiet  bool   // do not print warnings
	Options
}

// RunCLI runs cddlgen and returns its exit status: 0 on success, 1 when the
// schema has errors or --check found a stale file, 2 on a usage or I/O error.
// Errors print as `file:line:col: message` with the source line and a caret.
func RunCLI(o CLIOptions, stdout, stderr io.Writer) int {
	src, err := os.ReadFile(o.Input)
	if err != nil {
		fmt.Fprintln(stderr, "cddlgen:", err)
		return 2
	}
	if o.Source == "" {
		o.Source = o.Input
	}
	out, warnings, err := Compile(o.Input, src, o.Options)
	if err != nil {
		fmt.Fprint(stderr, FormatError(err, src))
		return 1
	}
	if !o.Quiet {
		for _, w := range warnings {
			fmt.Fprintf(stderr, "%s:%s\n", o.Input, strings.TrimPrefix(w.String(), ""))
		}
	}
	if o.Check {
		if o.Output == "" {
			fmt.Fprintln(stderr, "cddlgen: --check needs --out")
			return 2
		}
		cur, err := os.ReadFile(o.Output)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintln(stderr, "cddlgen:", err)
			return 2
		}
		if bytes.Equal(cur, out) {
			return 0
		}
		fmt.Fprintf(stderr, "cddlgen: %s is stale; regenerate it from %s\n", o.Output, o.Input)
		fmt.Fprint(stdout, Diff(o.Output+" (on disk)", o.Output+" (generated)", cur, out))
		return 1
	}
	if o.Output == "" {
		_, err = stdout.Write(out)
	} else {
		err = os.WriteFile(o.Output, out, 0o644)
	}
	if err != nil {
		fmt.Fprintln(stderr, "cddlgen:", err)
		return 2
	}
	return 0
}

// Diff returns a unified-style diff of two texts: the common head and tail
// are kept as context and the differing middle is shown as removed and
// added lines. It is meant for people reading a --check failure.
func Diff(nameA, nameB string, a, b []byte) string {
	la := strings.SplitAfter(string(a), "\n")
	lb := strings.SplitAfter(string(b), "\n")
	pre := 0
	for pre < len(la) && pre < len(lb) && la[pre] == lb[pre] {
		pre++
	}
	suf := 0
	for suf < len(la)-pre && suf < len(lb)-pre && la[len(la)-1-suf] == lb[len(lb)-1-suf] {
		suf++
	}
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", nameA, nameB)
	ctx := 3
	start := max(pre-ctx, 0)
	endA, endB := len(la)-suf, len(lb)-suf
	tailA := min(endA+ctx, len(la))
	fmt.Fprintf(&out, "@@ -%d,%d +%d,%d @@\n", start+1, tailA-start, start+1, min(endB+ctx, len(lb))-start)
	line := func(prefix, s string) {
		out.WriteString(prefix + strings.TrimSuffix(s, "\n") + "\n")
	}
	for _, s := range la[start:pre] {
		line(" ", s)
	}
	for _, s := range la[pre:endA] {
		line("-", s)
	}
	for _, s := range lb[pre:endB] {
		line("+", s)
	}
	for _, s := range la[endA:tailA] {
		line(" ", s)
	}
	return out.String()
}

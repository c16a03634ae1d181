// Command testsummary reads `go test -json` on its input and prints what a
// person running the tests needs: a line per package (ok or FAIL, with
// the output of each failed test), then, last, the failures again, one
// line each (the test, its package, its first failing line), and one line
// naming every skipped test and why. It exits 1 when a test or a package
// failed, and, with AGENTSTREAM_REQUIRE_ALL=1, when any test was skipped.
// test.sh pipes the suite through it.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// event is one line of `go test -json` (test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

func main() {
	os.Exit(summarize(os.Stdin, os.Stdout, os.Getenv("AGENTSTREAM_REQUIRE_ALL") == "1"))
}

// summarize reads the events from in, writes the summary to out and
// returns the exit code.
func summarize(in io.Reader, out io.Writer, requireAll bool) int {
	outputs := map[string][]string{} // package/test -> its output lines
	var skips []string
	var failures []failure
	failed := false
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Fprintln(out, sc.Text()) // not an event (a build error): pass it on
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "output":
			if len(outputs[key]) < 2000 {
				outputs[key] = append(outputs[key], e.Output)
			}
		case "fail":
			failed = true
			if e.Test != "" {
				fmt.Fprintf(out, "--- FAIL: %s (%s)\n%s", e.Test, e.Package, strings.Join(outputs[key], ""))
			} else {
				fmt.Fprintf(out, "FAIL\t%s\t%.3fs\n%s", e.Package, e.Elapsed, packageOutput(outputs[key]))
			}
			failures = append(failures, failure{pkg: e.Package, test: e.Test, line: firstFailure(outputs[key])})
			delete(outputs, key)
		case "skip":
			if e.Test != "" {
				skips = append(skips, fmt.Sprintf("%s (%s): %s", e.Test, shortPkg(e.Package), reason(outputs[key])))
			}
			delete(outputs, key)
		case "pass":
			if e.Test == "" {
				fmt.Fprintf(out, "ok  \t%s\t%.3fs\n", e.Package, e.Elapsed)
			}
			delete(outputs, key)
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(out, "testsummary:", err)
		return 1
	}
	if failures = leaves(failures); len(failures) > 0 {
		fmt.Fprintf(out, "\nfailed (%d):\n", len(failures))
		for _, f := range failures {
			name := f.test
			if name == "" {
				name = "the package"
			}
			fmt.Fprintf(out, "  %s (%s): %s\n", name, shortPkg(f.pkg), f.line)
		}
	}
	sort.Strings(skips)
	if len(skips) == 0 {
		fmt.Fprintln(out, "skipped: none")
	} else {
		fmt.Fprintf(out, "skipped (%d): %s\n", len(skips), strings.Join(skips, "; "))
	}
	switch {
	case failed:
		return 1
	case requireAll && len(skips) > 0:
		fmt.Fprintln(out, "AGENTSTREAM_REQUIRE_ALL=1: a skipped test fails the run")
		return 1
	}
	return 0
}

// failure is a failed test, or a package that failed outside its tests.
type failure struct{ pkg, test, line string }

// leaves drops a failed test whose subtests failed (they say why), and a
// failed package whose tests did, keeping the order.
func leaves(fs []failure) []failure {
	var out []failure
	for _, f := range fs {
		covered := false
		for _, g := range fs {
			if g.pkg == f.pkg && g != f && (f.test == "" && g.test != "" || f.test != "" && strings.HasPrefix(g.test, f.test+"/")) {
				covered = true
			}
		}
		if !covered {
			out = append(out, f)
		}
	}
	return out
}

// firstFailure is the first line of a failure's output that says what
// went wrong: its first line that is not the framework's own, with the
// assertion's message when that line has none (testify's "file.go:N:"
// then "Error: ...").
func firstFailure(lines []string) string {
	var at string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		switch {
		case l == "", strings.HasPrefix(l, "=== "), strings.HasPrefix(l, "--- FAIL"), strings.HasPrefix(l, "--- PASS"),
			l == "FAIL", strings.HasPrefix(l, "FAIL\t"), strings.HasPrefix(l, "exit status"), strings.HasPrefix(l, "Error Trace:"):
			continue
		case at != "":
			if msg, ok := strings.CutPrefix(l, "Error:"); ok {
				return at + " " + strings.TrimSpace(msg)
			}
		case strings.HasSuffix(l, ":") && strings.Contains(l, ".go:"):
			at = l // the message follows
			continue
		default:
			return l
		}
	}
	if at != "" {
		return at
	}
	return "no output"
}

// reason is a skip's message: the last line of its output that is not
// the framework's own.
func reason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		if j := strings.Index(l, ": "); j >= 0 && strings.Contains(l[:j], ".go:") {
			l = l[j+2:]
		}
		return l
	}
	return "no reason given"
}

func shortPkg(p string) string {
	return strings.TrimPrefix(p, "github.com/agentstream/agentstream/")
}

// packageOutput is what a failed package printed outside its tests (a
// panic, a leak report, a build failure), without the per-test lines.
func packageOutput(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		if strings.HasPrefix(l, "FAIL") || strings.HasPrefix(l, "ok ") {
			continue
		}
		b.WriteString(l)
	}
	return b.String()
}

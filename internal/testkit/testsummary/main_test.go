package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const run = `{"Action":"run","Package":"p/a","Test":"TestOK"}
{"Action":"output","Package":"p/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"pass","Package":"p/a","Test":"TestOK"}
{"Action":"run","Package":"p/a","Test":"TestRedis"}
{"Action":"output","Package":"p/a","Test":"TestRedis","Output":"    x_test.go:12: redis-server not found (apt-get install redis-server)\n"}
{"Action":"output","Package":"p/a","Test":"TestRedis","Output":"--- SKIP: TestRedis (0.00s)\n"}
{"Action":"skip","Package":"p/a","Test":"TestRedis"}
{"Action":"pass","Package":"p/a","Elapsed":1.5}
`

func TestSummaryNamesSkips(t *testing.T) {
	var out bytes.Buffer
	require.Equal(t, 0, summarize(strings.NewReader(run), &out, false))
	require.Contains(t, out.String(), "ok  \tp/a\t1.500s")
	require.Contains(t, out.String(), "skipped (1): TestRedis (p/a): redis-server not found (apt-get install redis-server)")
	out.Reset()
	require.Equal(t, 1, summarize(strings.NewReader(run), &out, true), "AGENTSTREAM_REQUIRE_ALL=1 fails on a skip")
}

func TestSummaryShowsFailures(t *testing.T) {
	in := `{"Action":"output","Package":"p/b","Test":"TestBad","Output":"    b_test.go:3: boom\n"}
{"Action":"fail","Package":"p/b","Test":"TestBad"}
{"Action":"output","Package":"p/b","Output":"FAIL\n"}
{"Action":"fail","Package":"p/b","Elapsed":0.2}
`
	var out bytes.Buffer
	require.Equal(t, 1, summarize(strings.NewReader(in), &out, false))
	require.Contains(t, out.String(), "--- FAIL: TestBad (p/b)\n    b_test.go:3: boom")
	require.Contains(t, out.String(), "FAIL\tp/b")
	require.Contains(t, out.String(), "skipped: none")
}

// TestSummaryEndsWithTheFailures: the last lines name each failure (the
// innermost failed test, its package, its first failing line, testify's
// message included) before the skips; a package that failed outside its
// tests is named too.
func TestSummaryEndsWithTheFailures(t *testing.T) {
	in := `{"Action":"output","Package":"p/b","Test":"TestBad/sub","Output":"=== RUN   TestBad/sub\n"}
{"Action":"output","Package":"p/b","Test":"TestBad/sub","Output":"    b_test.go:3: \n"}
{"Action":"output","Package":"p/b","Test":"TestBad/sub","Output":"        \tError Trace:\t/x/b_test.go:3\n"}
{"Action":"output","Package":"p/b","Test":"TestBad/sub","Output":"        \tError:      \tNot equal: \n"}
{"Action":"fail","Package":"p/b","Test":"TestBad/sub"}
{"Action":"fail","Package":"p/b","Test":"TestBad"}
{"Action":"fail","Package":"p/b","Elapsed":0.2}
{"Action":"output","Package":"p/c","Output":"goleak: Errors on successful test run: found unexpected goroutines\n"}
{"Action":"fail","Package":"p/c","Elapsed":0.1}
` + run
	var out bytes.Buffer
	require.Equal(t, 1, summarize(strings.NewReader(in), &out, false))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Equal(t, []string{
		"failed (2):",
		"  TestBad/sub (p/b): b_test.go:3: Not equal:",
		"  the package (p/c): goleak: Errors on successful test run: found unexpected goroutines",
		"skipped (1): TestRedis (p/a): redis-server not found (apt-get install redis-server)",
	}, lines[len(lines)-4:])
}

package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentstream/agentstream/internal/testkit/redistest"
	"github.com/stretchr/testify/require"
)

// docsShrink makes a measurement's load small enough for the suite: the
// same commands and flags, fewer subscribers, events and threads, shorter
// waits. What is measured is in the docs; what is checked here is that
// every command still runs.
var docsShrink = []struct {
	re *regexp.Regexp
	to string
}{
	{regexp.MustCompile(`--subs \d+`), "--subs 20"},
	{regexp.MustCompile(`--count \S+`), "--count 40"},
	{regexp.MustCompile(`--threads \d+`), "--threads 10"},
	{regexp.MustCompile(`(^|\s)-threads \d+`), "${1}-threads 50"},
	{regexp.MustCompile(`(^|\s)-n \d+`), "${1}-n 20"},
	{regexp.MustCompile(`(^|\s)-watchers \d+`), "${1}-watchers 20"},
	{regexp.MustCompile(`(^|\s)-words \d+`), "${1}-words 50"},
	{regexp.MustCompile(`--duration \S+`), "--duration 1s"},
	{regexp.MustCompile(`--idle \d+`), "--idle 20"},
	{regexp.MustCompile(`--runs \d+`), "--runs 20"},
	{regexp.MustCompile(`--rounds \d+`), "--rounds 1"},
	{regexp.MustCompile(`--idle-wait \S+`), "--idle-wait 1s"},
	{regexp.MustCompile(`(^|\s)-count \d+`), "${1}-count 1 -benchtime 1x"},
}

// TestDocsCommands runs every shell command of the pages in docs/, block
// by block, from the checkout's root, each block in a shell of its own
// whose background processes are stopped at its end (as a person closes
// the terminals of one step before the next): the binary built for this
// test for `go run ./cmd/agentstream`, /tmp/agentstream and $BIN; free
// loopback ports for the pages' ports; a temporary directory for the
// files they write. Every command must succeed; streams (curl -N) must be
// answered with a success and are cut after 3 s. Two kinds of command are
// changed, and only in size or target: load runs and benchmarks are made
// small (docsShrink: fewer subscribers and events, one iteration) and run
// without CPU pinning (taskset), since the figures they print are not
// checked; `go generate` is listed (-n) rather than run, since it writes
// into the checkout, and the generator commands it runs write into the
// temporary directory and are compared with the files in the checkout.
// Without redis-server the blocks that start one are left out, unless
// AGENTSTREAM_REQUIRE_REDIS=1; so are those that start the reference
// LangGraph server when its npm packages are not installed.
func TestDocsCommands(t *testing.T) {
	bin, redisErr := commandTestSetup(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)

	_, statErr := os.Stat(filepath.Join(root, "tools", "langgraph-upstream", "node_modules", ".bin", "langgraphjs"))
	upstreamInstalled := statErr == nil
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	ran := 0
	for _, page := range pages {
		for i, block := range shBlocks(t, page) {
			name := fmt.Sprintf("%s#%d", filepath.Base(page), i+1)
			joined := strings.Join(block, "\n")
			if strings.Contains(joined, "redis-server") && redisErr != nil {
				t.Logf("left out: %s (redis-server is not installed)", name)
				continue
			}
			if strings.Contains(joined, "tools/langgraph-upstream") && !upstreamInstalled {
				t.Logf("left out: %s (the reference LangGraph server is not installed: npm ci --prefix tools/langgraph-upstream, as ./test.sh does)", name)
				continue
			}
			ran++
			t.Run(name, func(t *testing.T) {
				script := docsScript(t, root, bin, block)
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				defer cancel()
				run := exec.CommandContext(ctx, "bash", "-c", script)
				run.Dir = root
				killGroupOnCancel(run)
				got, err := run.CombinedOutput()
				require.NoError(t, err, "the block as a script:\n%s\noutput:\n%s", script, got)
				require.Contains(t, string(got), "BLOCK-OK", "the block as a script:\n%s", script)
			})
		}
	}
	require.GreaterOrEqual(t, ran, 8, "the docs' command blocks were found")
}

// killGroupOnCancel has cmd run in a process group of its own and kills
// the whole group when its context ends: a script killed on its timeout
// must not leave the servers it started in the background running (its
// EXIT trap does not run on SIGKILL).
func killGroupOnCancel(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
}

// portRef is a port in a command: after a colon or --port.
var portRef = regexp.MustCompile(`(:|--port )(\d+)\b`)

// replacePorts puts each port of a page's command that ports maps in its
// place, in one pass over whole numbers: replacing one port after
// another (in a map's random order) could rewrite the digits of a port
// already replaced (":7001" → ":20978", then ":2097" → ...).
func replacePorts(line string, ports map[string]string) string {
	return portRef.ReplaceAllStringFunc(line, func(m string) string {
		sub := portRef.FindStringSubmatch(m)
		if to, ok := ports[sub[2]]; ok {
			return sub[1] + to
		}
		return m
	})
}

// docsScript turns one block of a docs page into a bash script.
func docsScript(t *testing.T, root, bin string, block []string) string {
	t.Helper()
	dir := t.TempDir()
	// Every port a page names (2000-2999, and Redis's 6390) gets a free one.
	ports := map[string]string{"2024": freePort(t), "6390": freePort(t)}
	for _, line := range block {
		for _, m := range portRef.FindAllStringSubmatch(line, -1) {
			if n, err := strconv.Atoi(m[2]); err == nil && n >= 2000 && n <= 2999 && ports[m[2]] == "" {
				ports[m[2]] = freePort(t)
			}
		}
	}
	for _, p := range []string{"7001", "7002", "7003"} { // a Redis Cluster's nodes: their bus ports too
		_, ports[p], _ = net.SplitHostPort(redistest.ClusterAddr(t))
	}
	var s strings.Builder
	fmt.Fprintf(&s, `set -euo pipefail
cd %q
AS=%q
DIR=%q
R=200
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true' EXIT
wait_up() { for i in $(seq 100); do curl -sf "127.0.0.1:$1/healthz" >/dev/null && return 0; sleep 0.1; done; echo "port $1 never answered"; exit 1; }
wait_ok() { for i in $(seq 600); do curl -sf "127.0.0.1:$1/ok" >/dev/null && return 0; sleep 0.2; done; echo "the LangGraph server on $1 never answered"; exit 1; }
wait_redis() { for i in $(seq 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "redis on $1 never answered"; exit 1; }
`, root, bin, dir)
	taskset := regexp.MustCompile(`taskset -c \d+ `)
	secret := regexp.MustCompile(`(> |-file )secret\b`)
	addr := regexp.MustCompile(`--addr 127\.0\.0\.1:(\d+)`)
	redisPort := regexp.MustCompile(`redis-server --port (\d+)`)
	out := regexp.MustCompile(`--out (\S+)`)
	gens := 0
	var cmds []string // a line's commands joined by && one by one, as a person runs them
	for _, line := range block {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cmds = append(cmds, strings.Split(line, " && ")...)
	}
	for _, line := range cmds {
		line = taskset.ReplaceAllString(line, "")
		line = strings.ReplaceAll(line, "go run ./cmd/agentstream", `"$AS"`)
		line = strings.ReplaceAll(line, "/tmp/agentstream", `"$AS"`)
		line = strings.ReplaceAll(line, "$BIN", `"$AS"`)
		line = strings.ReplaceAll(line, "localhost:", "127.0.0.1:")
		line = secret.ReplaceAllString(line, `${1}"$$DIR/secret"`)
		line = replacePorts(line, ports)
		for _, sh := range docsShrink {
			line = sh.re.ReplaceAllString(line, sh.to)
		}
		switch {
		case strings.HasPrefix(line, "go generate"):
			line = strings.Replace(line, "go generate", "go generate -n", 1)
		case strings.Contains(line, "cmd/cddlgen") && !strings.Contains(line, "--check"):
			m := out.FindStringSubmatch(line)
			require.NotNil(t, m, line)
			gens++
			line = out.ReplaceAllLiteralString(line, fmt.Sprintf(`--out "$DIR/gen-%d"`, gens)) +
				fmt.Sprintf(` && cmp "$DIR/gen-%d" %s`, gens, m[1])
		case strings.HasPrefix(line, "curl -N"):
			line += ` -sSf --max-time 3 >"$DIR/stream.out" || [ $? -eq 28 ]`
		}
		if (strings.Contains(line, `"$AS" serve`) && !strings.Contains(line, "--print-config")) || strings.Contains(line, `"$AS" bare`) { // (--print-config prints and exits)
			cmd, after, _ := strings.Cut(line, "&") // the server in the background, in any case
			cmd = strings.TrimSpace(cmd)
			if !strings.Contains(cmd, "--addr") {
				cmd += " --addr 127.0.0.1:" + ports["2024"]
			}
			line = cmd + ` >>"$DIR/serve.log" 2>&1 &` + after
			fmt.Fprintln(&s, line)
			fmt.Fprintln(&s, "wait_up "+addr.FindStringSubmatch(line)[1])
			continue
		}
		if strings.Contains(line, "langgraphjs dev") {
			// The LangGraph server (edge mode's upstream): started in the
			// background, up in 15 to 60 s.
			port := regexp.MustCompile(`--port (\d+)`).FindStringSubmatch(line)
			require.NotNil(t, port, line)
			line = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(line), "&"))
			// Its own process group, so that all of it stops with the block.
			fmt.Fprintf(&s, "setsid env LANGGRAPH_CLI_NO_ANALYTICS=1 %s >\"$DIR/langgraph.log\" 2>&1 &\nLG_PID=$!\n", line)
			fmt.Fprintln(&s, `trap 'kill -- -$LG_PID 2>/dev/null || true; kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true' EXIT`)
			fmt.Fprintf(&s, "wait_ok %s\n", port[1])
			continue
		}
		if m := redisPort.FindStringSubmatch(line); m != nil {
			line = strings.Replace(line, "&", `--dir "$DIR" >/dev/null 2>&1 &`, 1)
			fmt.Fprintln(&s, line)
			fmt.Fprintln(&s, "wait_redis "+m[1])
			continue
		}
		fmt.Fprintln(&s, line)
	}
	fmt.Fprintln(&s, "echo BLOCK-OK")
	return s.String()
}

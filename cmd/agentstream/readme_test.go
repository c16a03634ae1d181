package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/internal/testkit/quietport"
	"github.com/stretchr/testify/require"
)

// readmeBlocks returns the lines of README.md's ```sh blocks, in order, a
// command continued with a backslash joined into one line.
func readmeBlocks(t *testing.T) [][]string {
	t.Helper()
	return shBlocks(t, filepath.Join("..", "..", "README.md"))
}

// shBlocks returns the lines of a Markdown file's ```sh blocks, in order,
// a command continued with a backslash joined into one line.
func shBlocks(t *testing.T, path string) [][]string {
	t.Helper()
	var blocks [][]string
	for _, block := range codeBlocks(t, path, "sh") {
		var cur []string
		for _, l := range strings.Split(strings.TrimSuffix(block, "\n"), "\n") {
			if n := len(cur); n > 0 && strings.HasSuffix(cur[n-1], "\\") {
				cur[n-1] = strings.TrimSuffix(cur[n-1], "\\") + strings.TrimSpace(l)
			} else {
				cur = append(cur, l)
			}
		}
		blocks = append(blocks, cur)
	}
	return blocks
}

// commandTestSetup readies a test that runs documented shell commands: it
// skips under -short or without bash and curl, fails without
// redis-server when AGENTSTREAM_REQUIRE_REDIS=1 (else redisErr says it is
// missing, for the test to leave its blocks out), and builds the binary
// the commands run for `go run ./cmd/agentstream`.
func commandTestSetup(t *testing.T) (bin string, redisErr error) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts servers")
	}
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	_, redisErr = exec.LookPath("redis-server")
	if redisErr != nil && os.Getenv("AGENTSTREAM_REQUIRE_REDIS") == "1" {
		t.Fatal("redis-server is not installed (apt-get install redis-server)")
	}
	bin = filepath.Join(t.TempDir(), "agentstream")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin, redisErr
}

func freePort(t *testing.T) string {
	t.Helper()
	// Below the ephemeral range: a server a script starts seconds later
	// (redis-server, a node) must not find it taken by a connection.
	p, err := quietport.Free(12000)
	require.NoError(t, err)
	return fmt.Sprint(p)
}

// TestReadmeCommands runs every shell command of README.md, as written,
// against servers this test starts: the binary for `go run
// ./cmd/agentstream`, free ports for the README's, a temporary directory
// for its files. Commands a person runs in another terminal (a server, a
// stream with curl -N) run in the background; every command must succeed
// and every command's answer be a success, and the streams must carry
// what the README says they print. `./test.sh` is not run (it is this
// suite), nor the JavaScript block (the SDK's conformance suite runs the
// same calls). Without redis-server the Redis block is left out, unless
// AGENTSTREAM_REQUIRE_REDIS=1.
func TestReadmeCommands(t *testing.T) {
	bin, redisErr := commandTestSetup(t)
	dir := t.TempDir()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)

	ports := map[string]string{"2024": freePort(t), "2097": freePort(t), "2101": freePort(t), "2102": freePort(t), "2103": freePort(t), "6390": freePort(t)}
	var script strings.Builder
	fmt.Fprintf(&script, `set -euo pipefail
cd %q
AS=%q
DIR=%q
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true' EXIT
wait_up() { for i in $(seq 100); do curl -sf "127.0.0.1:$1/healthz" >/dev/null && return 0; sleep 0.1; done; echo "port $1 never answered"; exit 1; }
wait_idle() { for i in $(seq 100); do s=$(curl -s -w ' %%{http_code}' "127.0.0.1:%s/threads/t1/state"); case "$s" in *' 401'|*' 404'|*'"next":[]'*) return 0;; esac; sleep 0.1; done; return 0; }
STREAMS=
pending_interrupt() { for i in $(seq 100); do id=$(curl -s "127.0.0.1:%s/threads/t1/state" | grep -o '"id":"int_[0-9a-f]*"' | head -1 | cut -d'"' -f4); [ -n "$id" ] && { echo "$id"; return 0; }; sleep 0.1; done; echo "no interrupt pending" >&2; exit 1; }
MAIN_PID=
`, dir, bin, dir, ports["2024"], ports["2024"])
	streams, answers := 0, 0
	placeholder := regexp.MustCompile(`"int_\.\.\."`)
	for _, block := range readmeBlocks(t) {
		if len(block) == 1 && block[0] == "./test.sh" {
			continue
		}
		if strings.Contains(strings.Join(block, "\n"), "redis-server") && redisErr != nil {
			t.Log("left out: the Redis block (redis-server is not installed)")
			continue
		}
		var waits []string
		for _, line := range block {
			for _, cmd := range strings.Split(line, " && ") {
				cmd = strings.ReplaceAll(cmd, "go run ./cmd/agentstream", `"$AS"`)
				cmd = strings.ReplaceAll(cmd, "/tmp/secret", `"$DIR/secret"`)
				cmd = strings.ReplaceAll(cmd, "localhost:2024", "127.0.0.1:2024")
				cmd = strings.ReplaceAll(cmd, "bindings/", root+"/bindings/") // the examples of the checkout
				cmd = replacePorts(cmd, ports)
				cmd = placeholder.ReplaceAllString(cmd, `"'"$(pending_interrupt)"'"`)
				background := strings.HasSuffix(cmd, "&")
				cmd = strings.TrimSpace(strings.TrimSuffix(cmd, "&"))
				switch {
				case strings.Contains(cmd, `"$AS" serve`):
					if !strings.Contains(cmd, "--addr") {
						// The README's server on its default address: one
						// at a time, as in one terminal.
						fmt.Fprintf(&script, "[ -n \"$MAIN_PID\" ] && kill $MAIN_PID && wait $MAIN_PID || true\n%s --addr 127.0.0.1:%s >\"$DIR/serve.log\" 2>&1 &\nMAIN_PID=$!\nwait_up %s\n", cmd, ports["2024"], ports["2024"])
					} else {
						addr := regexp.MustCompile(`--addr 127\.0\.0\.1:(\d+)`).FindStringSubmatch(cmd)
						require.NotNil(t, addr, cmd)
						fmt.Fprintf(&script, "%s >\"$DIR/node-%s.log\" 2>&1 &\n", cmd, addr[1])
						waits = append(waits, "wait_up "+addr[1])
					}
				case strings.HasPrefix(cmd, "curl -N"):
					streams++
					fmt.Fprintf(&script, "%s --max-time 4 -sS >\"$DIR/stream-%d.out\" || [ $? -eq 28 ] &\nSTREAMS=\"$STREAMS $!\"\n", cmd, streams)
				case strings.HasPrefix(cmd, "curl"):
					for _, w := range waits { // the servers this block started, up first
						fmt.Fprintln(&script, w)
					}
					waits = nil
					answers++
					fmt.Fprintf(&script, "%s -sS >\"$DIR/answer-%d.out\"\n", cmd, answers)
				case background && strings.HasPrefix(cmd, "redis-server"):
					port := regexp.MustCompile(`--port (\d+)`).FindStringSubmatch(cmd)
					require.NotNil(t, port, cmd)
					fmt.Fprintf(&script, "%s >/dev/null 2>&1 &\nfor i in $(seq 100); do redis-cli -p %s ping >/dev/null 2>&1 && break; sleep 0.1; done\n", cmd, port[1])
				case background && strings.Contains(cmd, "examples/worker"):
					// A worker: wait until the server has it, rather than
					// the README's sleep.
					fmt.Fprintf(&script, "%s >\"$DIR/worker.log\" 2>&1 &\nuntil curl -s 127.0.0.1:%s/metrics | grep -q '^agentstream_workers [1-9]'; do sleep 0.1; done\n", cmd, ports["2024"])
				case background:
					fmt.Fprintf(&script, "%s >/dev/null 2>&1 &\n", cmd)
				default:
					fmt.Fprintf(&script, "%s\n", cmd)
				}
			}
		}
		for _, w := range waits {
			fmt.Fprintln(&script, w)
		}
		// A person reads between two steps: the run of one has ended
		// before the next starts one.
		fmt.Fprintln(&script, "wait_idle")
	}
	fmt.Fprintln(&script, "wait $STREAMS\necho README-OK")
	t.Logf("the README as a script:\n%s", script.String())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, "bash", "-c", script.String())
	killGroupOnCancel(run)
	run.Dir = dir
	got, err := run.CombinedOutput()
	require.NoError(t, err, "%s", got)
	require.Contains(t, string(got), "README-OK")

	require.GreaterOrEqual(t, answers, 3, "the quick start's commands were found")
	for i := 1; i <= answers; i++ {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("answer-%d.out", i)))
		require.NoError(t, err)
		switch {
		case strings.Contains(string(b), `"seqs":[`): // a producer's batch is answered with its seqs
		case strings.HasPrefix(string(b), `{"runId":"run-`): // an Instance AI chat
		case strings.HasPrefix(string(b), `{"object":"chat.completion"`): // an OpenAI chat completion
			require.Contains(t, string(b), `"content":"hello from the openai wire"`, "the completion %d says the input back: %s", i, b)
			require.Contains(t, string(b), `"finish_reason":"stop"`, "%s", b)
		case strings.HasPrefix(string(b), `data: {"type":"stream_start"}`): // the minimal token stream
			require.Contains(t, string(b), `data: {"type":"stream_end"}`, "the minimal stream %d ran to its end: %s", i, b)
			require.Contains(t, string(b), `"type":"token"`, "the minimal stream %d has tokens: %s", i, b)
		default:
			require.Contains(t, string(b), `"type":"success"`, "command %d answered %s", i, b)
		}
	}
	require.Equal(t, 4, streams, "the quick start's stream, the Instance AI and job ones, and the authenticated one")
	quick, err := os.ReadFile(filepath.Join(dir, "stream-1.out"))
	require.NoError(t, err)
	for _, want := range []string{"event: messages", `"text":"Hello "`, `"event":"completed"`} {
		require.Contains(t, string(quick), want, "the quick start's stream prints what the README says")
	}
	ia, err := os.ReadFile(filepath.Join(dir, "stream-2.out"))
	require.NoError(t, err)
	for _, want := range []string{`data: {"type":"run-start"`, `"type":"text-delta"`, `"type":"confirmation-request"`} {
		require.Contains(t, string(ia), want, "the Instance AI stream prints the chat's run")
	}
	job, err := os.ReadFile(filepath.Join(dir, "stream-3.out"))
	require.NoError(t, err)
	for _, want := range []string{"event: snapshot\nid: 0\n", "event: append\nid: 1\ndata: {\"seq\":1,\"ts\":1745701201234"} {
		require.Contains(t, string(job), want, "the job stream prints the envelope")
	}
	authed, err := os.ReadFile(filepath.Join(dir, "stream-4.out"))
	require.NoError(t, err)
	require.NotContains(t, string(authed), `"type":"error"`, "the token is accepted: %s", authed)
}

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentstream/agentstream/client"
	"github.com/agentstream/agentstream/protocol"
)

// codeBlocks returns the ```LANG blocks of a Markdown file, in order.
func codeBlocks(t *testing.T, path, lang string) []string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var blocks []string
	var cur strings.Builder
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case !in && l == "```"+lang:
			in = true
			cur.Reset()
		case in && strings.HasPrefix(l, "```"):
			in = false
			blocks = append(blocks, cur.String())
		case in:
			cur.WriteString(l + "\n")
		}
	}
	require.NoError(t, sc.Err())
	return blocks
}

// readmePort is a port of the README's examples (2024, 2103, ...).
var readmePort = regexp.MustCompile(`(127\.0\.0\.1|localhost):2\d{3}\b`)

// TestREADMESnippets runs the README's JavaScript and Go examples as
// written, against a server this test starts (its address in place of the
// examples'): the SDK's stream prints the echoed text, the openai
// package's stream prints it, and the embedding snippet, wrapped in a
// main function, subscribes, starts a run and reads its first event.
func TestREADMESnippets(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers and builds programs")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	readme := filepath.Join(root, "README.md")
	ctx, cancel := context.WithCancel(context.Background())
	addr, done := startServe(t, ctx, io.Discard, "--profiles", "openai")
	defer func() { cancel(); <-done }()

	js := codeBlocks(t, readme, "js")
	require.Len(t, js, 2)
	nodeDir := filepath.Join(root, "tools", "node")
	if _, err := os.Stat(filepath.Join(nodeDir, "node_modules", "openai")); err != nil {
		if os.Getenv("AGENTSTREAM_REQUIRE_TOOLS") == "1" {
			t.Fatal("tools/node's packages are not installed (npm ci --prefix tools/node)")
		}
		t.Skip("tools/node's packages are not installed (npm ci --prefix tools/node)")
	}
	for i, want := range []string{"Hi!", "hi"} {
		// In tools/node, where the packages are; a name of its own, gone after.
		f, err := os.CreateTemp(nodeDir, ".readme-snippet-*.mjs")
		require.NoError(t, err)
		t.Cleanup(func() { os.Remove(f.Name()) })
		_, err = f.WriteString(readmePort.ReplaceAllString(js[i], addr))
		require.NoError(t, err)
		require.NoError(t, f.Close())
		rctx, rcancel := context.WithTimeout(context.Background(), 60*time.Second)
		out, err := exec.CommandContext(rctx, "node", f.Name()).CombinedOutput()
		rcancel()
		require.NoError(t, err, "README js block %d:\n%s\n%s", i+1, js[i], out)
		require.Contains(t, string(out), want, "README js block %d", i+1)
		t.Logf("js block %d: %s", i+1, out)
	}

	golang := codeBlocks(t, readme, "go")
	require.Len(t, golang, 1)
	dir, err := os.MkdirTemp(root, "_readme_snippet_") // in the module, so that it imports it
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	src := `package main

import (
	"context"
	"fmt"
	"net/http"

	"github.com/agentstream/agentstream/assistants"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/agentstream/agentstream/transport/inproc"
)

func main() {
	ctx := context.Background()
	var myAssistant server.Assistant = server.AssistantFunc(func(context.Context, *server.RunContext) error { return nil })
` + readmePort.ReplaceAllString(golang[0], "127.0.0.1:0") + `	fmt.Println("first event:", e.Method)
}
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644))
	rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer rcancel()
	cmd := exec.CommandContext(rctx, "go", "run", "./"+filepath.Base(dir))
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the README's Go block in a main function:\n%s\n%s", src, out)
	require.Regexp(t, `first event: \S+`, string(out), fmt.Sprintf("%s", out))
	t.Logf("the Go block: %s", out)
}

// docsGoPreamble is what a Go block of docs/ is compiled in: the
// packages the pages use, and a function giving the names the blocks take
// as known (ctx, input).
const docsGoPreamble = `package main

import (
	"context"
	"fmt"

	"github.com/agentstream/agentstream/assistants"
	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/client"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/redisstore"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport/inproc"
)

var (
	_ = fmt.Sprint
	_ = assistants.Register
	_ channels.Filter
	_ = client.Dial
	_ protocol.Channel
	_ = redisstore.New
	_ = server.New
	_ = inproc.Connect
)

func main() {}

func snippet(ctx context.Context, input any) {
`

// declared finds the names a block declares with := at its top level (to
// use them once, as a reader's program would go on to).
var declared = regexp.MustCompile(`(?m)^([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*:=`)

// TestDocsSnippetsCompile: every Go block of docs/*.md compiles as written
// (in a function that has ctx and input), against this checkout's
// packages; every JavaScript block is valid ES module syntax (node
// --check) and every Python block valid Python (py_compile). The README's
// blocks are run by TestREADMESnippets.
func TestDocsSnippetsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds programs")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	n := 0
	for _, page := range pages {
		for i, block := range codeBlocks(t, page, "go") {
			n++
			name := fmt.Sprintf("%s#go%d", filepath.Base(page), i+1)
			var uses strings.Builder
			for _, m := range declared.FindAllStringSubmatch(block, -1) {
				for _, id := range strings.Split(m[1], ",") {
					if id = strings.TrimSpace(id); id != "_" && id != "" {
						fmt.Fprintf(&uses, "\t_ = %s\n", id)
					}
				}
			}
			dir, err := os.MkdirTemp(root, "_docs_snippet_")
			require.NoError(t, err)
			t.Cleanup(func() { os.RemoveAll(dir) })
			src := docsGoPreamble + block + uses.String() + "}\n"
			require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644))
			cmd := exec.Command("go", "vet", "./"+filepath.Base(dir))
			cmd.Dir = root
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s does not compile as written:\n%s\n%s", name, block, out)
		}
		for i, block := range codeBlocks(t, page, "js") {
			n++
			f := filepath.Join(t.TempDir(), "snippet.mjs")
			require.NoError(t, os.WriteFile(f, []byte(block), 0o644))
			out, err := exec.Command("node", "--check", f).CombinedOutput()
			require.NoError(t, err, "%s#js%d:\n%s\n%s", filepath.Base(page), i+1, block, out)
		}
		for i, block := range codeBlocks(t, page, "python") {
			n++
			f := filepath.Join(t.TempDir(), "snippet.py")
			require.NoError(t, os.WriteFile(f, []byte(block), 0o644))
			out, err := exec.Command("python3", "-m", "py_compile", f).CombinedOutput()
			require.NoError(t, err, "%s#python%d:\n%s\n%s", filepath.Base(page), i+1, block, out)
		}
	}
	require.Positive(t, n)
	t.Logf("%d blocks checked", n)
}

// TestDocsWorkerSnippetsRun runs docs/workers.md's Python and Node
// workers as written (the server's address in place of theirs) and a run
// of their assistant through the Go client: its streamed message, its
// interrupt answered, its values.
func TestDocsWorkerSnippetsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers and workers")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	page := filepath.Join(root, "docs", "workers.md")
	for _, lang := range []string{"python", "js"} {
		t.Run(lang, func(t *testing.T) {
			// A server each: a worker killed stays the assistant's until
			// its lease ends.
			ctx, cancel := context.WithCancel(context.Background())
			addr, done := startServe(t, ctx, io.Discard)
			defer func() { cancel(); <-done }()
			base := "http://" + addr
			blocks := codeBlocks(t, page, lang)
			require.NotEmpty(t, blocks)
			src := readmePort.ReplaceAllString(blocks[0], addr)
			var cmd *exec.Cmd
			if lang == "python" {
				f := filepath.Join(t.TempDir(), "worker.py")
				require.NoError(t, os.WriteFile(f, []byte(src), 0o644))
				cmd = exec.Command("python3", f)
				cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "bindings", "python"))
			} else {
				// In the package's directory: it imports itself by name.
				f, err := os.CreateTemp(filepath.Join(root, "bindings", "ts"), ".docs-worker-*.mjs")
				require.NoError(t, err)
				t.Cleanup(func() { os.Remove(f.Name()) })
				_, err = f.WriteString(src)
				require.NoError(t, err)
				require.NoError(t, f.Close())
				cmd = exec.Command("node", f.Name())
			}
			var out syncBuffer
			cmd.Stdout, cmd.Stderr = &out, &out
			require.NoError(t, cmd.Start())
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

			c, err := client.Dial(ctx, base, client.Options{})
			require.NoError(t, err)
			defer c.Close()
			th := c.Thread("docs-worker-" + lang)
			sub, err := th.Subscribe(ctx, client.Filter{Channels: []string{"messages", "lifecycle", "input"}})
			require.NoError(t, err)
			var started *client.Started
			require.Eventually(t, func() bool { // once the worker serves shout
				started, err = th.Run.Start(ctx, protocol.RunStartParams{AssistantID: "shout", Input: map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hello there"}}}})
				return err == nil
			}, 30*time.Second, 100*time.Millisecond, "the worker never served shout: %v\n%s", err, &out)
			rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
			defer rcancel()
			text := ""
			for {
				e, err := sub.Next(rctx)
				require.NoError(t, err, "%s", &out)
				text += e.TextDelta()
				if req, ok := e.Payload.(*protocol.ServerEventInputRequested); ok {
					require.NoError(t, th.Input.RespondOne(rctx, []string{}, req.Params.Data.InterruptID, "yes"))
				}
				if end := e.RunEndAfter(started.AppliedThroughSeq); end != "" {
					require.Equal(t, protocol.AgentStatusCompleted, end, "%s", &out)
					break
				}
			}
			require.Equal(t, "HELLOTHERE", strings.ReplaceAll(text, " ", ""), "the streamed message")
			st, err := th.State.Get(rctx, protocol.StateGetParams{})
			require.NoError(t, err)
			require.Equal(t, "yes", st.Values["answer"], "the values it set")
		})
	}
}

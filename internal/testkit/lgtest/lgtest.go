// Package lgtest starts, for tests, the LangGraph JavaScript server that
// edge mode is put in front of: `langgraphjs dev` from
// tools/langgraph-upstream (pinned in its package-lock.json, installed by
// test.sh with npm ci) serving the graphs of its graph.mjs on a free
// loopback port.
package lgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/agentstream/agentstream/internal/testkit/quietport"
)

// Upstream is a running LangGraph server.
type Upstream struct {
	URL  string
	cmd  *exec.Cmd
	log  string
	port string
	dir  string // tools/langgraph-upstream: the CLI and node_modules
	// proj is the server's own project: tools/langgraph-upstream's
	// langgraph.json and graphs, its node_modules linked, so that what
	// the server keeps on disk (.langgraph_api) is its own, not shared
	// with the other tests' servers nor left for the next run.
	proj string
}

// Start starts the server and waits until it answers (it takes 15 to 60
// s here); the test's cleanup kills it (Kill), with its process group. Without node or the installed tools the test is
// skipped, or fails when AGENTSTREAM_REQUIRE_TOOLS=1 (as test.sh sets);
// under -short it is skipped.
func Start(t testing.TB) *Upstream {
	t.Helper()
	if testing.Short() {
		t.Skip("starts the LangGraph JavaScript server")
	}
	dir, err := toolsDir()
	_, nodeErr := exec.LookPath("node")
	_, cliErr := os.Stat(filepath.Join(dir, "node_modules/.bin/langgraphjs"))
	if err != nil || nodeErr != nil || cliErr != nil {
		if os.Getenv("AGENTSTREAM_REQUIRE_TOOLS") == "1" {
			t.Fatal("node and tools/langgraph-upstream (npm ci --prefix tools/langgraph-upstream) are needed")
		}
		t.Skip("node or tools/langgraph-upstream is not installed (npm ci --prefix tools/langgraph-upstream)")
	}
	logDir := t.TempDir()
	proj := t.TempDir()
	for _, f := range []string{"langgraph.json", "graph.mjs", "package.json"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proj, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(dir, "node_modules"), filepath.Join(proj, "node_modules")); err != nil {
		t.Fatal(err)
	}
	for attempt := 1; ; attempt++ {
		p, err := quietport.Free(12000)
		if err != nil {
			t.Fatal(err)
		}
		port := strconv.Itoa(p) // below the ephemeral range: the server takes seconds to listen
		u := &Upstream{URL: "http://127.0.0.1:" + port, port: port, dir: dir, proj: proj, log: filepath.Join(logDir, fmt.Sprintf("langgraph-%d.log", attempt))}
		err = u.Restart()
		if err == nil {
			t.Cleanup(u.Kill) // the server, its watcher and its workers
			return u
		}
		if !errors.Is(err, errPortTaken) || attempt == 3 {
			t.Fatal(err)
		}
	}
}

// errPortTaken is Restart's error when the port was taken before the
// server could listen on it.
var errPortTaken = errors.New("the port was taken")

// Restart starts the server again on the same port (after Kill); it
// comes back with no threads (what it kept on disk is removed first).
func (u *Upstream) Restart() error {
	if err := os.RemoveAll(filepath.Join(u.proj, ".langgraph_api")); err != nil {
		return err
	}
	out, err := os.OpenFile(u.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(u.dir, "node_modules/.bin/langgraphjs"), "dev", "--port", u.port, "--host", "127.0.0.1", "--no-browser", "--config", "langgraph.json")
	cmd.Dir = u.proj
	cmd.Env = append(os.Environ(), "LANGGRAPH_CLI_NO_ANALYTICS=1")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its workers go with it
	if err := cmd.Start(); err != nil {
		out.Close()
		return err
	}
	out.Close()
	u.cmd = cmd
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if b, _ := os.ReadFile(u.log); bytes.Contains(b, []byte("EADDRINUSE")) {
			u.Kill()
			return fmt.Errorf("langgraphjs dev on %s: %w:\n%s", u.URL, errPortTaken, b)
		}
		if resp, err := http.Get(u.URL + "/ok"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	b, _ := os.ReadFile(u.log)
	u.Kill()
	return fmt.Errorf("langgraphjs dev did not answer on %s within 120 s:\n%s", u.URL, b)
}

// Kill stops the server at once (SIGKILL to its process group).
func (u *Upstream) Kill() {
	if u.cmd == nil || u.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-u.cmd.Process.Pid, syscall.SIGKILL)
	_ = u.cmd.Wait()
	u.cmd = nil
}

// Log is what the server printed.
func (u *Upstream) Log() string {
	b, _ := os.ReadFile(u.log)
	return string(b)
}

// toolsDir is tools/langgraph-upstream of the module.
func toolsDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "tools", "langgraph-upstream"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}

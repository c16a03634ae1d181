package main

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestContainerImage builds deploy/Containerfile with podman (or docker)
// around a static build of this checkout, and checks the image: the
// binary alone on scratch, run as a user that is not root, /data a
// volume, port 2024, the entrypoint and command serve --data-dir /data;
// the binary in the image's filesystem runs. Then it runs the image and
// probes it (/healthz from outside, `agentstream probe` inside) where the
// machine lets a container runtime start one (a sandbox that refuses its
// rlimits cannot: said in the log). Without podman or docker it skips,
// naming them.
func TestContainerImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an image")
	}
	tool := ""
	for _, c := range []string{"podman", "docker"} {
		if p, err := exec.LookPath(c); err == nil && exec.Command(p, "info").Run() == nil {
			tool = p
			break
		}
	}
	if tool == "" {
		t.Skip("no podman or docker that answers (apt-get install podman)")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	ctx := t.TempDir()
	containerfile, err := os.ReadFile(filepath.Join(root, "deploy", "Containerfile"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(ctx, "Containerfile"), containerfile, 0o644))
	build := exec.Command("go", "build", "-o", filepath.Join(ctx, "agentstream"), ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	tag := fmt.Sprintf("localhost/agentstream-test:%d", time.Now().UnixNano())
	out, err = exec.Command(tool, "build", "--format", "docker", "-q", "-t", tag, "-f", filepath.Join(ctx, "Containerfile"), ctx).CombinedOutput()
	if strings.Contains(tool, "docker") { // docker build has no --format
		out, err = exec.Command(tool, "build", "-q", "-t", tag, "-f", filepath.Join(ctx, "Containerfile"), ctx).CombinedOutput()
	}
	require.NoError(t, err, "%s", out)
	t.Cleanup(func() { _ = exec.Command(tool, "rmi", "-f", tag).Run() })

	cfg, err := exec.Command(tool, "image", "inspect", tag, "--format",
		"{{.Config.User}}|{{json .Config.Entrypoint}}|{{json .Config.Cmd}}|{{json .Config.Volumes}}|{{json .Config.ExposedPorts}}|{{json .Config.Healthcheck}}").Output()
	require.NoError(t, err)
	parts := strings.Split(strings.TrimSpace(string(cfg)), "|")
	require.Len(t, parts, 6, "%s", cfg)
	require.Equal(t, "65532:65532", parts[0], "not root")
	require.Equal(t, `["/agentstream"]`, parts[1])
	require.Equal(t, `["serve","--data-dir","/data"]`, parts[2])
	require.Equal(t, `{"/data":{}}`, parts[3])
	require.Equal(t, `{"2024/tcp":{}}`, parts[4])
	require.Contains(t, parts[5], "/agentstream", "the health check probes with the binary")

	if strings.HasSuffix(tool, "podman") {
		mnt, err := exec.Command(tool, "image", "mount", tag).Output()
		require.NoError(t, err)
		dir := strings.TrimSpace(string(mnt))
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Len(t, entries, 1, "the binary alone")
		v, err := exec.Command(filepath.Join(dir, "agentstream"), "version").Output()
		require.NoError(t, err)
		require.Contains(t, string(v), "agentstream ")
		_ = exec.Command(tool, "image", "unmount", tag).Run()
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	name := strings.ReplaceAll(strings.TrimPrefix(tag, "localhost/"), ":", "-")
	out, err = exec.Command(tool, "run", "-d", "--name", name, "-p", fmt.Sprintf("127.0.0.1:%d:2024", port), tag, "serve", "--data-dir", "/data", "--insecure").CombinedOutput()
	t.Cleanup(func() { _ = exec.Command(tool, "rm", "-f", name).Run() })
	if err != nil && strings.Contains(string(out), "rlimit") && strings.Contains(string(out), "permission denied") {
		t.Logf("not run: this machine refuses the container runtime's rlimits (%s)", strings.TrimSpace(string(out)))
		return
	}
	require.NoError(t, err, "%s", out)
	require.Eventually(t, func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, 20*time.Second, 100*time.Millisecond)
	var stderr bytes.Buffer
	probe := exec.Command(tool, "exec", name, "/agentstream", "probe")
	probe.Stderr = &stderr
	require.NoError(t, probe.Run(), stderr.String())
}

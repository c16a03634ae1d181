package langgraph_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentstream/agentstream/diskstore"
	"github.com/agentstream/agentstream/internal/testkit/redistest"
	"github.com/agentstream/agentstream/redisstore"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// diskNode is a node on the disk engine in dir (a second one on the same
// dir, after the first stopped, is the restart).
func diskNode(t *testing.T, dir string) *node {
	t.Helper()
	eng, err := diskstore.Open(diskstore.Options{Dir: dir})
	require.NoError(t, err)
	return start(t, server.Config{Engine: eng}, transport.Options{})
}

// redisNode is a node on the Redis engine of rs (several share it).
func redisNode(t *testing.T, rs *redistest.Server) *node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	eng, err := redisstore.New(ctx, redisstore.Options{URL: rs.URL(), TTL: time.Hour, Cluster: redisstore.ClusterOptions{LeaseTTL: time.Second}})
	require.NoError(t, err)
	return start(t, server.Config{Engine: eng}, transport.Options{})
}

// onEachEngine runs fn, as a subtest, on a node of each engine: memory,
// disk, Redis.
func onEachEngine(t *testing.T, fn func(t *testing.T, n *node)) {
	t.Run("memory", func(t *testing.T) { fn(t, start(t, server.Config{}, transport.Options{})) })
	t.Run("disk", func(t *testing.T) { fn(t, diskNode(t, t.TempDir())) })
	t.Run("redis", func(t *testing.T) { fn(t, redisNode(t, redistest.Start(t))) })
}

// onEachEngineWith is onEachEngine with the servers' config cfg.
func onEachEngineWith(t *testing.T, cfg server.Config, fn func(t *testing.T, n *node)) {
	t.Run("memory", func(t *testing.T) { fn(t, start(t, cfg, transport.Options{})) })
	t.Run("disk", func(t *testing.T) {
		eng, err := diskstore.Open(diskstore.Options{Dir: t.TempDir()})
		require.NoError(t, err)
		c := cfg
		c.Engine = eng
		fn(t, start(t, c, transport.Options{}))
	})
	t.Run("redis", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		eng, err := redisstore.New(ctx, redisstore.Options{URL: redistest.Start(t).URL(), TTL: time.Hour, Cluster: redisstore.ClusterOptions{LeaseTTL: time.Second}})
		require.NoError(t, err)
		c := cfg
		c.Engine = eng
		fn(t, start(t, c, transport.Options{}))
	})
}

// sdkSteps runs a tools/node script of the official SDK against url and
// decodes what it prints: its steps' answers.
func sdkSteps(t *testing.T, nodeBin, script, url string, timeout time.Duration) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin, script, url)
	cmd.Dir = filepath.Dir(script)
	out, err := cmd.Output()
	var stderr string
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = string(ee.Stderr)
	}
	require.NoError(t, err, "%s", stderr)
	var steps map[string]any
	require.NoError(t, json.Unmarshal(out, &steps), "%s", out)
	return steps
}

// matchOnEachEngine runs the SDK script on each engine and compares its
// steps' answers with want (the reference server's), step by step, but
// for those chosen answers instead.
func matchOnEachEngine(t *testing.T, nodeBin, script string, timeout time.Duration, want, chosen map[string]any) {
	onEachEngine(t, func(t *testing.T, n *node) {
		got := sdkSteps(t, nodeBin, script, n.url, timeout)
		for step, w := range want {
			if c, ok := chosen[step]; ok {
				w = c
			}
			assert.Equal(t, w, got[step], "step %q: the reference server's answer (or the chosen one), then agentstream's", step)
		}
		require.Len(t, got, len(want))
	})
}

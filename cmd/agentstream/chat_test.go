package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentstream/agentstream/internal/testkit/sdktest"
)

// TestAChatPageOnAnotherPortWorksWithTheDefaults: a chat page on
// useStream, served from another localhost port than the server's, talks
// to a server started with its default flags (but the Platform profile):
// it lists threads by their first message, shows the question of a run
// that goes on from the thread's state alone and, rejoining it, the text
// so far, and shows the interrupt a reopened thread waits on
// (tools/node/chat-e2e.mjs, in Chromium).
func TestAChatPageOnAnotherPortWorksWithTheDefaults(t *testing.T) {
	nodeBin, script := sdktest.Script(t, "chat-e2e.mjs")
	chromium := sdktest.Chromium(t, script)
	url, _ := startProcessNode(t, "--profiles", "langgraph")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin, script, url)
	cmd.Dir = filepath.Dir(script)
	cmd.Env = append(os.Environ(), "CHROMIUM="+chromium)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "reopened at its interrupt, the question it waits on shows")
}

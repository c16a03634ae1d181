package openai_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/stretchr/testify/require"
)

// TestOfficialSDK drives the official openai SDK for Node
// (tools/node/openai-sdk.mjs) against a server with API keys: a streamed
// chat completion of echo equals the input; demo's tool call streams to
// complete JSON and its output resumes the run; Responses streaming of
// demo with reasoning ends incomplete; a dropped stream resumed with
// starting_after yields every event once; previous_response_id answers
// the call; cancel; a wrong key is the SDK's AuthenticationError.
func TestOfficialSDK(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	script, _ := filepath.Abs("../../tools/node/openai-sdk.mjs")
	if _, err := os.Stat("../../tools/node/node_modules/openai/package.json"); err != nil {
		t.Skip("the openai npm package is not installed (npm ci --prefix tools/node)")
	}
	a, err := auth.New(context.Background(), auth.Config{APIKeys: map[string]auth.Principal{"sk-alice": {Subject: "alice"}}})
	require.NoError(t, err)
	t.Cleanup(a.Close)
	ts := start(t, server.Config{}, transport.Options{Auth: a})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Env = append(os.Environ(), "BASE_URL="+ts.URL+"/v1", "API_KEY=sk-alice", "SLOW_MODEL=slow")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, 8, strings.Count(string(out), "ok "), "%s", out)
	t.Logf("%s", out)
}

package langgraph_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/stretchr/testify/require"
)

// TestMetadataAndStateAreBounded: a thread's metadata cannot grow past
// --max-thread-metadata-bytes, by creation or by PATCH after PATCH, nor
// its values past --max-state-bytes by state updates; each refusal is
// 413 and counted, and what was kept is unchanged.
func TestMetadataAndStateAreBounded(t *testing.T) {
	n := start(t, server.Config{MaxThreadMetadataBytes: 1000, MaxStateBytes: 2000}, transport.Options{})
	pad := func(k int) string { return strings.Repeat("m", k) }
	require.Equal(t, 413, call(t, "POST", n.url+"/threads", `{"metadata": {"a": "`+pad(1200)+`"}}`, "", nil))
	var th struct {
		ThreadID string         `json:"thread_id"`
		Metadata map[string]any `json:"metadata"`
	}
	require.Equal(t, 200, call(t, "POST", n.url+"/threads", `{"metadata": {"graph_id": "echo"}}`, "", &th))
	require.Equal(t, 200, call(t, "PATCH", n.url+"/threads/"+th.ThreadID, `{"metadata": {"a": "`+pad(600)+`"}}`, "", nil))
	require.Equal(t, 413, call(t, "PATCH", n.url+"/threads/"+th.ThreadID, `{"metadata": {"b": "`+pad(600)+`"}}`, "", nil), "the second PATCH would pass the bound")
	require.Equal(t, 200, call(t, "GET", n.url+"/threads/"+th.ThreadID, "", "", &th))
	require.NotContains(t, th.Metadata, "b", "the refused change is not kept")
	require.Equal(t, uint64(2), n.srv.Metrics().Refused[server.LimitThreadMetadata])

	state := n.url + "/threads/" + th.ThreadID + "/state"
	require.Equal(t, 200, call(t, "POST", state, `{"values": {"x": "`+pad(1000)+`"}}`, "", nil))
	require.Equal(t, 413, call(t, "POST", state, `{"values": {"y": "`+pad(1500)+`"}}`, "", nil), "together past the bound")
	var st struct {
		Values map[string]any `json:"values"`
	}
	require.Equal(t, 200, call(t, "GET", state, "", "", &st))
	require.NotContains(t, st.Values, "y")
	require.Equal(t, uint64(1), n.srv.Metrics().Refused[server.LimitState])
}

// TestARefusedRunLeavesNothingBehind: a stateless run refused (here by
// the principal's run rate) leaves no thread, and none counted against
// the principal's quota of threads.
func TestARefusedRunLeavesNothingBehind(t *testing.T) {
	a, err := auth.New(context.Background(), auth.Config{APIKeys: map[string]auth.Principal{"k-ann": {Subject: "ann"}}})
	require.NoError(t, err)
	n := start(t, server.Config{MaxRunsPerMinute: 1, MaxThreadsPerPrincipal: 3}, transport.Options{Auth: a})
	run := `{"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "hi"}]}, "on_completion": "keep"}`
	require.Equal(t, 200, call(t, "POST", n.url+"/runs/wait", run, "k-ann", nil))
	for range 5 {
		status := call(t, "POST", n.url+"/runs/wait", run, "k-ann", nil)
		require.Equal(t, 429, status, "over the run rate")
	}
	var list []map[string]any
	require.Equal(t, 200, call(t, "POST", n.url+"/threads/search", `{"limit": 100}`, "k-ann", &list))
	require.Len(t, list, 1, "the kept run's thread, and none of the refused ones'")
	require.Equal(t, 1, n.srv.Threads(), "nor held")
	// Two more threads fit in ann's quota of three: the refused runs took
	// none of it.
	require.Equal(t, 200, call(t, "POST", n.url+"/threads", `{}`, "k-ann", nil))
	require.Equal(t, 200, call(t, "POST", n.url+"/threads", `{}`, "k-ann", nil))
}

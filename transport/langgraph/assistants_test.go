package langgraph_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentstream/agentstream/internal/testkit/redistest"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/agentstream/agentstream/transport/langgraph"
)

// assistantsScenario: an assistant created, read, found, updated (each
// update a version), a version made the latest again, run with its
// config, deleted; a graph's own updated and deleted back to what the
// server made.
func assistantsScenario(t *testing.T, n *node) string {
	t.Helper()
	var a langgraph.LgAssistant
	require.Equal(t, 200, call(t, "POST", n.url+"/assistants", `{"graph_id": "echo", "name": "Slow echo", "description": "one word every 5 ms", "config": {"configurable": {"token_delay_ms": 5}}, "metadata": {"team": "a"}}`, "", &a))
	require.Equal(t, "echo", a.GraphID)
	require.Equal(t, uint64(1), a.Version)
	require.NotEqual(t, langgraph.AssistantID("echo"), a.AssistantID, "an id of its own")
	id := a.AssistantID
	require.Equal(t, 409, call(t, "POST", n.url+"/assistants", `{"assistant_id": "`+id+`", "graph_id": "echo"}`, "", nil))
	var same langgraph.LgAssistant
	require.Equal(t, 200, call(t, "POST", n.url+"/assistants", `{"assistant_id": "`+id+`", "graph_id": "echo", "if_exists": "do_nothing"}`, "", &same))
	require.Equal(t, "Slow echo", same.Name)
	require.Equal(t, 404, call(t, "POST", n.url+"/assistants", `{"graph_id": "nope"}`, "", nil), "a graph the server does not run")
	require.Equal(t, 422, call(t, "POST", n.url+"/assistants", `{"graph_id": "echo", "context": {"model": "x"}}`, "", nil))

	var got langgraph.LgAssistant
	require.Equal(t, 200, call(t, "GET", n.url+"/assistants/"+id, "", "", &got))
	require.Equal(t, "one word every 5 ms", *got.Description)
	var found []langgraph.LgAssistant
	require.Equal(t, 200, call(t, "POST", n.url+"/assistants/search", `{"graph_id": "echo", "metadata": {"team": "a"}}`, "", &found))
	require.Len(t, found, 1)
	require.Equal(t, 200, call(t, "POST", n.url+"/assistants/search", `{"name": "slow"}`, "", &found))
	require.Len(t, found, 1, "a part of the name, any case")
	var count int
	require.Equal(t, 200, call(t, "POST", n.url+"/assistants/count", `{"graph_id": "echo"}`, "", &count))
	require.Equal(t, 2, count, "the graph's own and this one")

	// A run of it has its config: a word every 5 ms (the run's own
	// config over it).
	var values map[string]any
	require.Equal(t, 200, call(t, "POST", n.url+"/threads/as1/runs/wait", `{"assistant_id": "`+id+`", "input": {"messages": [{"role": "user", "content": "hi"}]}}`, "", &values))
	require.Len(t, values["messages"], 2)
	var th langgraph.LgThread
	require.Equal(t, 200, call(t, "GET", n.url+"/threads/as1", "", "", &th))
	require.Equal(t, id, th.Metadata["assistant_id"], "the thread says which assistant ran on it")
	var runs []map[string]any
	require.Equal(t, 200, call(t, "GET", n.url+"/threads/as1/runs", "", "", &runs))
	require.Contains(t, mustJSON(t, runs[0]), `"token_delay_ms":5`, "the run ran with the assistant's config")

	var v2 langgraph.LgAssistant
	require.Equal(t, 200, call(t, "PATCH", n.url+"/assistants/"+id, `{"name": "Echo", "metadata": {"stage": "two"}}`, "", &v2))
	require.Equal(t, uint64(2), v2.Version)
	require.Equal(t, "Echo", v2.Name)
	require.Equal(t, map[string]any{"team": "a", "stage": "two"}, map[string]any(v2.Metadata), "metadata merged")
	require.Equal(t, map[string]any{"configurable": map[string]any{"token_delay_ms": float64(5)}}, v2.Config, "kept")
	var versions []langgraph.LgAssistantVersion
	require.Equal(t, 200, call(t, "POST", n.url+"/assistants/"+id+"/versions", `{}`, "", &versions))
	require.Len(t, versions, 2)
	require.Equal(t, uint64(2), versions[0].Version, "newest first")
	require.Equal(t, 200, call(t, "POST", n.url+"/assistants/"+id+"/versions", `{"metadata": {"stage": "two"}}`, "", &versions))
	require.Len(t, versions, 1)
	var back langgraph.LgAssistant
	require.Equal(t, 200, call(t, "POST", n.url+"/assistants/"+id+"/latest", `{"version": 1}`, "", &back))
	require.Equal(t, uint64(1), back.Version)
	require.Equal(t, "Slow echo", back.Name)
	require.Equal(t, 404, call(t, "POST", n.url+"/assistants/"+id+"/latest", `{"version": 7}`, "", nil))

	// A graph's own: updated like any other, and deleted back to what
	// the server made.
	echo := langgraph.AssistantID("echo")
	var own langgraph.LgAssistant
	require.Equal(t, 200, call(t, "PATCH", n.url+"/assistants/"+echo, `{"config": {"configurable": {"token_delay_ms": 1}}}`, "", &own))
	require.Equal(t, uint64(2), own.Version)
	require.Equal(t, 200, call(t, "POST", n.url+"/assistants/"+echo+"/versions", `{}`, "", &versions))
	require.Len(t, versions, 2, "the server's first, then the update")
	require.Equal(t, 204, call(t, "DELETE", n.url+"/assistants/"+echo, "", "", nil))
	require.Equal(t, 200, call(t, "GET", n.url+"/assistants/echo", "", "", &own))
	require.Equal(t, uint64(1), own.Version, "the server's again")
	require.Equal(t, 409, call(t, "DELETE", n.url+"/assistants/"+echo, "", "", nil), "the server makes it at every start")
	return id
}

// TestAssistantsAsResources: the scenario on each engine; the assistant
// outlives a restart on disk, and two nodes on one Redis share it.
func TestAssistantsAsResources(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		n := start(t, server.Config{}, transport.Options{})
		id := assistantsScenario(t, n)
		require.Equal(t, 204, call(t, "DELETE", n.url+"/assistants/"+id, "", "", nil))
		require.Equal(t, 404, call(t, "GET", n.url+"/assistants/"+id, "", "", nil))
		require.Equal(t, 404, call(t, "POST", n.url+"/threads/as2/runs/wait", `{"assistant_id": "`+id+`", "input": {}}`, "", nil))
	})
	t.Run("disk", func(t *testing.T) {
		dir := t.TempDir()
		n := diskNode(t, dir)
		id := assistantsScenario(t, n)
		n.stop()
		n = diskNode(t, dir)
		var a langgraph.LgAssistant
		require.Equal(t, 200, call(t, "GET", n.url+"/assistants/"+id, "", "", &a), "outlives a restart")
		require.Equal(t, "Slow echo", a.Name)
		var versions []langgraph.LgAssistantVersion
		require.Equal(t, 200, call(t, "POST", n.url+"/assistants/"+id+"/versions", `{}`, "", &versions))
		require.Len(t, versions, 2)
	})
	t.Run("redis", func(t *testing.T) {
		rs := redistest.Start(t)
		a, b := redisNode(t, rs), redisNode(t, rs)
		var count int
		require.Equal(t, 200, call(t, "POST", b.url+"/assistants/count", `{"graph_id": "echo"}`, "", &count))
		require.Equal(t, 1, count, "the graph's own (the other node's copy of the list is read now)")
		id := assistantsScenario(t, a)
		var found []langgraph.LgAssistant
		require.Equal(t, 200, call(t, "POST", b.url+"/assistants/search", `{"metadata": {"team": "a"}}`, "", &found))
		require.Len(t, found, 1, "a change on one node reaches the other's search")
		require.Equal(t, "Slow echo", found[0].Name, "as it is now (set back to version 1)")
		var got langgraph.LgAssistant
		require.Equal(t, 200, call(t, "GET", b.url+"/assistants/"+id, "", "", &got), "the other node has it")
		require.Equal(t, 200, call(t, "POST", b.url+"/threads/as3/runs/wait", `{"assistant_id": "`+id+`", "input": {"messages": [{"role": "user", "content": "x"}]}}`, "", nil))
		require.Equal(t, 204, call(t, "DELETE", b.url+"/assistants/"+id, "", "", nil))
		require.Equal(t, 404, call(t, "GET", a.url+"/assistants/"+id, "", "", nil))
	})
}

// TestAssistantsAreBounded: past --max-assistants a new one is refused
// (429) and counted; the store's routes never reach the assistants.
func TestAssistantsAreBounded(t *testing.T) {
	n := start(t, server.Config{MaxAssistants: 2}, transport.Options{})
	for range 2 {
		require.Equal(t, 200, call(t, "POST", n.url+"/assistants", `{"graph_id": "echo"}`, "", nil))
	}
	require.Equal(t, 429, call(t, "POST", n.url+"/assistants", `{"graph_id": "echo"}`, "", nil))
	require.Equal(t, uint64(1), n.srv.Metrics().Refused[server.LimitAssistants])
	resp, err := http.Post(n.url+"/store/items/search", "application/json", strings.NewReader(`{"namespace_prefix": []}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	var items langgraph.LgItemList
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&items))
	require.Empty(t, items.Items, "assistants are not store items")
}

package langgraph_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentstream/agentstream/assistants"
	"github.com/agentstream/agentstream/internal/testkit/gentest"

	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/santhosh-tekuri/jsonschema/v5"
	"github.com/stretchr/testify/require"
)

// TestFramesMatchTheSchema: every frame of a run stream in every mode
// whose data are the wire's own (metadata, tasks, checkpoints, debug,
// messages, errors), a state, the history and a run's answer at an
// interrupt hold to the rules of protocol/langgraph.cddl they are built
// from, as its generated JSON Schema says.
func TestFramesMatchTheSchema(t *testing.T) {
	rules := map[string]*jsonschema.Schema{}
	check := func(rule string, data any) {
		t.Helper()
		s := rules[rule]
		if s == nil {
			s = gentest.SchemaRule(t, "schema.json", rule)
			rules[rule] = s
		}
		require.NoError(t, s.Validate(data), "%s: %v", rule, data)
	}
	decodeAny := func(data string) any {
		var v any
		require.NoError(t, json.Unmarshal([]byte(data), &v), data)
		return v
	}
	n := start(t, server.Config{}, transport.Options{})
	seen := map[string]int{}
	checkFrames := func(frames []sseFrame) {
		for _, f := range frames {
			v := decodeAny(f.data)
			seen[f.event]++
			switch f.event {
			case "metadata":
				check("LgRunMetadata", v)
			case "error":
				check("LgStreamError", v)
			case "tasks":
				if _, ok := v.(map[string]any)["result"]; ok {
					check("LgTaskResult", v)
				} else {
					check("LgTaskStart", v)
				}
			case "checkpoints":
				check("LgStreamCheckpoint", v)
			case "debug":
				check("LgDebugFrame", v)
				d := v.(map[string]any)
				seen["debug/"+d["type"].(string)]++
				check(map[string]string{"task": "LgTaskStart", "task_result": "LgTaskResult", "checkpoint": "LgDebugCheckpoint"}[d["type"].(string)], d["payload"])
			case "messages/partial", "messages/complete":
				for _, m := range v.([]any) {
					if m.(map[string]any)["type"] == "ai" { // the run's; those it starts from are its input's, as given
						check("LgAIMessage", m)
					}
				}
			case "messages/metadata":
				for _, m := range v.(map[string]any) {
					check("LgMessageMetadata", m.(map[string]any)["metadata"])
				}
			case "messages":
				check("LgMessageMetadata", v.([]any)[1])
			}
		}
	}
	url := n.url + "/threads/schema-1/runs/stream"
	checkFrames(streamAll(t, url, `{"assistant_id": "demo", "input": {"messages": [{"role": "user", "content": "q"}]}, "stream_mode": ["tasks", "checkpoints", "debug", "messages"]}`))
	var asked any
	require.Equal(t, 200, call(t, "GET", n.url+"/threads/schema-1/runs", "", "", nil))
	require.Equal(t, 200, call(t, "GET", n.url+"/threads/schema-1/state", "", "", &asked))
	check("LgThreadState", asked)
	require.NotEmpty(t, asked.(map[string]any)["tasks"], "waiting on its interrupt")
	checkFrames(streamAll(t, url, `{"assistant_id": "demo", "command": {"resume": {"approved": true}}, "stream_mode": ["tasks", "checkpoints", "debug", "messages-tuple"]}`))
	checkFrames(streamAll(t, n.url+"/threads/schema-2/runs/stream", `{"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "two words"}]}, "stream_mode": ["messages", "messages-tuple"]}`))
	for _, id := range []string{"schema-1", "schema-2"} {
		var state any
		require.Equal(t, 200, call(t, "GET", n.url+"/threads/"+id+"/state", "", "", &state))
		check("LgThreadState", state)
		var history []any
		require.Equal(t, 200, call(t, "GET", n.url+"/threads/"+id+"/history", "", "", &history))
		require.NotEmpty(t, history)
		for _, st := range history {
			check("LgThreadState", st)
		}
	}
	var none any
	require.Equal(t, 200, call(t, "POST", n.url+"/threads", `{"thread_id": "schema-3"}`, "", nil))
	require.Equal(t, 200, call(t, "GET", n.url+"/threads/schema-3/state", "", "", &none))
	check("LgThreadState", none)
	var interrupted any
	require.Equal(t, 200, call(t, "POST", n.url+"/threads/schema-4/runs/wait", `{"assistant_id": "demo", "input": {"messages": [{"role": "user", "content": "q"}]}}`, "", &interrupted))
	check("LgRunInterrupted", interrupted)
	// The protocol's own state route (a server without the Platform's,
	// which replaces it), of a thread waiting on its interrupt and of one
	// that ended.
	srv := server.New(server.Config{})
	assistants.Register(srv)
	core := httptest.NewServer(transport.New(srv, transport.Options{}))
	defer func() {
		core.Close()
		_ = srv.Close(context.Background())
	}()
	require.Equal(t, 200, call(t, "POST", core.URL+"/threads/p-1/commands", `{"id": 1, "method": "run.start", "params": {"assistant_id": "demo", "input": {"messages": [{"role": "user", "content": "q"}]}}}`, "", nil))
	require.Eventually(t, func() bool {
		var st map[string]any
		return call(t, "GET", core.URL+"/threads/p-1/state", "", "", &st) == 200 && len(st["tasks"].([]any)) == 1
	}, 5*time.Second, 10*time.Millisecond, "the demo waits on its interrupt")
	var protoState any
	require.Equal(t, 200, call(t, "GET", core.URL+"/threads/p-1/state", "", "", &protoState))
	check("LgProtocolState", protoState)
	for _, event := range []string{"metadata", "tasks", "checkpoints", "debug/task", "debug/task_result", "debug/checkpoint", "messages/metadata", "messages/partial", "messages/complete", "messages"} {
		require.Positive(t, seen[event], "a %s frame was checked", event)
	}
}

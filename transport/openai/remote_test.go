package openai_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/client"
	"github.com/agentstream/agentstream/internal/testkit/redistest"
	"github.com/agentstream/agentstream/redisstore"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/stretchr/testify/require"
)

// TestRemoteWorkerAssistant: an assistant a remote worker serves is a
// model too: its text streams as a chat completion, its interrupt (which
// names no tool call) is a tool call named "input" with the interrupt's
// payload, and the tool message answering it reaches the worker, whose
// reply streams as the next completion.
func TestRemoteWorkerAssistant(t *testing.T) {
	srv := server.New(server.Config{})
	h := transport.New(srv, transport.Options{Profiles: []string{transport.ProfileOpenAI}})
	ts := httptest.NewServer(h)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- client.ServeWorker(ctx, client.WorkerOptions{URL: ts.URL, Assistants: []string{"remote"}}, func(ctx context.Context, run *client.WorkerRun) error {
			if err := run.Text("hello ", "from ", "a worker"); err != nil {
				return err
			}
			answer, err := run.Interrupt(ctx, map[string]any{"question": "go on?"})
			if err != nil {
				return err
			}
			b, _ := json.Marshal(answer)
			return run.Text("you said ", string(b))
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		c, stop := context.WithTimeout(context.Background(), 5*time.Second)
		defer stop()
		_ = h.Shutdown(c)
		ts.Close()
		_ = srv.Close(c)
	})
	require.Eventually(t, func() bool {
		code, models := do(t, "GET", ts.URL+"/v1/models", "", nil)
		return code == 200 && strings.Contains(mustJSON(models), `"remote"`)
	}, 5*time.Second, 10*time.Millisecond, "the worker's assistant is a model")

	a := assemble(chatStream(t, openStream(t, "POST", ts.URL+"/v1/chat/completions", `{"model": "remote", "stream": true, "messages": [{"role": "user", "content": "hi"}]}`)))
	require.Equal(t, "hello from a worker", a.content)
	require.Equal(t, "tool_calls", a.finish)
	require.Len(t, a.calls, 1)
	require.Equal(t, "input", a.calls[0]["name"])
	require.JSONEq(t, `{"question": "go on?"}`, a.calls[0]["arguments"])

	a = assemble(chatStream(t, openStream(t, "POST", ts.URL+"/v1/chat/completions",
		`{"model": "remote", "stream": true, "messages": [{"role": "tool", "tool_call_id": "`+a.calls[0]["id"]+`", "content": "{\"yes\": true}"}]}`)))
	require.Equal(t, `you said {"yes":true}`, a.content)
	require.Equal(t, "stop", a.finish)
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestResponsesAcrossRedisNodes: two nodes share a Redis. A response is
// created and streamed on A, dropped after a few events and resumed on B
// with starting_after: every event once, in order; B's GET gives the
// object the stream ended with; the answer to its call, sent to B,
// completes the run A started.
func TestResponsesAcrossRedisNodes(t *testing.T) {
	rs := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	node := func(name string) *httptest.Server {
		eng, err := redisstore.New(ctx, redisstore.Options{URL: rs.URL(), TTL: time.Hour, Cluster: redisstore.ClusterOptions{Node: name, LeaseTTL: 2 * time.Second}})
		require.NoError(t, err)
		return start(t, server.Config{Engine: eng}, transport.Options{})
	}
	a, b := node("a"), node("b")
	s := openStream(t, "POST", a.URL+"/v1/responses", `{"model": "demo", "input": "across nodes", "stream": true}`)
	var got []map[string]any
	for len(got) < 6 {
		_, data, ok := s.next()
		require.True(t, ok)
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(data), &v))
		got = append(got, v)
	}
	s.close()
	id := got[0]["response"].(map[string]any)["id"].(string)
	rest := responseEvents(t, openStream(t, "GET", b.URL+"/v1/responses/"+id+"?stream=true&starting_after="+jsonNum(got[5]["sequence_number"].(float64)), ""))
	all := append(got, rest...)
	for i, n := range seqs(all) {
		require.Equal(t, i, n, "every event once, in order")
	}
	end := all[len(all)-1]
	require.Equal(t, "response.incomplete", end["type"])

	code, obj := do(t, "GET", b.URL+"/v1/responses/"+id, "", nil)
	require.Equal(t, 200, code)
	final := end["response"].(map[string]any)
	delete(final, "usage")
	delete(obj, "usage")
	require.Equal(t, final, obj)

	var call string
	for _, o := range asList(final["output"]) {
		if m := o.(map[string]any); m["type"] == "function_call" {
			call = m["call_id"].(string)
		}
	}
	code, next := do(t, "POST", b.URL+"/v1/responses", `{"model": "demo", "previous_response_id": "`+id+`", "input": [{"type": "function_call_output", "call_id": "`+call+`", "output": "{\"approved\": true}"}]}`, nil)
	require.Equal(t, 200, code, "%v", next)
	require.Equal(t, "completed", next["status"])
	require.True(t, strings.HasPrefix(next["output_text"].(string), "Here is what I found"))
}

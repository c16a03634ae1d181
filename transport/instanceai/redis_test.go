package instanceai_test

import (
	"context"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/agentstream/agentstream/internal/testkit/redistest"
	"github.com/agentstream/agentstream/redisstore"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/stretchr/testify/require"
)

// TestInstanceAIAcrossRedisNodes: two nodes share a Redis. The chat is
// posted to A (which runs it), the stream is read from B, the
// confirmation and a later cancel are sent to B; B's stream carries the
// run from run-start to run-finish, its messages hold the user's message
// and the answer, and a stream resumed on A after B's last id goes on
// with nothing lost or repeated.
func TestInstanceAIAcrossRedisNodes(t *testing.T) {
	rs := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	node := func(name string) *httptest.Server {
		eng, err := redisstore.New(ctx, redisstore.Options{URL: rs.URL(), TTL: time.Hour, Cluster: redisstore.ClusterOptions{Node: name, LeaseTTL: 2 * time.Second}})
		require.NoError(t, err)
		srv := server.New(server.Config{Engine: eng})
		srv.Register("orchestrator", server.AssistantFunc(orchestrator))
		h := transport.New(srv, transport.Options{Profiles: []string{transport.ProfileInstanceAI}, InstanceAIAssistant: "orchestrator"})
		ts := httptest.NewServer(h)
		t.Cleanup(func() {
			c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = h.Shutdown(c)
			ts.Close()
			_ = srv.Close(c)
		})
		return ts
	}
	a, b := node("a"), node("b")
	s := open(t, b.URL+"/instance-ai/events/rth", nil)
	code, body := do(t, "POST", a.URL+"/instance-ai/chat/rth", `{"message": "build it"}`, nil)
	require.Equal(t, 200, code, body)
	runID := body["runId"]
	frames := s.until("confirmation-request")
	require.Equal(t, "run-start", frames[0].typ())
	require.Equal(t, runID, frames[0].data["runId"])
	code, _ = do(t, "POST", b.URL+"/instance-ai/chat/rth", `{"message": "again"}`, nil)
	require.Equal(t, 409, code, "a run is active, whichever node is asked")
	code, body = do(t, "POST", b.URL+"/instance-ai/confirm/"+frames[len(frames)-1].payload()["requestId"].(string), `{"approved": true}`, nil)
	require.Equal(t, 200, code, body)
	frames = append(frames, s.until("run-finish")...)
	require.Equal(t, "completed", frames[len(frames)-1].payload()["status"])
	want := buildTree(frames)
	require.Len(t, want.Children, 2)

	code, ms := do(t, "GET", b.URL+"/instance-ai/threads/rth/messages", "", nil)
	require.Equal(t, 200, code)
	msgs := ms["messages"].([]any)
	require.Len(t, msgs, 2)
	require.Equal(t, "build it", msgs[0].(map[string]any)["content"])
	require.Equal(t, "You have 3 workflows. Done!", msgs[1].(map[string]any)["content"])

	// The next run, cancelled through B; A's stream resumes after B's
	// last id.
	cut := frames[len(frames)-1].id
	code, body = do(t, "POST", b.URL+"/instance-ai/chat/rth", `{"message": "wait"}`, nil)
	require.Equal(t, 200, code, body)
	r := open(t, a.URL+"/instance-ai/events/rth", map[string][]string{"Last-Event-Id": {strconv.FormatUint(cut, 10)}})
	first := r.next()
	require.Equal(t, "run-start", first.typ())
	require.Equal(t, body["runId"], first.data["runId"])
	require.Equal(t, cut+1, first.id, "nothing lost between the streams")
	code, body = do(t, "POST", b.URL+"/instance-ai/chat/rth/cancel", "", nil)
	require.Equal(t, 200, code)
	require.Equal(t, true, body["cancelled"])
	rest := r.until("run-finish")
	require.Equal(t, "cancelled", rest[len(rest)-1].payload()["status"])
}

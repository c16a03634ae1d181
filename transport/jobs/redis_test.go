package jobs_test

import (
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/internal/testkit/redistest"
	"github.com/agentstream/agentstream/redisstore"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/agentstream/agentstream/transport/jobs"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// TestJobEnvelopesOverRedisStreams: a job's workers XADD its envelopes
// and its end to the ingest stream (fields job + envelope, job +
// complete), as in the job-stream system; the stream of the job serves
// them in order, then complete; a bad envelope goes to the dead-letter
// stream with the path of its problem.
func TestJobEnvelopesOverRedisStreams(t *testing.T) {
	rs := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eng, err := redisstore.New(ctx, redisstore.Options{URL: rs.URL(), TTL: time.Hour, Cluster: redisstore.ClusterOptions{LeaseTTL: time.Second}})
	require.NoError(t, err)
	srv := server.New(server.Config{Engine: eng})
	in, err := eng.Ingest(srv, redisstore.IngestOptions{Stream: "ingest", LeaseTTL: time.Second, Entries: jobs.IngestEntry})
	require.NoError(t, err)
	h := transport.New(srv, transport.Options{Profiles: []string{transport.ProfileJobs}})
	ts := httptest.NewServer(h)
	defer func() {
		in.Close()
		_ = h.Shutdown(ctx)
		ts.Close()
		_ = srv.Close(ctx)
	}()

	opt, err := rueidis.ParseURL(rs.URL())
	require.NoError(t, err)
	c, err := rueidis.NewClient(opt)
	require.NoError(t, err)
	defer c.Close()
	xadd := func(fields ...string) {
		cmd := c.B().Xadd().Key("ingest").Id("*").FieldValue()
		for i := 0; i+1 < len(fields); i += 2 {
			cmd = cmd.FieldValue(fields[i], fields[i+1])
		}
		require.NoError(t, c.Do(ctx, cmd.Build()).Error())
	}
	for n := range 50 {
		xadd("job", "77", "envelope", agentEnvelope("deepAgent-1", n))
	}
	xadd("job", "77", "envelope", `{"ts":1,"node_id":"x","node_type":"deep_agent","payload_version":"AgentEvent.v1","payload":{"type":"agent.start"}}`)
	xadd("job", "77", "complete", `{"status":"completed"}`)

	_, frames := readJob(t, ts.URL, "77", "", nil)
	require.Equal(t, "snapshot", frames[0].event)
	require.Equal(t, `{"status":"completed"}`, frames[len(frames)-1].data)
	appends := frames[1 : len(frames)-1]
	require.Len(t, appends, 50)
	for n, f := range appends {
		require.Contains(t, f.data, `"text":"w`+strconv.Itoa(n)+` "`, "in order")
	}
	require.Eventually(t, func() bool {
		dead, err := c.Do(ctx, c.B().Xrange().Key("ingest:dead").Start("-").End("+").Build()).AsXRange()
		return err == nil && len(dead) == 1 && strings.HasPrefix(dead[0].FieldValues["reason"], "envelope.payload (deep_agent AgentEvent.v1)")
	}, 10*time.Second, 20*time.Millisecond, "the bad envelope is dead-lettered with its path")
}

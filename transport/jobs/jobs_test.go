package jobs_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/internal/testkit/gentest"
	"github.com/agentstream/agentstream/internal/testkit/wiretest"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/agentstream/agentstream/transport/jobs"
	"github.com/agentstream/agentstream/transport/wire"
	"github.com/santhosh-tekuri/jsonschema/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func envelopeSchema(t *testing.T) *jsonschema.Schema { return gentest.Schema(t, "schema.json") }

func start(t *testing.T, opts transport.Options) *httptest.Server {
	t.Helper()
	srv := server.New(server.Config{})
	opts.Profiles = []string{transport.ProfileJobs}
	opts.Ingest = transport.IngestOptions{Rate: 1e6, Burst: 1e6}
	h := transport.New(srv, opts)
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.Shutdown(ctx)
		ts.Close()
		_ = srv.Close(ctx)
	})
	return ts
}

func do(t *testing.T, method, url, body string, header http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// agentEnvelope is a deep_agent envelope of node, its n-th.
func agentEnvelope(node string, n int) string {
	return fmt.Sprintf(`{"ts":%d,"node_id":%q,"node_type":"deep_agent","payload_version":"AgentEvent.v1","payload":{"ts":%d,"agent":{"kind":"main","id":"MAIN","name":"LangGraph"},"run_id":"r1","parent_run_ids":[],"type":"text.delta","payload":{"n":%d,"text":"w%d "}}}`, 1745701201000+n, node, 1745701201000+n, n, n)
}

type frame struct{ event, id, data string }

// readJob reads a job's stream (every append checked against the
// schema) until complete, or until max frames.
func readJob(t *testing.T, base, job, lastEventID string, header http.Header) (int, []frame) {
	t.Helper()
	req, err := http.NewRequest("GET", base+"/jobs/"+job+"/stream", nil)
	require.NoError(t, err)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	require.NoError(t, err)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return resp.StatusCode, nil
	}
	schema := envelopeSchema(t)
	var out []frame
	var cur frame
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.event != "" {
				if cur.event == "append" {
					var v any
					require.NoError(t, json.Unmarshal([]byte(cur.data), &v))
					require.NoError(t, schema.Validate(v), "envelope %s", cur.data)
				}
				out = append(out, cur)
				if cur.event == "complete" {
					return 200, out
				}
			}
			cur = frame{}
		case strings.HasPrefix(line, "event: "):
			cur.event = line[7:]
		case strings.HasPrefix(line, "id: "):
			cur.id = line[4:]
		case strings.HasPrefix(line, "data: "):
			cur.data = line[6:]
		}
	}
	t.Fatalf("the stream ended before complete: %v (%d frames)", sc.Err(), len(out))
	return 0, nil
}

// TestJobStream: envelopes from two nodes appended in two batches, then
// the job completes; a reader gets snapshot, one append per envelope
// (its id the seq, the envelope verbatim with seq first), and complete; a
// client aggregating by node_id, as the seed describes, ends with each
// node's envelopes in order. Resuming with Last-Event-ID gets exactly the
// envelopes after it; without it, the whole window.
func TestJobStream(t *testing.T) {
	ts := start(t, transport.Options{})
	code, body := do(t, "POST", ts.URL+"/jobs", `{"job_id": "42"}`, nil)
	require.Equal(t, 201, code, body)
	require.JSONEq(t, `{"job_id":"42"}`, body)

	var batch1, batch2 []string
	for n := range 10 {
		batch1 = append(batch1, agentEnvelope("deepAgent-4", n))
		batch2 = append(batch2, agentEnvelope("deepAgent-7", n))
	}
	batch2 = append(batch2, `{"ts":1,"node_id":"img-1","node_type":"fal_image","payload_version":"FalImage.v9","payload":{"url":"https://example.com/a.png"}}`)
	code, body = do(t, "POST", ts.URL+"/jobs/42/envelopes", "["+strings.Join(batch1, ",")+"]", nil)
	require.Equal(t, 200, code, body)
	var appended struct{ Seqs []uint64 }
	require.NoError(t, json.Unmarshal([]byte(body), &appended))
	require.Len(t, appended.Seqs, 10)
	req, _ := http.NewRequest("POST", ts.URL+"/jobs/42/envelopes", strings.NewReader(strings.Join(batch2, "\n")))
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	code, body = do(t, "POST", ts.URL+"/jobs/42/complete", `{"status": "completed"}`, nil)
	require.Equal(t, 204, code, body)

	_, frames := readJob(t, ts.URL, "42", "", nil)
	require.Equal(t, frame{"snapshot", "0", `{"result":{"stream":{}}}`}, frames[0])
	require.Equal(t, frame{"complete", "terminal", `{"status":"completed"}`}, frames[len(frames)-1])
	appends := frames[1 : len(frames)-1]
	require.Len(t, appends, 21)
	buckets := map[string][]map[string]any{}
	last := uint64(0)
	for _, f := range appends {
		require.Equal(t, "append", f.event)
		var env map[string]any
		require.NoError(t, json.Unmarshal([]byte(f.data), &env))
		seq := uint64(env["seq"].(float64))
		require.Equal(t, fmt.Sprint(seq), f.id, "the SSE id is the envelope's seq")
		require.Greater(t, seq, last)
		last = seq
		require.True(t, strings.HasPrefix(f.data, fmt.Sprintf(`{"seq":%d,"ts":`, seq)), "seq first, then the envelope as sent: %s", f.data)
		node := env["node_id"].(string)
		buckets[node] = append(buckets[node], env)
	}
	require.Len(t, buckets["deepAgent-4"], 10)
	require.Len(t, buckets["deepAgent-7"], 10)
	require.Len(t, buckets["img-1"], 1)
	for n, env := range buckets["deepAgent-7"] {
		require.Equal(t, float64(n), env["payload"].(map[string]any)["payload"].(map[string]any)["n"], "each node's envelopes in order")
	}
	require.Equal(t, strings.TrimPrefix(batch1[0], "{"), strings.SplitN(appends[0].data, ",", 2)[1], "the envelope verbatim after its seq")

	// Resume after the 5th envelope: the rest, nothing twice.
	_, rest := readJob(t, ts.URL, "42", appends[4].id, nil)
	require.Equal(t, "snapshot", rest[0].event)
	require.Equal(t, appends[5:], rest[1:len(rest)-1])
	// A client that saw the end gets the end again, no envelopes.
	_, again := readJob(t, ts.URL, "42", "terminal", nil)
	require.Equal(t, []string{"snapshot", "complete"}, []string{again[0].event, again[1].event})
}

// TestJobEnvelopesChecked: an envelope with seq, or a deep_agent payload
// that is not an AgentEvent.v1, refuses its whole batch with the index
// and path of the problem; an unknown node type's payload is opaque.
func TestJobEnvelopesChecked(t *testing.T) {
	ts := start(t, transport.Options{})
	code, body := do(t, "POST", ts.URL+"/jobs/7/envelopes", `[`+agentEnvelope("a", 0)+`, {"seq": 3, "ts":1,"node_id":"a","node_type":"x","payload_version":"y","payload":null}]`, nil)
	require.Equal(t, 400, code)
	require.Contains(t, body, "[1]")
	require.Contains(t, body, "seq")
	code, body = do(t, "POST", ts.URL+"/jobs/7/envelopes", `[{"ts":1,"node_id":"a","node_type":"deep_agent","payload_version":"AgentEvent.v1","payload":{"ts":1,"agent":{"kind":"main","id":"MAIN"},"run_id":"r","parent_run_ids":[],"type":"agent.start","payload":{}}}]`, nil)
	require.Equal(t, 400, code)
	require.Contains(t, body, "[0].payload (deep_agent AgentEvent.v1)")
	require.Contains(t, body, "name")
	code, body = do(t, "POST", ts.URL+"/jobs/7/envelopes", `[{"ts":1,"node_id":"v","node_type":"voice_synth","payload_version":"Voice.v1","payload":`+strings.Repeat("[", 9000)+strings.Repeat("]", 9000)+`}]`, nil)
	require.Equal(t, 400, code, "a payload nested 9,000 deep")
	require.Contains(t, body, "[0]: nested deeper than")
	code, body = do(t, "POST", ts.URL+"/jobs/7/envelopes", `[{"ts":1,"node_id":"v","node_type":"voice_synth","payload_version":"Voice.v1","payload":[1,2,3]}]`, nil)
	require.Equal(t, 200, code, body)
	code, _ = do(t, "POST", ts.URL+"/jobs/7/complete", `{"status": "done"}`, nil)
	require.Equal(t, 400, code)
	code, _ = do(t, "POST", ts.URL+"/jobs/7/complete", `{"status": "failed"}`, nil)
	require.Equal(t, 204, code)
	_, frames := readJob(t, ts.URL, "7", "", nil)
	require.Equal(t, []string{"snapshot", "append", "complete"}, []string{frames[0].event, frames[1].event, frames[2].event})
	require.Equal(t, `{"status":"failed"}`, frames[2].data)
}

// TestJobIDsAndOwnersAreChecked: an empty, "." or ".." job id, one with
// characters a thread id may not hold, and an empty or control-character
// owner are refused (400), and nothing is created.
func TestJobIDsAndOwnersAreChecked(t *testing.T) {
	keys := map[string]auth.Principal{"kp": {Subject: "worker", Producer: true, Threads: []string{"job:*"}}}
	a, err := auth.New(context.Background(), auth.Config{APIKeys: keys})
	require.NoError(t, err)
	ts := start(t, transport.Options{Auth: a})
	for _, body := range []string{`{"job_id": ""}`, `{"job_id": "."}`, `{"job_id": ".."}`, `{"job_id": "a/b"}`, `{"job_id": "a\nb"}`,
		`{"job_id": "c1", "owner": ""}`, `{"job_id": "c2", "owner": "bo\u0000b"}`, `{"job_id": "c3", "owner": "a\nb"}`} {
		code, out := do(t, "POST", ts.URL+"/jobs", body, http.Header{"X-Api-Key": {"kp"}})
		require.Equal(t, 400, code, "%s: %s", body, out)
		require.Contains(t, out, "invalid_argument", body)
	}
	code, out := do(t, "POST", ts.URL+"/jobs", `{"job_id": "c1", "owner": "carol"}`, http.Header{"X-Api-Key": {"kp"}})
	require.Equal(t, 201, code, out)
}

// TestJobWindow: 5,000 envelopes: a reader without Last-Event-ID gets
// the whole window (at least 4,096), in order.
func TestJobWindow(t *testing.T) {
	ts := start(t, transport.Options{})
	for b := range 5 {
		var items []string
		for n := range 1000 {
			items = append(items, agentEnvelope("MAIN", b*1000+n))
		}
		code, body := do(t, "POST", ts.URL+"/jobs/big/envelopes", "["+strings.Join(items, ",")+"]", nil)
		require.Equal(t, 200, code, body)
	}
	code, _ := do(t, "POST", ts.URL+"/jobs/big/complete", `{"status": "completed"}`, nil)
	require.Equal(t, 204, code)
	_, frames := readJob(t, ts.URL, "big", "", nil)
	require.GreaterOrEqual(t, len(frames)-2, 4096)
	require.Equal(t, 5000, len(frames)-2, "the default window holds them all")
}

// TestJobKeepAlive: a quiet stream gets `:keep-alive` lines.
func TestJobKeepAlive(t *testing.T) {
	url := wiretest.Serve(t, server.New(server.Config{}), 30*time.Millisecond, func(c wire.Context) wire.Wire { return jobs.New(c) })
	req, _ := http.NewRequest("GET", url+"/jobs/quiet/stream", nil)
	wiretest.KeepAlive(t, req, ":keep-alive")
}

// TestJobAuth: the job's creator and admins stream it, anyone else gets
// 403, no credential 401; a reader's credential cannot add envelopes; a
// producer opens a job for a named owner, who then streams it.
func TestJobAuth(t *testing.T) {
	keys := map[string]auth.Principal{
		"ka": {Subject: "alice"}, "kb": {Subject: "bob"}, "kadm": {Subject: "root", Admin: true},
		"kp": {Subject: "worker", Producer: true, Threads: []string{"job:*"}},
	}
	a, err := auth.New(context.Background(), auth.Config{APIKeys: keys})
	require.NoError(t, err)
	ts := start(t, transport.Options{Auth: a})
	key := func(k string) http.Header { return http.Header{"X-Api-Key": {k}} }

	code, body := do(t, "POST", ts.URL+"/jobs", `{"job_id": "a1"}`, key("ka"))
	require.Equal(t, 201, code, body)
	code, _ = do(t, "POST", ts.URL+"/jobs/a1/envelopes", "["+agentEnvelope("MAIN", 0)+"]", key("kb"))
	require.Equal(t, 403, code, "a reader cannot publish")
	code, body = do(t, "POST", ts.URL+"/jobs/a1/envelopes", "["+agentEnvelope("MAIN", 0)+"]", key("kp"))
	require.Equal(t, 200, code, body)
	code, _ = do(t, "POST", ts.URL+"/jobs/a1/complete", `{"status": "completed"}`, key("kp"))
	require.Equal(t, 204, code)

	code, _ = readJob(t, ts.URL, "a1", "", nil)
	require.Equal(t, 401, code)
	code, _ = readJob(t, ts.URL, "a1", "", key("kb"))
	require.Equal(t, 403, code)
	code, frames := readJob(t, ts.URL, "a1", "", key("ka"))
	require.Equal(t, 200, code)
	require.Len(t, frames, 3)
	code, _ = readJob(t, ts.URL, "a1", "", key("kadm"))
	require.Equal(t, 200, code)

	code, body = do(t, "POST", ts.URL+"/jobs", `{"job_id": "b1", "owner": "bob"}`, key("kp"))
	require.Equal(t, 201, code, body)
	code, _ = do(t, "POST", ts.URL+"/jobs", `{"job_id": "b2", "owner": "bob"}`, key("ka"))
	require.Equal(t, 403, code, "a user cannot open a job for another")
	code, _ = do(t, "POST", ts.URL+"/jobs/b1/complete", `{"status": "completed"}`, key("kp"))
	require.Equal(t, 204, code)
	code, _ = readJob(t, ts.URL, "b1", "", key("kb"))
	require.Equal(t, 200, code, "the named owner streams it")
	code, _ = readJob(t, ts.URL, "b1", "", key("ka"))
	require.Equal(t, 403, code)
}

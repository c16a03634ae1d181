package transport_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/internal/testkit/ssetest"
	"github.com/agentstream/agentstream/transport"
)

// publishBatch posts a batch of events to a thread, with the producer's
// headers when producer is not empty, and returns the status and body.
func publishBatch(t *testing.T, base, thread, contentType, producer string, seq int, body string, header ...string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest("POST", base+"/threads/"+thread+"/events", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", contentType)
	if producer != "" {
		req.Header.Set(transport.ProducerHeader, producer)
		req.Header.Set(transport.ProducerSeqHeader, fmt.Sprint(seq))
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &out), "%s", b)
	return resp.StatusCode, out
}

const (
	evStarted   = `{"type":"event","method":"lifecycle","params":{"namespace":[],"data":{"event":"started","graph_name":"worker"}}}`
	evProgress  = `{"type":"event","method":"custom","params":{"namespace":["sub"],"data":{"name":"progress","payload":{"pct":50}}}}`
	evCompleted = `{"type":"event","method":"lifecycle","params":{"namespace":[],"data":{"event":"completed"}}}`
)

// TestPublishReachesSubscribers: a producer's batch (JSON array, then
// NDJSON) is appended in order and delivered to an SSE subscriber, whose
// filter sees custom:NAME; the answer names each event's seq and id; a
// producer's own timestamp is kept, a missing one stamped.
func TestPublishReachesSubscribers(t *testing.T) {
	ts, _, srv := start(t, transport.Options{})
	stream, err := http.Post(ts.URL+"/threads/p/stream", "application/json", strings.NewReader(`{"channels": ["lifecycle", "custom:progress"]}`))
	require.NoError(t, err)
	defer stream.Body.Close()
	require.Eventually(t, func() bool { return srv.Subscriptions() == 1 }, 5*time.Second, time.Millisecond, "the stream's subscription is made")

	status, out := publishBatch(t, ts.URL, "p", "application/json", "w1", 1, "["+evStarted+","+evProgress+"]")
	require.Equal(t, 200, status, "%v", out)
	require.Equal(t, []any{1.0, 2.0}, out["seqs"])
	require.Len(t, out["event_ids"], 2)
	require.Equal(t, false, out["duplicate"])
	nd := strings.Replace(evProgress, `"namespace":["sub"]`, `"namespace":["sub"],"timestamp":7`, 1) + "\n\n" + evCompleted + "\n"
	status, out = publishBatch(t, ts.URL, "p", "application/x-ndjson", "w1", 2, nd)
	require.Equal(t, 200, status, "%v", out)
	require.Equal(t, []any{3.0, 4.0}, out["seqs"])

	var got []ssetest.Frame
	require.NoError(t, ssetest.Scan(bufio.NewReader(stream.Body), func(f ssetest.Frame) bool {
		got = append(got, f)
		return !strings.Contains(f.Data, `"completed"`)
	}))
	require.Len(t, got, 4)
	for i, f := range got {
		var e struct {
			Seq    int `json:"seq"`
			Params struct {
				Timestamp int64    `json:"timestamp"`
				Namespace []string `json:"namespace"`
			} `json:"params"`
		}
		require.NoError(t, json.Unmarshal([]byte(f.Data), &e))
		require.Equal(t, i+1, e.Seq)
		if i == 2 {
			require.EqualValues(t, 7, e.Params.Timestamp, "the producer's time")
			require.Equal(t, []string{"sub"}, e.Params.Namespace)
		} else {
			require.Greater(t, e.Params.Timestamp, int64(1e12), "stamped by the server")
		}
	}
	require.Equal(t, "custom", got[1].Event)
}

// TestPublishIsIdempotentPerProducer: a batch sent again with the same
// producer and number appends nothing and gets the first answer; an older
// number appends nothing; another producer's same number is its own.
func TestPublishIsIdempotentPerProducer(t *testing.T) {
	ts, _, srv := start(t, transport.Options{})
	_, first := publishBatch(t, ts.URL, "i", "application/json", "w1", 5, "["+evStarted+","+evProgress+"]")
	status, again := publishBatch(t, ts.URL, "i", "application/json", "w1", 5, "["+evStarted+","+evProgress+"]")
	require.Equal(t, 200, status)
	require.Equal(t, true, again["duplicate"])
	require.Equal(t, first["seqs"], again["seqs"])
	require.Equal(t, first["event_ids"], again["event_ids"])
	_, older := publishBatch(t, ts.URL, "i", "application/json", "w1", 4, "["+evProgress+"]")
	require.Equal(t, true, older["duplicate"])
	require.Empty(t, older["seqs"])
	_, other := publishBatch(t, ts.URL, "i", "application/json", "w2", 5, "["+evProgress+"]")
	require.Equal(t, []any{3.0}, other["seqs"])
	require.EqualValues(t, 3, srv.LastSeq("i"), "nothing appended twice")
	require.EqualValues(t, 2, srv.Metrics().IngestDuplicates)
}

// TestPublishRefusesABadBatchWhole: an invalid event refuses its whole
// batch, naming its index and the JSON path; nothing of it is appended.
// So do ids the server assigns, its own notices, too many events, a
// too large event, and a body that is not a batch.
func TestPublishRefusesABadBatchWhole(t *testing.T) {
	ts, _, srv := start(t, transport.Options{Ingest: transport.IngestOptions{MaxEvents: 3, MaxEventBytes: 400}})
	badDelta := `{"type":"event","method":"messages","params":{"namespace":[],"data":{"event":"content-block-delta","index":"zero","delta":{"type":"text","text":"x"}}}}`
	cases := []struct {
		name, ct, body string
		status         int
		msg            string
	}{
		{"bad field", "application/json", "[" + evStarted + "," + evProgress + "," + badDelta + "]", 400, "[2].params.data"},
		{"seq given", "application/json", `[{"type":"event","seq":9,"method":"custom","params":{"namespace":[],"data":{"name":"x","payload":1}}}]`, 400, "[0].seq: the server assigns it"},
		{"event_id given", "application/x-ndjson", evStarted + "\n" + `{"type":"event","event_id":"e-1","method":"custom","params":{"namespace":[],"data":{"name":"x","payload":1}}}`, 400, "[1].event_id: the server assigns it"},
		{"server notice", "application/json", `[{"type":"event","method":"events.missed","params":{"namespace":[],"data":{"reset":true}}}]`, 400, "[0].method: events.missed is the server's own"},
		{"not an event", "application/json", `[1]`, 400, "[0]: an event is a JSON object"},
		{"malformed line", "application/x-ndjson", evStarted + "\n{\"type\":", 400, "[1]: malformed JSON"},
		{"not a batch", "application/json", `{}`, 400, "a batch of events is a JSON array"},
		{"empty", "application/json", `[]`, 400, "the batch holds no event"},
		{"too many", "application/json", "[" + strings.Repeat(evProgress+",", 3) + evProgress + "]", 413, "at most 3 events"},
		{"too large", "application/json", `[{"type":"event","method":"custom","params":{"namespace":[],"data":{"name":"x","payload":"` + strings.Repeat("a", 500) + `"}}}]`, 413, "[0]: an event is at most 400 bytes"},
	}
	for _, tc := range cases {
		status, out := publishBatch(t, ts.URL, "b", tc.ct, "", 0, tc.body)
		require.Equal(t, tc.status, status, "%s: %v", tc.name, out)
		require.Contains(t, out["message"], tc.msg, tc.name)
	}
	require.EqualValues(t, 0, srv.LastSeq("b"), "nothing of a refused batch appended")
	status, out := publishBatch(t, ts.URL, "b", "application/json", "w", 0, "["+evProgress+"]", transport.ProducerSeqHeader, "x")
	require.Equal(t, 400, status, "%v", out)
	// Too large for the body bound: 413 resource_exhausted, as documented.
	small, _, _ := start(t, transport.Options{Ingest: transport.IngestOptions{MaxBatchBytes: 100}})
	status, out = publishBatch(t, small.URL, "b", "application/json", "", 0, "["+evProgress+","+evProgress+"]")
	require.Equal(t, 413, status, "%v", out)
	require.Equal(t, "resource_exhausted", out["error"])
	status, out = publishBatch(t, ts.URL, "b", "application/json", "", 0, "["+strings.Repeat(evProgress+",", 3)+evProgress+"]")
	require.Equal(t, 413, status, "%v", out)
	require.Equal(t, "resource_exhausted", out["error"])
}

// TestProducerBatchNumbersAreBounded: a batch number above 2^53-1, or
// more than 2^32 above the producer's last on the thread, is refused (400,
// nothing appended) and does not move the producer's last batch: the
// next batch in order is taken. Two principals' producers of one name are
// two producers.
func TestProducerBatchNumbersAreBounded(t *testing.T) {
	a, err := auth.New(context.Background(), auth.Config{APIKeys: map[string]auth.Principal{
		"k-a": {Subject: "a", Producer: true, Admin: true}, "k-b": {Subject: "b", Producer: true, Admin: true},
	}})
	require.NoError(t, err)
	ts, _, srv := start(t, transport.Options{Auth: a})
	post := func(key string, seq uint64) (int, map[string]any) {
		return publishBatch(t, ts.URL, "s", "application/json", "", 0, "["+evProgress+"]",
			transport.ProducerHeader, "p", transport.ProducerSeqHeader, fmt.Sprint(seq), "x-api-key", key)
	}
	status, out := post("k-a", 1)
	require.Equal(t, 200, status, "%v", out)
	for _, seq := range []uint64{1 << 53, 9_000_000_000_000_000_000, 2 + 1<<32} {
		status, out = post("k-a", seq)
		require.Equal(t, 400, status, "seq %d: %v", seq, out)
		require.Equal(t, "invalid_argument", out["error"])
		require.Contains(t, out["message"], "batch number")
	}
	require.EqualValues(t, 1, srv.LastSeq("s"), "nothing appended")
	status, out = post("k-a", 1+1<<32)
	require.Equal(t, 200, status, "exactly 2^32 ahead: %v", out)
	require.Equal(t, false, out["duplicate"])
	status, out = post("k-b", 1)
	require.Equal(t, 200, status, "%v", out)
	require.Equal(t, false, out["duplicate"], "another principal's producer of the same name")
	require.EqualValues(t, 3, srv.LastSeq("s"))
}

// TestPublishNeedsAProducer: with authentication on, a reader's
// credential cannot publish (403) and its refused attempt claims no
// thread; a producer's credential and an admin's can.
func TestPublishNeedsAProducer(t *testing.T) {
	a, err := auth.New(context.Background(), auth.Config{APIKeys: map[string]auth.Principal{
		"k-reader": {Subject: "reader"}, "k-worker": {Subject: "worker", Producer: true}, "k-admin": {Subject: "root", Admin: true},
	}})
	require.NoError(t, err)
	ts, _, srv := start(t, transport.Options{Auth: a})
	status, out := publishBatch(t, ts.URL, "w", "application/json", "", 0, "["+evStarted+"]", "x-api-key", "k-reader")
	require.Equal(t, 403, status, "%v", out)
	require.Contains(t, out["message"], "a producer's credential is needed")
	status, _ = publishBatch(t, ts.URL, "w", "application/json", "", 0, "["+evStarted+"]")
	require.Equal(t, 401, status)
	status, out = publishBatch(t, ts.URL, "w", "application/json", "", 0, "["+evStarted+"]", "x-api-key", "k-worker")
	require.Equal(t, 200, status, "%v", out)
	status, out = publishBatch(t, ts.URL, "w", "application/json", "", 0, "["+evCompleted+"]", "x-api-key", "k-admin")
	require.Equal(t, 200, status, "%v", out)
	require.EqualValues(t, 2, srv.LastSeq("w"))
	// Refused before anything: the reader's attempt claimed no thread.
	status, out = publishBatch(t, ts.URL, "w2", "application/json", "", 0, "["+evStarted+"]", "x-api-key", "k-reader")
	require.Equal(t, 403, status, "%v", out)
	has, err := srv.HasThread(context.Background(), "w2")
	require.NoError(t, err)
	require.False(t, has)
}

// TestPublishRateIsPerProducer: past its rate a producer's batch is
// refused whole (429, not appended).
func TestPublishRateIsPerProducer(t *testing.T) {
	ts, _, srv := start(t, transport.Options{Ingest: transport.IngestOptions{Rate: 0.001, Burst: 3, MaxEvents: 2}})
	status, _ := publishBatch(t, ts.URL, "r", "application/json", "", 0, "["+evProgress+","+evProgress+"]")
	require.Equal(t, 200, status)
	status, out := publishBatch(t, ts.URL, "r", "application/json", "", 0, "["+evProgress+","+evProgress+"]")
	require.Equal(t, 429, status, "%v", out)
	require.Contains(t, out["message"], "--ingest-rate")
	require.EqualValues(t, 2, srv.LastSeq("r"))
}

// TestDotThreadIDsAreRefused: a thread id "." or "..", sent escaped (a
// client that does not resolve the path), is refused on every route that
// takes one, before it reaches a store or an upstream's URL.
func TestDotThreadIDsAreRefused(t *testing.T) {
	ts, _, srv := start(t, transport.Options{})
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/threads/%2E%2E/events", "[" + evProgress + "]"},
		{"POST", "/threads/%2E/events", "[" + evProgress + "]"},
		{"POST", "/threads/%2E%2E/commands", `{"id": 1, "method": "run.start", "params": {"assistant_id": "echo", "input": {}}}`},
		{"POST", "/threads/%2E%2E/stream", `{"channels": ["lifecycle"]}`},
		{"GET", "/threads/%2E%2E/state", ""},
	} {
		req, err := http.NewRequest(tc.method, ts.URL+"/", strings.NewReader(tc.body))
		require.NoError(t, err)
		req.URL.Opaque = tc.path // sent as it is
		if tc.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 400, resp.StatusCode, "%s %s: %s", tc.method, tc.path, b)
		require.Contains(t, string(b), "invalid_argument", tc.path)
	}
	has, err := srv.HasThread(context.Background(), "..")
	require.NoError(t, err)
	require.False(t, has)
}

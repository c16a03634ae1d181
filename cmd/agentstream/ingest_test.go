package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentstream/agentstream/internal/testkit/redistest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// The ingest test's producers: each adds ingestPerProducer events, a
// custom event {"p": P, "n": N} for N from 0, to its own twenty threads
// and four shared ones in turn (fewer than a thread's buffer each), plus poisonPerProducer entries that are not
// valid, with pipelined XADDs.
const (
	ingestPerProducer = 50_000
	ingestThreads     = 24
	poisonPerProducer = 15
)

func ingestThread(p, n int) string {
	k := n % ingestThreads
	if k >= 20 {
		return fmt.Sprintf("shared-%d", k-20)
	}
	return fmt.Sprintf("p%d-%d", p, k)
}

// produceIngest is a producer process (AGENTSTREAM_TEST_PRODUCER=P, with
// AGENTSTREAM_TEST_REDIS; with AGENTSTREAM_TEST_PRODUCER_JOBS=1 it adds
// job envelopes to the same threads as jobs): it returns its exit code.
func produceIngest() int {
	p, _ := strconv.Atoi(os.Getenv("AGENTSTREAM_TEST_PRODUCER"))
	jobs := os.Getenv("AGENTSTREAM_TEST_PRODUCER_JOBS") == "1" // job envelopes, not thread events
	opt, err := rueidis.ParseURL(os.Getenv("AGENTSTREAM_TEST_REDIS"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	var cmds rueidis.Commands
	send := func() bool {
		for _, r := range c.DoMulti(context.Background(), cmds...) {
			if err := r.Error(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return false
			}
		}
		cmds = cmds[:0]
		return true
	}
	for n := range ingestPerProducer {
		ev := fmt.Sprintf(`{"type":"event","method":"custom","params":{"namespace":[],"data":{"name":"tick","payload":{"p":%d,"n":%d}}}}`, p, n)
		entry := c.B().Xadd().Key("ingest").Id("*").FieldValue().FieldValue("thread", ingestThread(p, n)).FieldValue("event", ev).Build()
		if jobs {
			env := fmt.Sprintf(`{"ts":%d,"node_id":"n%d","node_type":"test_tick","payload_version":"Tick.v1","payload":{"p":%d,"n":%d}}`, 1745701201000+n, p, p, n)
			entry = c.B().Xadd().Key("ingest").Id("*").FieldValue().FieldValue("job", ingestThread(p, n)).FieldValue("envelope", env).Build()
		}
		cmds = append(cmds, entry)
		if n%10_000 == 5_000 { // three kinds of poison
			cmds = append(cmds,
				c.B().Xadd().Key("ingest").Id("*").FieldValue().FieldValue("event", ev).Build(),
				c.B().Xadd().Key("ingest").Id("*").FieldValue().FieldValue("thread", "poison").FieldValue("event", `{"type":"event"`).Build(),
				c.B().Xadd().Key("ingest").Id("*").FieldValue().FieldValue("thread", "poison").FieldValue("event", `{"type":"event","method":"custom","params":{"namespace":[],"data":{}}}`).Build())
		}
		if len(cmds) >= 500 && !send() {
			return 1
		}
	}
	if !send() {
		return 1
	}
	return 0
}

// ingestGroup returns the ingest group's entries read, pending and lag.
func ingestGroup(t *testing.T, c rueidis.Client) (read, pending, lag int64) {
	t.Helper()
	groups, err := c.Do(context.Background(), c.B().XinfoGroups().Key("ingest").Build()).ToArray()
	if err != nil || len(groups) == 0 {
		return 0, 0, -1
	}
	g, err := groups[0].AsMap()
	require.NoError(t, err)
	get := func(k string) int64 {
		m := g[k]
		v, err := m.AsInt64()
		if err != nil {
			return -1
		}
		return v
	}
	return get("entries-read"), get("pending"), get("lag")
}

// isReader reports whether a node reads the ingest stream now (its
// agentstream_redis_ingest_reader gauge).
func isReader(base string) bool {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.Contains(string(b), "\nagentstream_redis_ingest_reader 1\n")
}

// TestIngestFromTwoProducersSurvivesAKilledReader: two producer processes
// add 100,000 events (and poison entries) to the ingest stream that three
// node processes read; the node reading it is killed (SIGKILL) while the
// consumer group holds entries pending for it. Another node takes over:
// every event is in its thread's stream exactly once, each producer's in
// its order, and every poison entry is in the dead-letter stream with its
// reason.
func TestIngestFromTwoProducersSurvivesAKilledReader(t *testing.T) {
	if testing.Short() {
		t.Skip("a 100,000-event ingest with three node processes: not in -short")
	}
	g := startIngestRig(t)
	c := g.c
	producers := startProducers(t, g.rs.URL(), false)
	reader := g.killReaderMidway(t)
	res, err := c.Do(context.Background(), c.B().Xpending().Key("ingest").Group("agentstream").Build()).ToArray()
	require.NoError(t, err)
	pendingAtKill, _ := res[0].AsInt64()
	t.Logf("killed the reader %s with %d entries pending", reader, pendingAtKill)
	require.Positive(t, pendingAtKill, "the group held entries pending for the killed reader")

	for _, p := range producers {
		require.NoError(t, p.Wait(), "the producer ran to its end")
	}
	began := time.Now()
	g.waitIngested(t)
	t.Logf("the producers had added everything; the ingest caught up %v later", time.Since(began).Round(time.Millisecond))

	// Every event once, each producer's in its order.
	seen := map[[2]int]bool{}
	threads := []string{"shared-0", "shared-1", "shared-2", "shared-3"}
	for p := range 2 {
		for k := range 20 {
			threads = append(threads, fmt.Sprintf("p%d-%d", p, k))
		}
	}
	for _, th := range threads {
		entries, err := c.Do(context.Background(), c.B().Xrange().Key("agentstream:{"+th+"}:events").Start("-").End("+").Build()).AsXRange()
		require.NoError(t, err)
		last := map[int]int{0: -1, 1: -1}
		for _, en := range entries {
			var e struct {
				Method string
				Params struct {
					Data struct{ Payload struct{ P, N int } }
				}
			}
			require.NoError(t, json.Unmarshal([]byte(en.FieldValues["e"]), &e))
			require.Equal(t, "custom", e.Method, "thread %s holds the producers' events only (no run was failed on it when its writer died): %s", th, en.FieldValues["e"])
			pn := [2]int{e.Params.Data.Payload.P, e.Params.Data.Payload.N}
			require.False(t, seen[pn], "event %v appended twice (thread %s)", pn, th)
			seen[pn] = true
			require.Greater(t, pn[1], last[pn[0]], "thread %s: producer %d's events in its order", th, pn[0])
			last[pn[0]] = pn[1]
			require.Equal(t, ingestThread(pn[0], pn[1]), th)
		}
	}
	require.Equal(t, 2*ingestPerProducer, len(seen), "every event appended")

	dead, err := c.Do(context.Background(), c.B().Xrange().Key("ingest:dead").Start("-").End("+").Build()).AsXRange()
	require.NoError(t, err)
	require.Len(t, dead, 2*poisonPerProducer)
	for _, d := range dead {
		require.NotEmpty(t, d.FieldValues["reason"])
		require.NotEmpty(t, d.FieldValues["source_id"])
	}
}

// ingestRig is Redis, a client of it, and three node processes reading
// its ingest stream.
type ingestRig struct {
	rs    *redistest.Server
	c     rueidis.Client
	nodes map[string]*exec.Cmd // by base URL; a killed node is taken out
}

// startIngestRig starts Redis and three nodes reading the stream
// "ingest" with a one-second lease, and the extra flags. The nodes are
// built without the race detector: the tests are about 100,000 events
// through three nodes on a machine with two cores, beside the rest of the
// suite.
func startIngestRig(t *testing.T, flags ...string) *ingestRig {
	t.Helper()
	g := &ingestRig{rs: redistest.Start(t), nodes: map[string]*exec.Cmd{}}
	opt, err := rueidis.ParseURL(g.rs.URL())
	require.NoError(t, err)
	g.c, err = rueidis.NewClient(opt)
	require.NoError(t, err)
	t.Cleanup(g.c.Close)
	bin, _ := commandTestSetup(t)
	for i := range 3 {
		args := append([]string{"--redis", g.rs.URL(), "--lease-ttl", "1s", "--ingest-stream", "ingest", "--node-id", fmt.Sprintf("n%d", i)}, flags...)
		base, cmd := startBinaryNode(t, bin, args...)
		g.nodes[base] = cmd
	}
	return g
}

// killReaderMidway kills (SIGKILL) the node reading the stream once the
// group has read 20,000 entries, and returns its base URL.
func (g *ingestRig) killReaderMidway(t *testing.T) string {
	t.Helper()
	var reader string
	require.Eventually(t, func() bool {
		read, _, _ := ingestGroup(t, g.c)
		if read < 20_000 {
			return false
		}
		for base := range g.nodes {
			if isReader(base) {
				reader = base
			}
		}
		if reader == "" {
			return false
		}
		// Killed while it holds entries: between two batches it holds
		// none, and the test would not see a takeover of pending ones.
		// Stopped first, so that it cannot acknowledge what it holds
		// between the look and the kill.
		p := g.nodes[reader].Process
		require.NoError(t, p.Signal(syscall.SIGSTOP))
		if _, pending, _ := ingestGroup(t, g.c); pending > 0 {
			return true
		}
		require.NoError(t, p.Signal(syscall.SIGCONT))
		return false
	}, 60*time.Second, time.Millisecond, "a node reads the stream, holding entries")
	require.NoError(t, g.nodes[reader].Process.Signal(syscall.SIGKILL))
	delete(g.nodes, reader)
	return reader
}

// waitIngested waits until the group has read and acknowledged every
// entry, logging its progress every 3 s.
func (g *ingestRig) waitIngested(t *testing.T) {
	t.Helper()
	last := time.Now()
	require.Eventually(t, func() bool {
		read, pending, lag := ingestGroup(t, g.c)
		if time.Since(last) > 3*time.Second {
			last = time.Now()
			readers := 0
			for base := range g.nodes {
				if isReader(base) {
					readers++
				}
			}
			t.Logf("read %d pending %d lag %d readers %d", read, pending, lag, readers)
		}
		return pending == 0 && lag == 0
	}, 120*time.Second, 50*time.Millisecond, "every entry read and acknowledged")
}

// startProducers starts the two producer processes (jobs: envelopes).
func startProducers(t *testing.T, redisURL string, jobs bool) []*exec.Cmd {
	t.Helper()
	var producers []*exec.Cmd
	for p := range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "AGENTSTREAM_TEST_PRODUCER="+strconv.Itoa(p), "AGENTSTREAM_TEST_REDIS="+redisURL)
		if jobs {
			cmd.Env = append(cmd.Env, "AGENTSTREAM_TEST_PRODUCER_JOBS=1")
		}
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		producers = append(producers, cmd)
	}
	return producers
}

// TestJobStreamFromTwoProducersOnThreeNodes: the job stream over Redis.
// Two producer processes XADD 100,000 envelopes of 24 jobs to the ingest
// stream that three nodes (--profiles jobs) read; the reading node is
// killed mid-way; then each job is completed. Every job's stream, read
// from both surviving nodes, serves every envelope once, in seq order,
// each producer's in its order, then complete.
func TestJobStreamFromTwoProducersOnThreeNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 envelopes through three node processes: not in -short")
	}
	g := startIngestRig(t, "--profiles", "jobs")
	c := g.c
	producers := startProducers(t, g.rs.URL(), true)
	g.killReaderMidway(t)
	for _, p := range producers {
		require.NoError(t, p.Wait(), "the producer ran to its end")
	}
	jobsList := []string{"shared-0", "shared-1", "shared-2", "shared-3"}
	for p := range 2 {
		for k := range 20 {
			jobsList = append(jobsList, fmt.Sprintf("p%d-%d", p, k))
		}
	}
	for _, job := range jobsList {
		require.NoError(t, c.Do(context.Background(), c.B().Xadd().Key("ingest").Id("*").FieldValue().FieldValue("job", job).FieldValue("complete", `{"status":"completed"}`).Build()).Error())
	}
	g.waitIngested(t)

	for base := range g.nodes {
		seen := map[[2]int]bool{}
		for _, job := range jobsList {
			envs := readJobStream(t, base, job)
			last := map[int]int{0: -1, 1: -1}
			lastSeq := uint64(0)
			for _, env := range envs {
				require.Greater(t, env.Seq, lastSeq, "job %s on %s: in seq order", job, base)
				lastSeq = env.Seq
				pn := [2]int{env.Payload.P, env.Payload.N}
				require.False(t, seen[pn], "envelope %v twice (job %s, node %s)", pn, job, base)
				seen[pn] = true
				require.Greater(t, pn[1], last[pn[0]], "job %s: producer %d's envelopes in its order", job, pn[0])
				last[pn[0]] = pn[1]
			}
		}
		require.Equal(t, 2*ingestPerProducer, len(seen), "every envelope served by node %s", base)
	}
}

// jobEnvelope is what the test reads of an envelope.
type jobEnvelope struct {
	Seq     uint64
	Payload struct{ P, N int }
}

// readJobStream reads a job's stream from the start up to its complete
// frame.
func readJobStream(t *testing.T, base, job string) []jobEnvelope {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/jobs/"+job+"/stream", nil)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	var out []jobEnvelope
	event := ""
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = line[7:]
		case strings.HasPrefix(line, "data: ") && event == "append":
			var env jobEnvelope
			require.NoError(t, json.Unmarshal([]byte(line[6:]), &env))
			out = append(out, env)
		case strings.HasPrefix(line, "data: ") && event == "complete":
			return out
		}
	}
	t.Fatalf("job %s on %s: the stream ended before complete (%v)", job, base, sc.Err())
	return nil
}

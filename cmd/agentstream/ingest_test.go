package main

import (
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

	"github.com/agentstream/agentstream/internal/redistest"
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
// AGENTSTREAM_TEST_REDIS): it returns its exit code.
func produceIngest() int {
	p, _ := strconv.Atoi(os.Getenv("AGENTSTREAM_TEST_PRODUCER"))
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
		cmds = append(cmds, c.B().Xadd().Key("ingest").Id("*").FieldValue().FieldValue("thread", ingestThread(p, n)).FieldValue("event", ev).Build())
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
	rs := redistest.Start(t)
	opt, err := rueidis.ParseURL(rs.URL())
	require.NoError(t, err)
	c, err := rueidis.NewClient(opt)
	require.NoError(t, err)
	defer c.Close()

	// The nodes are built without the race detector: this test is about
	// 100,000 events through three nodes on a machine with two cores,
	// beside the rest of the suite.
	bin, _ := commandTestSetup(t)
	nodes := map[string]*exec.Cmd{}
	for i := range 3 {
		base, cmd := startBinaryNode(t, bin, "--redis", rs.URL(), "--lease-ttl", "1s", "--ingest-stream", "ingest", "--node-id", fmt.Sprintf("n%d", i))
		nodes[base] = cmd
	}
	var producers []*exec.Cmd
	for p := range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "AGENTSTREAM_TEST_PRODUCER="+strconv.Itoa(p), "AGENTSTREAM_TEST_REDIS="+rs.URL())
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		producers = append(producers, cmd)
	}

	// Kill the reader once it is well into the stream, while it holds
	// entries it has not acknowledged.
	var reader string
	var pendingAtKill int64
	require.Eventually(t, func() bool {
		read, _, _ := ingestGroup(t, c)
		if read < 20_000 {
			return false
		}
		for base := range nodes {
			if isReader(base) {
				reader = base
			}
		}
		return reader != ""
	}, 60*time.Second, 5*time.Millisecond, "a node reads the stream")
	require.NoError(t, nodes[reader].Process.Signal(syscall.SIGKILL))
	res, err := c.Do(context.Background(), c.B().Xpending().Key("ingest").Group("agentstream").Build()).ToArray()
	require.NoError(t, err)
	pendingAtKill, _ = res[0].AsInt64()
	t.Logf("killed the reader %s with %d entries pending", reader, pendingAtKill)
	require.Positive(t, pendingAtKill, "the group held entries pending for the killed reader")

	for _, p := range producers {
		require.NoError(t, p.Wait(), "the producer ran to its end")
	}
	began := time.Now()
	last := time.Now()
	require.Eventually(t, func() bool {
		read, pending, lag := ingestGroup(t, c)
		if time.Since(last) > 3*time.Second {
			last = time.Now()
			readers := 0
			for base := range nodes {
				if isReader(base) {
					readers++
				}
			}
			t.Logf("read %d pending %d lag %d readers %d", read, pending, lag, readers)
		}
		return pending == 0 && lag == 0
	}, 120*time.Second, 50*time.Millisecond, "every entry read and acknowledged")
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
			if e.Method != "custom" {
				continue
			}
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

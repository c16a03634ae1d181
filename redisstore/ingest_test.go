package redisstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/internal/testkit/redistest"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/redisstore"
	"github.com/agentstream/agentstream/server"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// tick is a custom event carrying which producer sent it and its number.
func tick(p, n int) string {
	return fmt.Sprintf(`{"type":"event","method":"custom","params":{"namespace":[],"data":{"name":"tick","payload":{"p":%d,"n":%d}}}}`, p, n)
}

func redisClient(t *testing.T, url string) rueidis.Client {
	t.Helper()
	seeds := strings.Split(strings.TrimPrefix(url, "redis://"), ",") // a cluster's seeds, as --redis takes them
	opt, err := rueidis.ParseURL("redis://" + seeds[0])
	require.NoError(t, err)
	opt.InitAddress = append(opt.InitAddress, seeds[1:]...)
	c, err := rueidis.NewClient(opt)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func xadd(t *testing.T, c rueidis.Client, stream string, fields ...string) string {
	t.Helper()
	cmd := c.B().Xadd().Key(stream).Id("*").FieldValue()
	for i := 0; i+1 < len(fields); i += 2 {
		cmd = cmd.FieldValue(fields[i], fields[i+1])
	}
	id, err := c.Do(context.Background(), cmd.Build()).ToString()
	require.NoError(t, err)
	return id
}

// ticks reads the ticks in a thread's Redis stream, in order, as "p/n".
func ticks(t *testing.T, c rueidis.Client, thread string) []string {
	t.Helper()
	entries, err := c.Do(context.Background(), c.B().Xrange().Key("agentstream:{"+thread+"}:events").Start("-").End("+").Build()).AsXRange()
	require.NoError(t, err)
	var out []string
	for _, en := range entries {
		var e struct {
			Method string
			Params struct {
				Data struct {
					Payload struct{ P, N int }
				}
			}
		}
		require.NoError(t, json.Unmarshal([]byte(en.FieldValues["e"]), &e))
		if e.Method == "custom" {
			out = append(out, fmt.Sprintf("%d/%d", e.Params.Data.Payload.P, e.Params.Data.Payload.N))
		}
	}
	return out
}

// ingestNode is a server on the engine reading the ingest stream.
func ingestNode(t *testing.T, url, node string) (*server.Server, *redisstore.Ingest) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	eng, err := redisstore.New(ctx, redisstore.Options{URL: url, TTL: time.Hour, Cluster: redisstore.ClusterOptions{Node: node, LeaseTTL: time.Second}})
	require.NoError(t, err)
	srv := server.New(server.Config{Engine: eng})
	in, err := eng.Ingest(srv, redisstore.IngestOptions{Stream: "ingest", LeaseTTL: time.Second, OnError: func(err error) { t.Logf("%s: %v", node, err) }})
	require.NoError(t, err)
	t.Cleanup(func() {
		in.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Close(ctx)
	})
	return srv, in
}

// groupDone waits until the group has read every entry and holds none
// pending.
func groupDone(t *testing.T, c rueidis.Client) {
	t.Helper()
	require.Eventually(t, func() bool {
		groups, err := c.Do(context.Background(), c.B().XinfoGroups().Key("ingest").Build()).ToArray()
		if err != nil || len(groups) == 0 {
			return false
		}
		g, err := groups[0].AsMap()
		if err != nil {
			return false
		}
		pm, lm := g["pending"], g["lag"]
		pending, _ := pm.AsInt64()
		lag, err := lm.AsInt64()
		if err != nil {
			return false
		}
		return pending == 0 && lag == 0
	}, 30*time.Second, 20*time.Millisecond, "every entry read and acknowledged")
}

// TestIngestAppendsOnceInOrder: entries producers add to the ingest
// stream reach their threads once each, in order; two nodes read it, one
// at a time; entries that are not valid go to the dead-letter stream with
// their reason, and are acknowledged.
func TestIngestAppendsOnceInOrder(t *testing.T) {
	ingestAppendsOnceInOrder(t, redistest.Start(t).URL())
}

func ingestAppendsOnceInOrder(t *testing.T, url string) {
	c := redisClient(t, url)
	_, inA := ingestNode(t, url, "a")
	_, inB := ingestNode(t, url, "b")
	require.Eventually(t, func() bool { return inA.Stats().Reader || inB.Stats().Reader }, 5*time.Second, 10*time.Millisecond)

	const perThread = 400
	for n := range perThread {
		for th := range 5 {
			xadd(t, c, "ingest", "thread", fmt.Sprintf("t%d", th), "event", tick(th, n))
		}
	}
	xadd(t, c, "ingest", "event", tick(9, 0))
	xadd(t, c, "ingest", "thread", "t0", "event", `{"type":"event","method":"custom"`)
	xadd(t, c, "ingest", "thread", "t0", "event", `{"type":"event","method":"messages","params":{"namespace":[],"data":{"event":"content-block-delta","index":"x"}}}`)
	xadd(t, c, "ingest", "thread", "bad thread id!", "event", tick(9, 1))
	groupDone(t, c)

	for th := range 5 {
		got := ticks(t, c, fmt.Sprintf("t%d", th))
		require.Len(t, got, perThread)
		for n, v := range got {
			require.Equal(t, fmt.Sprintf("%d/%d", th, n), v)
		}
	}
	dead, err := c.Do(context.Background(), c.B().Xrange().Key("ingest:dead").Start("-").End("+").Build()).AsXRange()
	require.NoError(t, err)
	require.Len(t, dead, 4)
	var reasons []string
	for _, d := range dead {
		require.NotEmpty(t, d.FieldValues["source_id"])
		reasons = append(reasons, d.FieldValues["reason"])
	}
	require.Contains(t, reasons[0], "no thread field")
	require.Contains(t, reasons[1], "event")
	require.Contains(t, reasons[2], "params.data")
	require.Contains(t, reasons[3], "thread")
	st := inA.Stats()
	st2 := inB.Stats()
	require.Equal(t, uint64(5*perThread), st.Appended+st2.Appended)
	require.Equal(t, uint64(4), st.DeadLetters+st2.DeadLetters)
}

// TestIngestTakesUpADeadReadersEntries: a reader that died after
// appending some of the entries it was given, before acknowledging them,
// leaves them pending; the next reader claims them, skips those whose
// events are in their thread's stream already, and appends the rest: each
// once, in order.
func TestIngestTakesUpADeadReadersEntries(t *testing.T) {
	rs := redistest.Start(t)
	c := redisClient(t, rs.URL())
	ctx := context.Background()
	var ids []string
	for n := range 100 {
		ids = append(ids, xadd(t, c, "ingest", "thread", "d", "event", tick(0, n)))
	}
	require.NoError(t, c.Do(ctx, c.B().XgroupCreate().Key("ingest").Group(redisstore.DefaultIngestGroup).Id("0").Build()).Error())
	given, err := c.Do(ctx, c.B().Xreadgroup().Group(redisstore.DefaultIngestGroup, "dead").Count(100).Streams().Key("ingest").Id(">").Build()).AsXRead()
	require.NoError(t, err)
	require.Len(t, given["ingest"], 100, "the dead reader was given them all")

	// What the dead reader appended before it died: the first 40, with
	// their entry ids, through a node that then stops.
	func() {
		eng, err := redisstore.New(ctx, redisstore.Options{URL: rs.URL(), TTL: time.Hour, Cluster: redisstore.ClusterOptions{Node: "dead", LeaseTTL: time.Second}})
		require.NoError(t, err)
		srv := server.New(server.Config{Engine: eng})
		var b server.ProducerBatch
		for n := range 40 {
			var pe protocol.ProducerEvent
			events, errResp := protocol.Decoder{}.ProducerEvents([][]byte{[]byte(tick(0, n))}, 1<<20)
			require.Nil(t, errResp)
			pe = events[0]
			b.Events = append(b.Events, pe)
			b.Sources = append(b.Sources, ids[n])
		}
		_, err = srv.Publish(ctx, "d", b)
		require.NoError(t, err)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, srv.Close(cctx))
	}()

	_, in := ingestNode(t, rs.URL(), "next")
	groupDone(t, c)
	got := ticks(t, c, "d")
	require.Len(t, got, 100)
	for n, v := range got {
		require.Equal(t, fmt.Sprintf("0/%d", n), v)
	}
	require.Equal(t, uint64(40), in.Stats().Duplicates, "the 40 appended before the crash are skipped")
	require.Equal(t, uint64(60), in.Stats().Appended)
}

package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/server"
	"github.com/stretchr/testify/require"
)

// upstreamEvent is an event as a LangGraph server's stream carries it:
// its own seq and a bare-number event_id.
func upstreamEvent(seq int, text string) []byte {
	return []byte(fmt.Sprintf(`{"type":"event","event_id":"%d","seq":%d,"method":"custom","params":{"namespace":[],"timestamp":1795785512398,"data":{"name":"up","payload":%q}}}`, seq, seq, text))
}

// readN reads n events a session has queued within a short wait.
func readN(t *testing.T, ss *server.Session, n int) []*server.Event {
	t.Helper()
	var out []*server.Event
	for len(out) < n {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		e, err := ss.Next(ctx)
		cancel()
		require.NoError(t, err, "after %d events", len(out))
		if e.Seq != 0 {
			out = append(out, e)
		}
	}
	return out
}

// TestMirrorKeepsTheUpstreamsSeqAndIDs: mirrored events keep their seq,
// event id and bytes; an overlap is skipped, a gap kept; a bare-number
// cursor resumes after its event; with an offset the events are
// renumbered in this server's ids, rising on from the last.
func TestMirrorKeepsTheUpstreamsSeqAndIDs(t *testing.T) {
	srv := server.New(server.Config{})
	defer srv.Close(context.Background())
	live := srv.NewSession("m1")
	defer live.Close()
	_, _, err := live.Subscribe(channels.All, nil)
	require.NoError(t, err)

	var batch [][]byte
	for i := 1; i <= 5; i++ {
		batch = append(batch, upstreamEvent(i, fmt.Sprint("e", i)))
	}
	res, err := srv.Mirrors().Append("m1", batch, 0)
	require.NoError(t, err)
	require.Equal(t, server.MirrorResult{Appended: 5, Last: 5}, res)
	got := readN(t, live, 5)
	for i, e := range got {
		require.Equal(t, uint64(i+1), e.Seq)
		require.Equal(t, fmt.Sprint(i+1), e.EventID(), "the upstream's id")
		require.Equal(t, string(batch[i]), string(e.JSON()), "the upstream's bytes")
	}

	res, err = srv.Mirrors().Append("m1", [][]byte{upstreamEvent(4, "e4"), upstreamEvent(5, "e5"), upstreamEvent(6, "e6"), upstreamEvent(9, "e9")}, 0)
	require.NoError(t, err)
	require.Equal(t, server.MirrorResult{Appended: 2, Last: 9}, res, "the overlap skipped, the gap kept")
	var notice *server.Event
	for _, e := range []int{6, 0, 9} { // 6, the gap's notice, 9
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		got, err := live.Next(ctx)
		cancel()
		require.NoError(t, err)
		require.Equal(t, uint64(e), got.Seq)
		if e == 0 {
			notice = got
		}
	}
	require.Equal(t, "events.missed", notice.Method, "the gap is announced")
	require.Contains(t, string(notice.JSON()), `"missed":2`)

	c, err := server.ParseCursor("4")
	require.NoError(t, err)
	late := srv.NewSession("m1")
	defer late.Close()
	_, _, err = late.Subscribe(channels.All, &c)
	require.NoError(t, err)
	var seqs []uint64
	for _, e := range readN(t, late, 3) {
		seqs = append(seqs, e.Seq)
	}
	require.Equal(t, []uint64{5, 6, 9}, seqs, "resumed after the bare-number id")

	// The upstream lost the thread and numbers from 1 again: renumbered.
	res, err = srv.Mirrors().Append("m1", [][]byte{upstreamEvent(1, "again")}, 9)
	require.NoError(t, err)
	require.Equal(t, uint64(10), res.Last)
	e := readN(t, late, 1)[0]
	require.Equal(t, uint64(10), e.Seq)
	require.True(t, strings.HasSuffix(e.EventID(), "-10"), e.EventID())
	require.Contains(t, string(e.JSON()), `"seq":10`)
	require.Contains(t, string(e.JSON()), `"again"`)

	_, err = srv.Mirrors().Append("m1", [][]byte{[]byte(`{"type":"event"}`)}, 0)
	require.Error(t, err, "an event without seq and id")
}

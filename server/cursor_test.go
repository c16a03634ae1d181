package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/internal/testkit/servetest"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/stretchr/testify/require"
)

func TestParseCursor(t *testing.T) {
	for in, want := range map[string]server.Cursor{
		"20":                           {Seq: 20},
		"0":                            {Seq: 0},
		"k3x9q2ab-20":                  {Epoch: "k3x9q2ab", Seq: 20},
		"a.b_C-1":                      {Epoch: "a.b_C", Seq: 1},
		"x-y-7":                        {}, // the epoch may not hold '-'
		"-5":                           {},
		"abc-":                         {},
		"":                             {},
		"1e3":                          {},
		"+4":                           {},
		"k3x9q2ab--1":                  {},
		"18446744073709551616":         {}, // 2^64
		strings.Repeat("e", 33) + "-1": {},
	} {
		c, err := server.ParseCursor(in)
		if want == (server.Cursor{}) && in != "0" {
			require.Error(t, err, "%q", in)
			continue
		}
		require.NoError(t, err, "%q", in)
		require.Equal(t, want, c, "%q", in)
		require.Equal(t, in, c.String(), "a cursor prints as the id it was read from")
	}
}

// inStream keeps the events of the stream (not the notices).
func inStream(es []*server.Event) []*server.Event {
	var out []*server.Event
	for _, e := range es {
		if e.Seq > 0 {
			out = append(out, e)
		}
	}
	return out
}

// resumeAcross subscribes to thread "t" of s with cursor and returns what
// it gets before live events.
func resumeAcross(t *testing.T, s *server.Server, cursor *server.Cursor) (notice *protocol.EventsMissedData, seqs []uint64) {
	t.Helper()
	sub, _, err := s.Subscribe("t", all, cursor)
	require.NoError(t, err)
	defer sub.Close()
	for {
		e, ok, _ := sub.TryNext()
		if !ok {
			return notice, seqs
		}
		switch p := e.Payload.(type) {
		case *protocol.ServerEventEventsMissed:
			require.Nil(t, notice, "one notice")
			require.Empty(t, seqs, "the notice comes first")
			notice = &p.Params.Data
		default:
			if e.Seq > 0 {
				seqs = append(seqs, e.Seq)
			}
		}
	}
}

// TestCursorFromAnotherEpoch is finding 7 of the abuse review: after a
// restart the stream starts again at seq 1, and a client resuming with a
// cursor of the old stream must be told, not handed seq 1... as if they
// came after its cursor (or have them dropped as duplicates).
func TestCursorFromAnotherEpoch(t *testing.T) {
	before := newServer(t, server.Config{})
	w, _, _ := before.Subscribe("t", all, nil)
	start(t, before, "t", "firehose", map[string]any{"count": float64(20)})
	old := inStream(collect(t, w, rootEnded))
	w.Close()
	last, err := server.ParseCursor(old[len(old)-1].EventID())
	require.NoError(t, err)
	require.Equal(t, uint64(23), last.Seq)
	require.Len(t, last.Epoch, 8)

	after := newServer(t, server.Config{}) // the restart
	w, _, _ = after.Subscribe("t", all, nil)
	start(t, after, "t", "firehose", map[string]any{"count": float64(2)})
	fresh := inStream(collect(t, w, rootEnded))
	w.Close()
	require.Equal(t, uint64(5), after.LastSeq("t"))
	epoch, _, _ := strings.Cut(fresh[0].EventID(), "-")
	require.NotEqual(t, last.Epoch, epoch, "a new stream has a new epoch")
	for i, e := range fresh {
		require.NotEqual(t, old[i].EventID(), e.EventID(), "no id of the new stream is an id of the old one (the SDK dedupes by id)")
	}
	all5 := []uint64{1, 2, 3, 4, 5}
	reset := true

	// The old stream's full id: a reset notice, then all of the new stream.
	notice, seqs := resumeAcross(t, after, &last)
	require.Equal(t, &protocol.EventsMissedData{Since: 23, FirstAvailableSeq: 1, Missed: 0, Epoch: &epoch, Reset: &reset}, notice)
	require.Equal(t, all5, seqs)

	// A bare number beyond the new stream's end is from another stream too.
	notice, seqs = resumeAcross(t, after, server.SeqCursor(23))
	require.Equal(t, &protocol.EventsMissedData{Since: 23, FirstAvailableSeq: 1, Missed: 0, Epoch: &epoch, Reset: &reset}, notice)
	require.Equal(t, all5, seqs)

	// A cursor of this epoch, or a bare number within it, resumes normally.
	notice, seqs = resumeAcross(t, after, &server.Cursor{Epoch: epoch, Seq: 3})
	require.Nil(t, notice)
	require.Equal(t, []uint64{4, 5}, seqs)
	notice, seqs = resumeAcross(t, after, server.SeqCursor(4))
	require.Nil(t, notice)
	require.Equal(t, []uint64{5}, seqs)

	// This epoch's id beyond the end cannot have been given out: reset too,
	// rather than a silent wait for seq 24.
	notice, _ = resumeAcross(t, after, &server.Cursor{Epoch: epoch, Seq: 23})
	require.NotNil(t, notice)
	require.True(t, *notice.Reset)
}

// TestCursorAcrossAnEvictedThread: a thread forgotten after its TTL and
// used again is a new stream with a new epoch.
func TestCursorAcrossAnEvictedThread(t *testing.T) {
	clock := newClock()
	s := newServer(t, server.Config{Now: clock.Now, IdleRelease: time.Minute, ThreadTTL: time.Hour})
	w, _, _ := s.Subscribe("t", all, nil)
	start(t, s, "t", "firehose", map[string]any{"count": float64(3)})
	old := inStream(collect(t, w, rootEnded))
	w.Close()
	clock.Advance(61 * time.Minute)
	servetest.Sweep(s)
	require.Equal(t, 0, s.Threads())

	w, _, _ = s.Subscribe("t", all, nil)
	start(t, s, "t", "firehose", map[string]any{"count": float64(3)})
	fresh := inStream(collect(t, w, rootEnded))
	w.Close()
	require.Equal(t, old[0].Seq, fresh[0].Seq)
	require.NotEqual(t, old[0].EventID(), fresh[0].EventID())

	last, err := server.ParseCursor(old[2].EventID())
	require.NoError(t, err)
	notice, seqs := resumeAcross(t, s, &last)
	require.NotNil(t, notice, "a cursor of the forgotten stream")
	require.True(t, *notice.Reset)
	require.Equal(t, uint64(1), seqs[0], "all of the new stream follows")
}

// TestReconnectWithAnIDOfAnotherEpoch: subscription.reconnect's
// last_event_id is read as a cursor too.
func TestReconnectWithAnIDOfAnotherEpoch(t *testing.T) {
	s := newServer(t, server.Config{})
	ss := s.NewSession("t")
	id, _, err := ss.Subscribe(all, nil)
	require.NoError(t, err)
	start(t, s, "t", "firehose", map[string]any{"count": float64(2)})
	collect(t, ss, rootEnded)
	ss.Detach()

	ss2 := s.NewSession("t")
	defer ss2.Close()
	foreign := "zzzzzzzz-3"
	_, e := typed(ss2.Do(context.Background(), &protocol.ClientCommand{Value: &protocol.ClientCommandSubscriptionReconnect{ID: 1,
		Params: protocol.ReconnectParams{RunID: "r", LastEventID: &foreign, Subscriptions: []string{id}}}}))
	require.Nil(t, e)
	ev, ok, _ := ss2.TryNext()
	require.True(t, ok)
	notice, isNotice := ev.Payload.(*protocol.ServerEventEventsMissed)
	require.True(t, isNotice, "first the notice, got %s", ev.Method)
	require.True(t, *notice.Params.Data.Reset)
	require.Equal(t, uint64(3), notice.Params.Data.Since)

	bad := "zz-zz-1"
	_, e = typed(ss2.Do(context.Background(), &protocol.ClientCommand{Value: &protocol.ClientCommandSubscriptionReconnect{ID: 2,
		Params: protocol.ReconnectParams{RunID: "r", LastEventID: &bad}}}))
	require.NotNil(t, e)
	require.Equal(t, protocol.ErrorCodeInvalidArgument, e.Code)
	require.Contains(t, e.Message, "params.last_event_id")
}

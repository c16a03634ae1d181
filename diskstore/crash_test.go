package diskstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/threads"
	"github.com/stretchr/testify/require"
)

// TestACrashStartsANewEpoch: a store closed without its clean mark (a
// crash) gives each thread a new epoch on its next use: the stream goes
// on from the last event on disk under new ids, and a cursor of the old
// epoch gets the reset notice, so no id can name two events.
func TestACrashStartsANewEpoch(t *testing.T) {
	dir := t.TempDir()
	publish := func(srv *server.Server, n int) {
		name := "tick"
		b := server.ProducerBatch{}
		for i := 0; i < n; i++ {
			b.Events = append(b.Events, protocol.ProducerEvent{Event: &protocol.ServerEventCustom{Params: protocol.EventCustomParams{
				Namespace: protocol.Namespace{}, Data: protocol.CustomData{Name: &name, Payload: i}}}})
		}
		_, err := srv.Publish(context.Background(), "c1", b)
		require.NoError(t, err)
	}
	eng, err := Open(Options{Dir: dir})
	require.NoError(t, err)
	srv := server.New(server.Config{Engine: eng})
	publish(srv, 10)
	oldEpoch, seq, err := eng.log.Head(context.Background(), "c1")
	require.NoError(t, err)
	require.Equal(t, uint64(10), seq)
	// The crash: what was committed stays, no clean mark is written (and
	// the first server's Close, below, finds the store closed).
	crash(t, eng)

	eng2, err := Open(Options{Dir: dir})
	require.NoError(t, err)
	require.True(t, eng2.Crashed())
	srv2 := server.New(server.Config{Engine: eng2})
	defer srv2.Close(context.Background())
	ss := srv2.NewSession("c1")
	defer ss.Close()
	old, err := server.ParseCursor(oldEpoch + "-10")
	require.NoError(t, err)
	_, _, err = ss.Subscribe(channels.All, &old)
	require.NoError(t, err)
	publish(srv2, 1)
	var notice, next *server.Event
	for next == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		e, err := ss.Next(ctx)
		cancel()
		require.NoError(t, err)
		switch {
		case e.Method == "events.missed":
			notice = e
		case e.Seq == 11:
			next = e
		}
	}
	require.NotNil(t, notice, "the old epoch's cursor gets the notice")
	require.Contains(t, string(notice.JSON()), `"reset":true`)
	require.NotEqual(t, oldEpoch, next.Epoch(), "the stream goes on in a new epoch")
	require.NoError(t, srv.Close(context.Background()))
}

// TestACutRunEndsOnTheWire: a run going on when the store stopped
// without being closed (kill -9) ends once the store opens again: its
// open message ends (run_cut) and its root fails (the run cut), for every
// client that reads the thread; a store closed cleanly after that has no
// cut run.
func TestACutRunEndsOnTheWire(t *testing.T) {
	dir := t.TempDir()
	eng, err := Open(Options{Dir: dir})
	require.NoError(t, err)
	srv := server.New(server.Config{Engine: eng})
	started := make(chan struct{})
	srv.Register("hang", server.AssistantFunc(func(ctx context.Context, rc *server.RunContext) error {
		if _, err := rc.StartMessage(protocol.MessageRoleAI, "", nil); err != nil {
			return err
		}
		close(started) // the message stays open
		<-ctx.Done()
		return ctx.Err()
	}))
	ss := srv.NewSession("cut")
	_, err = ss.Do(context.Background(), &protocol.ClientCommand{Value: &protocol.ClientCommandRunStart{ID: 1, Params: protocol.RunStartParams{AssistantID: "hang"}}})
	require.NoError(t, err)
	<-started
	ss.Close()
	crash(t, eng) // what was appended is committed; no clean mark

	eng2, err := Open(Options{Dir: dir})
	require.NoError(t, err)
	srv2 := server.New(server.Config{Engine: eng2})
	require.Equal(t, 1, eng2.CutRuns())
	r := srv2.NewSession("cut")
	_, _, err = r.Subscribe(channels.All, server.SeqCursor(0))
	require.NoError(t, err)
	var messageEnd, failed *server.Event
	for failed == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		e, err := r.Next(ctx)
		cancel()
		require.NoError(t, err)
		switch {
		case e.Channel == channels.Messages && strings.Contains(string(e.JSON()), "run_cut"):
			messageEnd = e
		case e.Channel == channels.Lifecycle && len(e.Namespace) == 0 && e.EndsRun():
			failed = e
		}
	}
	r.Close()
	require.NotNil(t, messageEnd, "the open message ends")
	require.Contains(t, string(failed.JSON()), `"failed"`)
	require.Contains(t, string(failed.JSON()), server.ErrRunCut.Error())
	st, ok, err := srv2.State(context.Background(), "cut")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "idle", st.Status)
	require.NoError(t, srv2.Close(context.Background()))
	require.NoError(t, srv.Close(context.Background()))

	eng3, err := Open(Options{Dir: dir})
	require.NoError(t, err)
	srv3 := server.New(server.Config{Engine: eng3})
	require.Zero(t, eng3.CutRuns(), "the run ended: nothing to cut after a clean close")
	require.NoError(t, srv3.Close(context.Background()))
}

// TestACutRunEndsInItsRecord: the record of a run going on when the store
// stopped without being closed (kill -9) ends too once the store opens
// again, whoever reads it: status error with the reason its stream gives,
// never running for ever; a run started after the restart is not taken
// for one cut, and an earlier run's end stays as it was.
func TestACutRunEndsInItsRecord(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	eng, err := Open(Options{Dir: dir})
	require.NoError(t, err)
	srv := server.New(server.Config{Engine: eng})
	cat := threads.Of(srv)
	started := make(chan struct{}, 1)
	hang := server.AssistantFunc(func(ctx context.Context, rc *server.RunContext) error {
		if rc.Input() == "quick" {
			return nil
		}
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})
	srv.Register("hang", hang)
	ss := srv.NewSession("cut")
	_, _, err = ss.Subscribe(channels.Filter{Channels: []string{channels.Lifecycle}}, nil)
	require.NoError(t, err)
	runStart := func(ss *server.Session, input any) string {
		resp, err := ss.Do(ctx, &protocol.ClientCommand{Value: &protocol.ClientCommandRunStart{ID: 1, Params: protocol.RunStartParams{AssistantID: "hang", Input: input}}})
		require.NoError(t, err)
		return *resp.Result.(protocol.RunResult).RunID
	}
	untilEnd := func(ss *server.Session) {
		for {
			c, cancel := context.WithTimeout(ctx, 5*time.Second)
			e, err := ss.Next(c)
			cancel()
			require.NoError(t, err)
			if e.EndsRun() {
				return
			}
		}
	}
	done := runStart(ss, "quick") // ends before the crash
	untilEnd(ss)
	cut := runStart(ss, "hang")
	<-started
	ss.Close()
	cat.SyncRuns(ctx)
	status := func(cat *threads.Catalog, id string) server.RunRecord {
		cat.SyncRuns(ctx)
		runs, err := cat.Runs(ctx, "cut")
		require.NoError(t, err)
		for _, r := range runs {
			if r.ID == id {
				return r
			}
		}
		t.Fatalf("no record of run %s", id)
		return server.RunRecord{}
	}
	require.Equal(t, server.RunRunning, status(cat, cut).Status)
	crash(t, eng)

	eng2, err := Open(Options{Dir: dir})
	require.NoError(t, err)
	srv2 := server.New(server.Config{Engine: eng2}) // ends the cut run on the wire
	srv2.Register("hang", hang)
	require.Equal(t, 1, eng2.CutRuns())
	cat2 := threads.Of(srv2) // after the engine started: it hears of the cut all the same
	rec := status(cat2, cut)
	require.Equal(t, server.RunError, rec.Status, "the cut run's record ends")
	require.Equal(t, server.ErrRunCut.Error(), rec.Error)
	require.Equal(t, server.RunSuccess, status(cat2, done).Status, "a run that ended before stays as it ended")

	ss2 := srv2.NewSession("cut")
	_, _, err = ss2.Subscribe(channels.Filter{Channels: []string{channels.Lifecycle}}, &server.Cursor{Seq: srv2.LastSeq("cut")})
	require.NoError(t, err)
	after := runStart(ss2, "quick")
	untilEnd(ss2)
	ss2.Close()
	require.Equal(t, server.RunSuccess, status(cat2, after).Status, "a run after the restart is no cut run")
	require.Equal(t, server.RunError, status(cat2, cut).Status)
	require.NoError(t, srv2.Close(ctx))
	require.NoError(t, srv.Close(ctx))
}

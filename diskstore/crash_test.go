package diskstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
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

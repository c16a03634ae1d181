package diskstore

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentstream/agentstream/server"
	"github.com/stretchr/testify/require"

	"github.com/agentstream/agentstream/internal/testkit/fulldisk"
)

// TestADiskThatFillsUp: a real disk (a tmpfs) filled to the last byte
// while a thread is written, with MinFree not there to refuse first: the
// group commits fail and are tried again, /readyz says why, appends are
// refused once MaxPending wait (nothing grows without bound), what was
// stored stays; once space returns every accepted event is committed,
// and after a restart all of them are there, byte for byte, and none of
// those refused.
func TestADiskThatFillsUp(t *testing.T) {
	mnt := fulldisk.Tmpfs(t, 64<<20) // the tree keeps MinTreeFree for itself
	dir := filepath.Join(mnt, "store")
	const maxPending = 2000
	opts := Options{Dir: dir, MinFree: 1, QueueWait: 100 * time.Millisecond, MaxPending: maxPending}
	eng, err := Open(opts)
	require.NoError(t, err)
	evs := appendN(t, eng.log, "a", "ep", 0, 100, time.Now())
	waitWritten(t, eng, 100)
	filler := fulldisk.Fill(t, mnt)

	var refusal error
	for seq := uint64(101); seq < 20000 && refusal == nil; seq++ {
		e := testEvent(t, "a", "ep", seq, time.Now())
		// As the server appends: room first, then the event.
		if refusal = eng.log.WaitRoom(context.Background(), "a"); refusal == nil {
			refusal = eng.log.Append(context.Background(), "a", e)
		}
		if refusal == nil {
			evs = append(evs, e)
		}
	}
	require.ErrorIs(t, refusal, ErrBehind)
	require.ErrorContains(t, refusal, "no space left on device")
	require.ErrorContains(t, eng.Ready(context.Background()), "no space left on device")
	c := eng.Counters()
	require.LessOrEqual(t, len(evs)-int(c.Written), maxPending, "no more wait for the disk than MaxPending")
	require.Positive(t, c.Failures)
	require.Positive(t, c.RefusedBehind)
	// A thread's state is not written either (the tree under the store
	// would stop the process on a failed write to its own log).
	ctx := context.Background()
	require.ErrorIs(t, eng.state.SetValues(ctx, "a", map[string]any{"n": 1}), ErrNotWritable)
	require.ErrorIs(t, eng.state.AddCheckpoint(ctx, "a", server.CheckpointRecord{ID: "cp1"}), ErrNotWritable)
	_, err = eng.state.ClaimOwner(ctx, "b", "alice")
	require.ErrorIs(t, err, ErrNotWritable)
	require.ErrorIs(t, eng.state.Delete(ctx, "a"), ErrNotWritable)
	require.LessOrEqual(t, c.Pending, maxPending)

	require.NoError(t, os.Remove(filler))
	require.Eventually(t, func() bool {
		return eng.Ready(context.Background()) == nil && eng.Counters().Written == uint64(len(evs))
	}, 10*time.Second, 10*time.Millisecond, "every accepted event committed once space returns")
	evs = append(evs, appendN(t, eng.log, "a", "ep", uint64(len(evs)), 10, time.Now())...)
	require.NoError(t, eng.state.SetValues(ctx, "a", map[string]any{"n": 2}))
	owner, err := eng.state.ClaimOwner(ctx, "b", "alice")
	require.NoError(t, err)
	require.Equal(t, "alice", owner)
	require.NoError(t, eng.Close())

	eng, err = Open(opts)
	require.NoError(t, err)
	defer eng.Close()
	require.False(t, eng.Crashed())
	require.Equal(t, jsons(evs), replay(t, eng.log, "a", 0))
	v, ok, err := eng.state.Values(ctx, "a")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, map[string]any{"n": float64(2)}, v)
}

package diskstore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/server"
	"github.com/cockroachdb/pebble/v2"
	"github.com/stretchr/testify/require"
)

// stateBytes is what the disk keeps of a thread's state (its values,
// checkpoints and their shared values), keys and values.
func stateBytes(t *testing.T, s *State, thread string) int {
	t.Helper()
	prefix := stateKey(thread, "")
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper(prefix)})
	require.NoError(t, err)
	defer it.Close()
	n := 0
	for it.First(); it.Valid(); it.Next() {
		n += len(it.Key()) + len(it.Value())
	}
	return n
}

// TestCheckpointsKeepWhatChanged: a 1 MB value and 19 updates of one
// number cost the disk about the 1 MB once, not 20 times; a long chat
// costs each message once, not once per checkpoint; and every checkpoint
// reads back with all its values.
func TestCheckpointsKeepWhatChanged(t *testing.T) {
	eng, err := Open(Options{Dir: t.TempDir(), CommitEvery: 20 * time.Millisecond})
	require.NoError(t, err)
	defer eng.Close()
	ctx := context.Background()
	big := strings.Repeat("x", 1<<20)
	for i := range 20 {
		cp := server.CheckpointRecord{ID: fmt.Sprintf("cp%d", i), Step: int64(i), Values: map[string]any{"doc": big, "n": float64(i)}}
		require.NoError(t, eng.state.AddCheckpoint(ctx, "a", cp))
	}
	require.Less(t, stateBytes(t, eng.state, "a"), 2<<20, "the large value kept once")
	cps, err := eng.state.Checkpoints(ctx, "a")
	require.NoError(t, err)
	require.Len(t, cps, 20)
	for i, cp := range cps { // newest first
		require.Equal(t, big, cp.Values["doc"])
		require.Equal(t, float64(19-i), cp.Values["n"])
		require.Equal(t, fmt.Sprintf("cp%d", 19-i), cp.ID)
	}

	// A chat: each checkpoint holds every message so far.
	var msgs []any
	for i := range 200 {
		msgs = append(msgs, map[string]any{"id": fmt.Sprintf("m%d", i), "type": "human", "content": strings.Repeat("y", 1000)})
		require.NoError(t, eng.state.AddCheckpoint(ctx, "chat", server.CheckpointRecord{ID: fmt.Sprintf("c%d", i), Values: map[string]any{"messages": append([]any(nil), msgs...)}}))
	}
	// Inline, the 200 checkpoints would hold 200*201/2 messages: 20 MB.
	require.Less(t, stateBytes(t, eng.state, "chat"), 1<<20, "each message kept once")
	cp, ok, err := eng.state.Checkpoint(ctx, "chat", "c99")
	require.NoError(t, err)
	require.True(t, ok)
	require.Len(t, cp.Values["messages"], 100)
	require.Equal(t, "m99", cp.Values["messages"].([]any)[99].(map[string]any)["id"])
	empty := server.CheckpointRecord{ID: "e", Values: map[string]any{"messages": []any{}}}
	require.NoError(t, eng.state.AddCheckpoint(ctx, "e", empty))
	cp, ok, err = eng.state.Checkpoint(ctx, "e", "e")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []any{}, cp.Values["messages"], "an empty list stays a list")

	// A thread deleted takes its shared values with it.
	require.NoError(t, eng.state.Delete(ctx, "a"))
	require.Zero(t, stateBytes(t, eng.state, "a"))
}

// TestCheckFindsTableDamage: Check reads every block, so damage where no
// read has gone yet is found, as an error naming the table.
func TestCheckFindsTableDamage(t *testing.T) {
	dir := t.TempDir()
	eng, err := Open(Options{Dir: dir})
	require.NoError(t, err)
	defer eng.Close()
	ctx := context.Background()
	for i := range 300 {
		require.NoError(t, eng.state.SetValues(ctx, fmt.Sprintf("t%03d", i), map[string]any{"v": strings.Repeat("z", 500)}))
	}
	require.NoError(t, eng.Compact(ctx))
	ssts, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	require.NoError(t, err)
	require.NotEmpty(t, ssts)
	var hit string
	for _, f := range ssts {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		if len(b) < 100_000 {
			continue
		}
		for i := len(b) / 2; i < len(b)/2+16; i++ {
			b[i] ^= 0xa5
		}
		require.NoError(t, os.WriteFile(f, b, 0o640))
		hit = f
	}
	require.NotEmpty(t, hit)
	err = eng.Check()
	require.ErrorIs(t, err, ErrTableDamaged)
	require.Contains(t, err.Error(), hit)
}

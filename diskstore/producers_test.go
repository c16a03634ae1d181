package diskstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/stretchr/testify/require"
)

// batchOf is producer's batch seq of n custom events (payloads from..).
func batchOf(principal, producer string, seq uint64, from, n int) server.ProducerBatch {
	name := "n"
	b := server.ProducerBatch{Principal: principal, Producer: producer, Seq: seq}
	for i := 0; i < n; i++ {
		b.Events = append(b.Events, protocol.ProducerEvent{Event: &protocol.ServerEventCustom{Params: protocol.EventCustomParams{
			Namespace: protocol.Namespace{}, Data: protocol.CustomData{Name: &name, Payload: from + i}}}})
	}
	return b
}

// TestProducerBatchesOutliveARestart: a producer's last batch, sent
// again after a clean restart or a crash, is answered as a duplicate
// with the seqs and ids of its first answer and appends nothing; two
// principals using one producer name are told apart.
func TestProducerBatchesOutliveARestart(t *testing.T) {
	for _, clean := range []bool{true, false} {
		t.Run(map[bool]string{true: "clean", false: "crash"}[clean], func(t *testing.T) {
			dir := t.TempDir()
			eng, err := Open(Options{Dir: dir})
			require.NoError(t, err)
			srv := server.New(server.Config{Engine: eng})
			ctx := context.Background()
			_, err = srv.Publish(ctx, "t", batchOf("alice", "p", 1, 0, 3))
			require.NoError(t, err)
			first, err := srv.Publish(ctx, "t", batchOf("alice", "p", 2, 3, 3))
			require.NoError(t, err)
			require.False(t, first.Duplicate)
			bob, err := srv.Publish(ctx, "t", batchOf("bob", "p", 2, 100, 2))
			require.NoError(t, err)
			require.False(t, bob.Duplicate, "another principal's producer of the same name is another producer")
			require.Len(t, bob.Seqs, 2)
			if clean {
				require.NoError(t, srv.Close(ctx))
			} else {
				crash(t, eng) // Publish answered once its commit was synced
				defer srv.Close(ctx)
			}

			eng, err = Open(Options{Dir: dir})
			require.NoError(t, err)
			require.Equal(t, !clean, eng.Crashed())
			srv = server.New(server.Config{Engine: eng})
			defer srv.Close(ctx)
			again, err := srv.Publish(ctx, "t", batchOf("alice", "p", 2, 3, 3))
			require.NoError(t, err)
			require.True(t, again.Duplicate)
			require.Equal(t, first.Seqs, again.Seqs, "the first answer's seqs")
			require.Equal(t, first.EventIDs, again.EventIDs, "the first answer's ids")
			older, err := srv.Publish(ctx, "t", batchOf("alice", "p", 1, 0, 3))
			require.NoError(t, err)
			require.True(t, older.Duplicate)
			require.Empty(t, older.Seqs, "an older batch: nothing appended, nothing to name")
			bobAgain, err := srv.Publish(ctx, "t", batchOf("bob", "p", 2, 100, 2))
			require.NoError(t, err)
			require.True(t, bobAgain.Duplicate)
			require.Equal(t, bob.Seqs, bobAgain.Seqs)
			require.Equal(t, uint64(8), srv.LastSeq("t"), "nothing appended twice")
			next, err := srv.Publish(ctx, "t", batchOf("alice", "p", 3, 6, 1))
			require.NoError(t, err)
			require.Equal(t, []uint64{9}, next.Seqs)
		})
	}
}

// TestABatchCutShortIsCompleted: the store crashed after part of a
// producer's batch was committed (the producer was never answered);
// the batch sent again appends only what was lost, and its answer names
// every event of it.
func TestABatchCutShortIsCompleted(t *testing.T) {
	dir := t.TempDir()
	eng, err := Open(Options{Dir: dir})
	require.NoError(t, err)
	key := server.ProducerKey("", "p")
	for i := 0; i < 2; i++ { // two of the batch's three events
		e := testEvent(t, "t", "ep1", uint64(i+1), eng.opts.Now())
		require.NoError(t, eng.log.AppendProduced(context.Background(), "t", e, server.ProducedBy{Producer: key, Batch: 7, Index: i, Count: 3}))
	}
	waitWritten(t, eng, 2)
	crash(t, eng)

	eng, err = Open(Options{Dir: dir})
	require.NoError(t, err)
	lb, ok, err := eng.log.LastBatch(context.Background(), "t", key)
	require.NoError(t, err)
	require.True(t, ok, "the batch's mark is rebuilt from the commit log")
	require.Equal(t, uint64(7), lb.Batch)
	require.Equal(t, 3, lb.Count)
	require.Equal(t, []uint64{1, 2}, lb.Seqs)
	srv := server.New(server.Config{Engine: eng})
	defer srv.Close(context.Background())
	res, err := srv.Publish(context.Background(), "t", batchOf("", "p", 7, 0, 3))
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.Equal(t, []uint64{1, 2, 3}, res.Seqs)
	require.Equal(t, uint64(3), srv.LastSeq("t"))
	again, err := srv.Publish(context.Background(), "t", batchOf("", "p", 7, 0, 3))
	require.NoError(t, err)
	require.True(t, again.Duplicate)
	require.Equal(t, res.Seqs, again.Seqs)
}

// TestProducersPerThreadAreBounded: a thread keeps the last batches of
// at most Options.MaxProducers producers on disk, those used longest ago
// forgotten and counted.
func TestProducersPerThreadAreBounded(t *testing.T) {
	dir := t.TempDir()
	eng, err := Open(Options{Dir: dir, MaxProducers: 3})
	require.NoError(t, err)
	srv := server.New(server.Config{Engine: eng, MaxProducersPerThread: 3})
	defer srv.Close(context.Background())
	for p := 0; p < 8; p++ {
		_, err := srv.Publish(context.Background(), "t", batchOf("", fmt.Sprint("p", p), 1, p, 1))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return count(t, eng.db, "p/t\x00") == 3 }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, uint64(5), eng.Counters().ProducersForgotten)
	for p := 5; p < 8; p++ {
		_, ok, err := eng.log.LastBatch(context.Background(), "t", server.ProducerKey("", fmt.Sprint("p", p)))
		require.NoError(t, err)
		require.True(t, ok, "the producers used last are kept")
	}
}

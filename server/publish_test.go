package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/stretchr/testify/require"
)

// syncedLog is a MemoryLog whose syncs happen when the test says.
type syncedLog struct {
	*server.MemoryLog
	synced chan struct{}
}

func (l *syncedLog) WaitSynced(ctx context.Context) error {
	select {
	case <-l.synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func oneEvent() server.ProducerBatch {
	name := "tick"
	return server.ProducerBatch{Producer: "p", Seq: 1, Events: []protocol.ProducerEvent{{Event: &protocol.ServerEventCustom{Params: protocol.EventCustomParams{
		Namespace: protocol.Namespace{}, Data: protocol.CustomData{Name: &name, Payload: 1}}}}}}
}

// TestPublishWaitsForTheSync: with a SyncedLog, Publish answers once the
// batch is synced (a retry too), refuses as unavailable past
// IngestAckTimeout (counted), and with IngestFastAck does not wait.
func TestPublishWaitsForTheSync(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    server.Config
		sync   bool // the test syncs the log after a while
		wait   bool // Publish waits for it
		refuse bool // Publish gives up
	}{
		{name: "answered once synced", cfg: server.Config{}, sync: true, wait: true},
		{name: "refused past the timeout", cfg: server.Config{IngestAckTimeout: 50 * time.Millisecond}, refuse: true},
		{name: "fast acks do not wait", cfg: server.Config{IngestFastAck: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := &syncedLog{MemoryLog: server.NewMemoryLog(100, 1<<20), synced: make(chan struct{})}
			tc.cfg.Stores = server.EngineStores{Log: log, Synced: log}
			s := newServer(t, tc.cfg)
			start := time.Now() // before the timer: the sync comes 100 ms after it at the earliest
			if tc.sync {
				time.AfterFunc(100*time.Millisecond, func() { close(log.synced) })
			}
			res, err := s.Publish(context.Background(), "t", oneEvent())
			took := time.Since(start)
			if tc.refuse {
				require.ErrorIs(t, err, server.ErrUnavailable)
				require.Equal(t, uint64(1), s.Metrics().Refused[server.LimitIngestAck])
				require.Equal(t, uint64(1), s.LastSeq("t"), "appended, though not acknowledged")
				return
			}
			require.NoError(t, err)
			require.Equal(t, []uint64{1}, res.Seqs)
			if tc.wait {
				require.GreaterOrEqual(t, took, 100*time.Millisecond, "answered after the sync")
				again, err := s.Publish(context.Background(), "t", oneEvent())
				require.NoError(t, err)
				require.True(t, again.Duplicate)
				require.Equal(t, []uint64{1}, again.Seqs, "a retry is answered as the first was")
			} else {
				require.Less(t, took, 2*time.Second, "not waiting (the log never syncs: a wait would last the 5-s timeout)")
			}
		})
	}
}

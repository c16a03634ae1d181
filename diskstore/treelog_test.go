package diskstore

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/stretchr/testify/require"
)

// TestADamagedTreeLogIsRefusedThenRepaired: 8 bytes flipped inside the
// tree's write-ahead log of a store that crashed: Open refuses it, naming
// the file and offset; Repair opens it, says what it cut, and a reader of
// the thread gets every event that is left in order, with an
// events.missed notice for each hole the cut left inside the stream; a
// reader whose cursor was in the lost tail is told its stream is gone
// (reset).
func TestADamagedTreeLogIsRefusedThenRepaired(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, FoldEvents: 50, FoldAge: 10 * time.Millisecond}
	eng, err := Open(opts)
	require.NoError(t, err)
	const n = 30000
	appendN(t, eng.log, "w", "ep1", 0, n, time.Now())
	waitWritten(t, eng, n)
	require.Eventually(t, func() bool { return eng.log.wal.Segments() == 0 }, 5*time.Second, 10*time.Millisecond, "everything folded into the tree")
	crash(t, eng)

	// The log with the most records, flipped in the middle of them (a
	// recycled log's tail holds another log's old records, which no one
	// reads).
	logs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	require.NoError(t, err)
	victim, extent := "", int64(0)
	for _, p := range logs {
		if n := readableBytes(t, p); n > extent {
			victim, extent = p, n
		}
	}
	require.Greater(t, extent, int64(3*blockBytes), "a log of several blocks")
	b, err := os.ReadFile(victim)
	require.NoError(t, err)
	at := int(extent / 2)
	for i := 0; i < 8; i++ {
		b[at+i] ^= 0xa5
	}
	require.NoError(t, os.WriteFile(victim, b, 0o644))
	_, err = Open(opts)
	require.True(t, errors.Is(err, ErrDamaged), "refused: %v", err)
	require.Contains(t, err.Error(), filepath.Base(victim))
	require.Contains(t, err.Error(), "offset")

	opts.Repair = true
	eng, err = Open(opts)
	require.NoError(t, err)
	require.Contains(t, eng.Repaired(), filepath.Base(victim))
	srv := server.New(server.Config{Engine: eng})
	defer srv.Close(context.Background())
	ss, _, err := srv.Subscribe("w", channels.Filter{Channels: []string{"custom"}, Depth: channels.Unlimited}, nil)
	require.NoError(t, err)
	defer ss.Close()
	prev, events, notices := uint64(0), 0, 0
	for prev < srv.LastSeq("w") {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		e, err := ss.Next(ctx)
		cancel()
		require.NoError(t, err)
		if e.Method == protocol.ServerEventEventsMissedMethodValue {
			d := e.Payload.(*protocol.ServerEventEventsMissed).Params.Data
			require.Equal(t, prev, d.Since)
			prev = d.FirstAvailableSeq - 1
			notices++
			continue
		}
		require.Equal(t, prev+1, e.Seq, "in order; a hole only after its notice")
		prev = e.Seq
		events++
	}
	t.Logf("%d of %d events kept, %d holes announced; %s", events, n, notices, eng.Repaired())
	require.Less(t, events, n, "the cut part's events are lost")
	// A reader that had read into what was lost (a cursor of the store's
	// epoch before the crash) is told its stream is gone, and gets what
	// is left.
	old, _, err := srv.Subscribe("w", channels.Filter{Channels: []string{"custom"}, Depth: channels.Unlimited}, &server.Cursor{Epoch: "ep1", Seq: n - 10})
	require.NoError(t, err)
	defer old.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, err := old.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, protocol.ServerEventEventsMissedMethodValue, e.Method)
	d := e.Payload.(*protocol.ServerEventEventsMissed).Params.Data
	require.NotNil(t, d.Reset)
	require.True(t, *d.Reset)
}

// readableBytes is how far a tree log's records can be read.
func readableBytes(t *testing.T, path string) int64 {
	t.Helper()
	num, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(path), ".log"), 10, 64)
	require.NoError(t, err)
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	r := newLogReader(f, num)
	end := int64(0)
	for {
		rec, err := r.Next()
		if err != nil {
			return end
		}
		if _, err := io.Copy(io.Discard, rec); err != nil {
			return end
		}
		end = r.Offset()
	}
}

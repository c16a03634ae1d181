package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/agentstream/agentstream/internal/testkit/redistest"
	"github.com/stretchr/testify/require"
)

// TestLiveFollowsWhatItWatchesAndDoesNotWrite: a thread's channel is
// subscribed while the thread is watched and its lease not held, and the
// lease is read at each change rather than told: two changes heard in the
// wrong order (taken, then given up, told given up, then taken) leave the
// channel subscribed, as the lease is given up.
func TestLiveFollowsWhatItWatchesAndDoesNotWrite(t *testing.T) {
	rs := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, err := Open(ctx, rs.URL(), time.Hour)
	require.NoError(t, err)
	defer e.Close()
	l := e.Live(nil) // not started: the subscriber only records its channels
	holding := false
	l.holds = func(string) bool { return holding }
	followed := func() bool {
		l.sub.mu.Lock()
		defer l.sub.mu.Unlock()
		_, ok := l.sub.chans[l.channel("t")]
		return ok
	}

	l.Watch("t")
	require.True(t, followed(), "watched, not held")
	holding = true
	l.HoldChanged("t")
	require.False(t, followed(), "held")
	holding = false
	l.HoldChanged("t") // given up, told first
	l.HoldChanged("t") // taken, told late: the lease is read again
	require.True(t, followed(), "given up")
	l.Unwatch("t")
	require.False(t, followed(), "not watched")
	holding = true
	l.Watch("t")
	require.False(t, followed(), "watched while held")
}

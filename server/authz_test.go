package server_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/internal/testkit/servetest"
	"github.com/agentstream/agentstream/server"
	"github.com/stretchr/testify/require"
)

func TestAuthorizeOwnershipAndGrants(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s := newServer(t, server.Config{Now: clock, ThreadTTL: time.Hour, MaxThreads: 3})
	alice := &auth.Principal{Subject: "alice"}
	bob := &auth.Principal{Subject: "bob"}
	admin := &auth.Principal{Subject: "root", Admin: true}
	carol := &auth.Principal{Subject: "carol", Threads: []string{"team-*"}}

	require.ErrorIs(t, s.Authorize(nil, "t", true), server.ErrUnauthenticated)
	require.ErrorIs(t, s.Authorize(alice, "bad id", true), server.ErrThreadID)
	require.ErrorIs(t, s.Authorize(alice, "team-1", false), server.ErrNoSuchThread, "a read of an unknown thread")
	require.Equal(t, "", servetest.Owner(t, s, "team-1"), "claims nothing")

	require.NoError(t, s.Authorize(alice, "team-1", true))
	require.Equal(t, "alice", servetest.Owner(t, s, "team-1"))
	require.True(t, servetest.HasThread(t, s, "team-1"), "claiming creates the thread")
	require.NoError(t, s.Authorize(alice, "team-1", false))
	require.NoError(t, s.Authorize(admin, "team-1", false))
	require.NoError(t, s.Authorize(carol, "team-1", true))
	err := s.Authorize(bob, "team-1", true)
	require.ErrorIs(t, err, server.ErrPermissionDenied)
	require.Equal(t, uint64(1), s.Metrics().Denied)
	require.Equal(t, "alice", servetest.Owner(t, s, "team-1"), "a grant or an admin does not take ownership")

	// A thread that existed before anyone claimed it (made by the embedding
	// program) goes to its first principal, even on a read.
	pre, _, err := s.Subscribe("pre", channels.All, nil)
	require.NoError(t, err)
	pre.Close()
	require.NoError(t, s.Authorize(bob, "pre", false))
	require.Equal(t, "bob", servetest.Owner(t, s, "pre"))

	// Claims count against MaxThreads (team-1, pre, and one more).
	require.NoError(t, s.Authorize(bob, "b1", true))
	require.ErrorIs(t, s.Authorize(bob, "b2", true), server.ErrTooManyThreads)
	require.Equal(t, "", servetest.Owner(t, s, "b2"))

	// A forgotten thread forgets its owner: its id is free again.
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	servetest.Sweep(s)
	require.Equal(t, "", servetest.Owner(t, s, "team-1"))
	require.NoError(t, s.Authorize(bob, "team-1", true))
	require.Equal(t, "bob", servetest.Owner(t, s, "team-1"))
}

func TestSessionExpiry(t *testing.T) {
	s := newServer(t, server.Config{})
	sub, _, err := s.Subscribe("t", all, nil)
	require.NoError(t, err)
	require.True(t, sub.ExpireAt(time.Now().Add(time.Hour)))
	require.True(t, sub.ExpireAt(time.Now().Add(50*time.Millisecond)), "a later call moves the deadline")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for err == nil {
		_, err = sub.Next(ctx)
	}
	require.ErrorIs(t, err, server.ErrCredentialExpired)
	require.False(t, sub.ExpireAt(time.Now().Add(time.Hour)), "too late to refresh")

	kept, _, err := s.Subscribe("t", all, nil)
	require.NoError(t, err)
	require.True(t, kept.ExpireAt(time.Now().Add(30*time.Millisecond)))
	require.True(t, kept.ExpireAt(time.Time{}), "zero: no deadline")
	time.Sleep(100 * time.Millisecond)
	for {
		_, ok, err := kept.TryNext() // what the subscription replayed, if anything
		require.NoError(t, err, "still open")
		if !ok {
			break
		}
	}
	require.False(t, kept.Done())
	kept.Close()
	_, _, err = kept.TryNext()
	require.True(t, errors.Is(err, server.ErrClosed))
}

// claimBetween is a StateStore in which another request claims a thread
// right after the first owner lookup saw none (two first requests for a
// thread at once).
type claimBetween struct {
	*server.MemoryState
	claimer string
	once    sync.Once
}

func (c *claimBetween) Owner(ctx context.Context, thread string) (string, bool, error) {
	owner, ok, err := c.MemoryState.Owner(ctx, thread)
	c.once.Do(func() {
		if !ok {
			_, _ = c.MemoryState.ClaimOwner(ctx, thread, c.claimer)
		}
	})
	return owner, ok, err
}

// TestConcurrentFirstRequestsOfOneOwner: two first requests of one
// principal for a new thread; the other one's claim lands between this
// one's owner lookup and its history check (the claim is state, so the
// thread "has history"): this one is let in as the owner, not refused as
// a thread whose owner record was lost. The official SDK opens several
// WebSockets of one thread at once, and got 403 about one run in five.
func TestConcurrentFirstRequestsOfOneOwner(t *testing.T) {
	st := &claimBetween{MemoryState: server.NewMemoryState(), claimer: "alice"}
	srv := server.New(server.Config{Stores: server.EngineStores{State: st}})
	defer srv.Close(context.Background())
	require.NoError(t, srv.Authorize(&auth.Principal{Subject: "alice"}, "new", true))
	st2 := &claimBetween{MemoryState: server.NewMemoryState(), claimer: "alice"}
	srv2 := server.New(server.Config{Stores: server.EngineStores{State: st2}})
	defer srv2.Close(context.Background())
	require.ErrorIs(t, srv2.Authorize(&auth.Principal{Subject: "bob"}, "new", true), server.ErrPermissionDenied, "another principal's claim still wins")
}

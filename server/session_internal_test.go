package server

import (
	"testing"

	"github.com/agentstream/agentstream/channels"
	"github.com/stretchr/testify/require"
)

// A session's subscriptions share their index entries: what an event costs
// depends on the distinct filter terms, not on how many subscriptions have
// them.
func TestSessionSubscriptionsShareIndexEntries(t *testing.T) {
	s := New(Config{MaxSessionSubscriptions: 2000})
	t.Cleanup(func() { _ = s.Close(t.Context()) })
	ss := s.NewSession("t")
	f := channels.Filter{Channels: []string{channels.Messages, channels.Lifecycle}, Depth: channels.Unlimited}
	var ids []string
	for range 1000 {
		id, _, err := ss.Subscribe(f, nil)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	other, _, err := ss.Subscribe(channels.Filter{Channels: []string{channels.Lifecycle}, Namespaces: []channels.Namespace{{"a"}}, Depth: 1}, nil)
	require.NoError(t, err)
	th, _ := s.thread("t", false)
	th.mu.Lock()
	require.Equal(t, 3, th.index.Len(), "messages and lifecycle at the root, lifecycle under a")
	require.Equal(t, 1001, th.nsubs)
	th.mu.Unlock()
	for _, id := range ids[:999] {
		require.True(t, ss.Unsubscribe(id))
	}
	th.mu.Lock()
	require.Equal(t, 3, th.index.Len(), "one subscription still has them")
	th.mu.Unlock()
	require.True(t, ss.Unsubscribe(ids[999]))
	require.True(t, ss.Unsubscribe(other))
	th.mu.Lock()
	require.Equal(t, 0, th.index.Len())
	require.Equal(t, 0, th.nsubs)
	th.mu.Unlock()
	ss.Close()
	th.mu.Lock()
	require.Empty(t, th.sessions)
	th.mu.Unlock()
}

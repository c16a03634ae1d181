package transport

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCommandLimiterStaysBounded: no number of clients grows the buckets
// past maxLimiters; idle clients' buckets make room, and when none is
// idle a new client is refused rather than kept.
func TestCommandLimiterStaysBounded(t *testing.T) {
	l := newCommandLimiter(10, 20) // refilled after 2 s idle
	now := time.Unix(1_700_000_000, 0)
	for i := 0; i < maxLimiters; i++ {
		require.True(t, l.allow(fmt.Sprint("c", i), now))
	}
	require.False(t, l.allow("newcomer", now.Add(time.Second)), "no bucket has refilled yet")
	require.Len(t, l.buckets, maxLimiters)
	require.True(t, l.allow("newcomer", now.Add(3*time.Second)), "idle buckets made room")
	require.Len(t, l.buckets, 1)
	for i := 0; i < 20; i++ {
		l.allow("busy", now.Add(3*time.Second))
	}
	require.False(t, l.allow("busy", now.Add(3*time.Second)), "over its burst")
	require.Equal(t, "203.0.113.9", remoteIP("203.0.113.9:4567"))
	require.Equal(t, "::1", remoteIP("[::1]:80"))
}

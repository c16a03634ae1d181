package keyrate

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStaysBounded: no number of keys grows the buckets past MaxKeys;
// idle keys' buckets make room, and when none is idle a new key is
// refused rather than kept.
func TestStaysBounded(t *testing.T) {
	l := New(10, 20) // refilled after 2 s idle
	now := time.Unix(1_700_000_000, 0)
	for i := 0; i < MaxKeys; i++ {
		require.True(t, l.Allow(fmt.Sprint("c", i), now))
	}
	require.False(t, l.Allow("newcomer", now.Add(time.Second)), "no bucket has refilled yet")
	require.Equal(t, MaxKeys, l.Len())
	require.True(t, l.Allow("newcomer", now.Add(3*time.Second)), "idle buckets made room")
	require.Equal(t, 1, l.Len())
	for i := 0; i < 20; i++ {
		l.Allow("busy", now.Add(3*time.Second))
	}
	require.False(t, l.Allow("busy", now.Add(3*time.Second)), "over its burst")
	require.True(t, l.Exhausted("busy", now.Add(3*time.Second)))
	require.False(t, l.Exhausted("never-seen", now))
}

package transport

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRemoteIP: a client is its address without the port (the buckets
// themselves are tested in internal/keyrate).
func TestRemoteIP(t *testing.T) {
	require.Equal(t, "203.0.113.9", remoteIP("203.0.113.9:4567"))
	require.Equal(t, "::1", remoteIP("[::1]:80"))
}

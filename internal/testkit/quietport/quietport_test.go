package quietport

import (
	"fmt"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFreeIsInItsRangeWithItsOffsetsFree(t *testing.T) {
	for range 20 {
		port, err := Free(2700, 10000)
		require.NoError(t, err)
		require.GreaterOrEqual(t, port, Base)
		require.Less(t, port, Base+2700)
		for _, p := range []int{port, port + 10000} {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			require.NoError(t, err, "port %d is free", p)
			l.Close()
		}
	}
}

func TestATakenPortIsNotFree(t *testing.T) {
	port, err := Free(2700, 10000)
	require.NoError(t, err)
	require.True(t, free(port, []int{10000}))
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+10000))
	require.NoError(t, err)
	defer l.Close()
	require.False(t, free(port, []int{10000}), "its offset port is taken")
	require.True(t, free(port, nil), "the port itself is not")
}

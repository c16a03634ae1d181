package cddlrt

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPaths(t *testing.T) {
	require.Equal(t, "a", Join("", "a"))
	require.Equal(t, "a.b", Join("a", "b"))
	require.Equal(t, "a[3]", Index("a", 3))
	err := At("params", Invalid("channels[1]", "Channel", "bad"))
	require.EqualError(t, err, "params.channels[1]: bad (rule Channel)")
	require.EqualError(t, At("list", Invalid("[2]", "R", "bad")), "list[2]: bad (rule R)")
	require.EqualError(t, At("x", Invalid("", "R", "bad")), "x: bad (rule R)")
	require.EqualError(t, At("x", errors.New("plain")), "x: plain")
	require.NoError(t, At("x", nil))
	require.EqualError(t, Invalid("", "", "bare"), "bare")
}

func TestDecodeStrictNeedsAPointer(t *testing.T) {
	var v struct{}
	require.Error(t, DecodeStrictJSON([]byte(`{}`), v))
	require.Error(t, DecodeStrictJSON([]byte(`{}`), (*struct{})(nil)))
}

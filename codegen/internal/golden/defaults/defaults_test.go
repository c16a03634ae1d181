package defaults

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDefaults: the schema's defaults are constants; decoding leaves an
// absent member nil, so that absent and given are told apart.
func TestDefaults(t *testing.T) {
	require.False(t, DefaultOptsVerbose)
	require.True(t, DefaultOptsColor)
	require.Equal(t, 5, DefaultOptsRetries)
	require.Equal(t, "fast", DefaultOptsMode)
	require.False(t, DefaultOptsQuiet)
	var o Opts
	require.NoError(t, json.Unmarshal([]byte(`{"color": false}`), &o))
	require.Nil(t, o.Verbose)
	require.NotNil(t, o.Color)
	require.False(t, *o.Color)
}

package unwrap

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUnwrappedArrayIsFlat: ~basic-header inside advanced-header is its
// two elements in place, not a nested array.
func TestUnwrappedArrayIsFlat(t *testing.T) {
	var h AdvancedHeader
	require.NoError(t, json.Unmarshal([]byte(`[1, "a", "aGk=", 1.5]`), &h))
	require.Equal(t, AdvancedHeader{Field1: 1, Field2: "a", Field3: []byte("hi"), Field4: 1.5}, h)
	out, err := json.Marshal(h)
	require.NoError(t, err)
	require.JSONEq(t, `[1, "a", "aGk=", 1.5]`, string(out))
	require.Error(t, json.Unmarshal([]byte(`[[1, "a"], "aGk=", 1.5]`), &h))
}

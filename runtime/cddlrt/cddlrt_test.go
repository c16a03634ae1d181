package cddlrt

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"github.com/stretchr/testify/require"
)

type small struct {
	A int `json:"a" cbor:"a"`
}

func TestMarshalJSONAddsLiteralsAndExtra(t *testing.T) {
	b, err := MarshalJSON(&small{A: 1}, []Literal{{"type", "x"}}, map[string]any{"z": json.Number("12345678901234567890"), "b": true})
	require.NoError(t, err)
	require.Equal(t, `{"type":"x","a":1,"b":true,"z":12345678901234567890}`, string(b))

	b, err = MarshalJSON(&struct{}{}, []Literal{{"type", "x"}}, nil)
	require.NoError(t, err)
	require.Equal(t, `{"type":"x"}`, string(b))
}

func TestUnmarshalJSONChecksLiteralsAndKeepsExtra(t *testing.T) {
	var s small
	var extra map[string]any
	known := map[string]bool{"a": true, "type": true}
	err := UnmarshalJSON([]byte(`{"type":"x","a":2,"big":12345678901234567890}`), &s, "small", []Literal{{"type", "x"}}, known, &extra)
	require.NoError(t, err)
	require.Equal(t, 2, s.A)
	require.Equal(t, json.Number("12345678901234567890"), extra["big"])

	err = UnmarshalJSON([]byte(`{"type":"y","a":2}`), &s, "small", []Literal{{"type", "x"}}, known, &extra)
	require.ErrorIs(t, err, ErrLiteral)
	require.ErrorContains(t, err, `member "type" is "y", want "x"`)
}

// TestMarshalCBORRewritesLargeMapHeaders: adding members to a CBOR map
// must rewrite its length, across the 1-byte and 2-byte header forms.
func TestMarshalCBORRewritesLargeMapHeaders(t *testing.T) {
	for _, n := range []int{0, 20, 23, 24, 300} {
		extra := map[string]any{}
		for i := 0; i < n; i++ {
			extra[fmt.Sprintf("k%03d", i)] = int64(i)
		}
		b, err := MarshalCBOR(&small{A: 7}, []Literal{{"type", "x"}}, extra)
		require.NoError(t, err)
		var back map[string]any
		require.NoError(t, cbor.Unmarshal(b, &back))
		require.Len(t, back, n+2)
		require.Equal(t, "x", back["type"])
		require.EqualValues(t, 7, back["a"])
		if n > 0 {
			require.EqualValues(t, n-1, back[fmt.Sprintf("k%03d", n-1)])
		}
	}
}

func TestRawValueConvertsBetweenEncodings(t *testing.T) {
	r := RawValue{JSON: json.RawMessage(`{"a":[1,2.5,"x"],"n":null}`)}
	c, err := r.MarshalCBOR()
	require.NoError(t, err)
	back := RawValue{CBOR: c}
	j, err := back.MarshalJSON()
	require.NoError(t, err)
	require.JSONEq(t, string(r.JSON), string(j))
}

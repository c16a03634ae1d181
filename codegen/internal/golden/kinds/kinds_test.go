package kinds

import (
	"encoding/json"
	"testing"

	"github.com/agentstream/agentstream/runtime/cddlrt"
	"github.com/fxamacker/cbor/v2"
	"github.com/stretchr/testify/require"
)

// roundTrip decodes in into a new T, requires its variant to be want,
// encodes it back to the same JSON, and through CBOR to the same value.
func roundTrip[T any](t *testing.T, in string, want any, value func(*T) any) {
	t.Helper()
	v := new(T)
	require.NoError(t, json.Unmarshal([]byte(in), v), in)
	require.Equal(t, want, value(v), in)
	out, err := json.Marshal(v)
	require.NoError(t, err)
	require.JSONEq(t, in, string(out))
	b, err := cbor.Marshal(v)
	require.NoError(t, err)
	back := new(T)
	require.NoError(t, cddlrt.CBORDecMode.Unmarshal(b, back))
	require.Equal(t, v, back, "through CBOR")
}

func TestKindSums(t *testing.T) {
	scalar := func(s *Scalar) any { return s.Value }
	roundTrip(t, `null`, nil, scalar)
	roundTrip(t, `true`, ScalarBool(true), scalar)
	roundTrip(t, `-3`, ScalarInt(-3), scalar)
	roundTrip(t, `2.5`, ScalarFloat(2.5), scalar)
	roundTrip(t, `"x"`, ScalarText("x"), scalar)

	index := func(s *Index) any { return s.Value }
	roundTrip(t, `7`, IndexInt(7), index)
	roundTrip(t, `"seven"`, IndexText("seven"), index)

	target := func(s *Target) any { return s.Value }
	roundTrip(t, `"node-a"`, TargetText("node-a"), target)
	roundTrip(t, `{"node": "b"}`, &Send{Node: "b"}, target)
	roundTrip(t, `["a", "b"]`, TargetArray{"a", "b"}, target)

	blob := func(s *Blob) any { return s.Value }
	roundTrip(t, `"aGk="`, BlobBytes("hi"), blob)
	roundTrip(t, `5`, BlobInt(5), blob)

	ratio := func(s *Ratio) any { return s.Value }
	roundTrip(t, `"1/2"`, RatioText("1/2"), ratio)
	var r Ratio
	require.NoError(t, json.Unmarshal([]byte(`2`), &r), "an integer is a float too")
	require.Equal(t, RatioFloat(2), r.Value)
}

// TestRecursiveKindSum: a choice that holds itself (every JSON value)
// decodes into nested Go values and encodes back.
func TestRecursiveKindSum(t *testing.T) {
	in := `{"a": [1.5, "x", null, true, {"b": []}]}`
	var v JSONValue
	require.NoError(t, json.Unmarshal([]byte(in), &v))
	m, ok := v.Value.(JSONValueMap)
	require.True(t, ok, "%T", v.Value)
	list, ok := m["a"].Value.(JSONValueArray)
	require.True(t, ok)
	require.Equal(t, JSONValueFloat(1.5), list[0].Value)
	require.Equal(t, JSONValueText("x"), list[1].Value)
	require.Nil(t, list[2].Value)
	require.Equal(t, JSONValueBool(true), list[3].Value)
	out, err := json.Marshal(v)
	require.NoError(t, err)
	require.JSONEq(t, in, string(out))
	b, err := cbor.Marshal(v)
	require.NoError(t, err)
	var back JSONValue
	require.NoError(t, cddlrt.CBORDecMode.Unmarshal(b, &back))
	require.Equal(t, v, back)
	require.NoError(t, cddlrt.DecodeStrictJSON([]byte(in), &back))
}

func TestKindSumsReject(t *testing.T) {
	for _, c := range []struct {
		in string
		v  any
	}{
		{`{"a": 1}`, new(Scalar)}, {`[1]`, new(Index)}, {`null`, new(Index)}, {`1.5`, new(Index)}, {`true`, new(Target)},
	} {
		require.Error(t, json.Unmarshal([]byte(c.in), c.v), c.in)
	}
	_, err := json.Marshal(Index{})
	require.Error(t, err, "a union without a variant (and no null) does not encode")
}

package cddlrt

import (
	"testing"

	"github.com/fxamacker/cbor/v2"
	"github.com/stretchr/testify/require"
)

func TestJSONKind(t *testing.T) {
	for in, want := range map[string]Kind{
		`null`: KindNull, ` true`: KindBool, `false`: KindBool, `"x"`: KindText, `[1]`: KindArray,
		`{"a":1}`: KindMap, `12`: KindInt, `-3 `: KindInt, `1.5`: KindFloat, `1e3`: KindFloat, ``: KindInvalid, `?`: KindInvalid,
	} {
		require.Equal(t, want, JSONKind([]byte(in)), in)
	}
}

func TestCBORKind(t *testing.T) {
	for _, c := range []struct {
		v    any
		want Kind
	}{
		{nil, KindNull}, {true, KindBool}, {uint64(7), KindInt}, {int64(-7), KindInt}, {1.5, KindFloat},
		{"x", KindText}, {[]byte("x"), KindBytes}, {[]int{1}, KindArray}, {map[string]int{"a": 1}, KindMap},
		{cbor.Tag{Number: 1, Content: 1.5}, KindFloat}, {cbor.Tag{Number: 1000, Content: "t"}, KindText},
	} {
		b, err := cbor.Marshal(c.v)
		require.NoError(t, err)
		require.Equal(t, c.want, CBORKind(b), "%v", c.v)
	}
	require.Equal(t, KindInvalid, CBORKind(nil))
	require.Equal(t, KindInvalid, CBORKind([]byte{0xd9})) // a tag cut short
}

package cddlrt

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func members(t *testing.T, data string) (map[string]string, error) {
	t.Helper()
	out := map[string]string{}
	err := eachMember([]byte(data), func(k string, raw []byte) error {
		out[k] = string(raw)
		return nil
	})
	return out, err
}

func TestEachMember(t *testing.T) {
	got, err := members(t, ` { "a" : 1 , "b\"q": {"x": [1, "}", {"y": null}]}, "c": "s\"}", "d": [] , "e": true}  `)
	require.NoError(t, err)
	require.Equal(t, map[string]string{
		"a": "1", `b"q`: `{"x": [1, "}", {"y": null}]}`, "c": `"s\"}"`, "d": "[]", "e": "true",
	}, got)
	got, err = members(t, `{}`)
	require.NoError(t, err)
	require.Empty(t, got)
	for _, bad := range []string{``, `[]`, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":1} x`, `{"a":[1,}`, `{"a":"x`, `{a:1}`} {
		_, err := members(t, bad)
		require.ErrorIs(t, err, errScan, bad)
	}
}

// FuzzEachMember: on any input the scanner does not panic, and on a JSON
// object it finds the members encoding/json finds, with the same values.
func FuzzEachMember(f *testing.F) {
	f.Add([]byte(`{"a": 1, "b": [true, {"c": "d"}], "e\u00e9": null}`))
	f.Add([]byte(`{"x": "\"}\\", "y": -1.5e3}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got := map[string]json.RawMessage{}
		err := eachMember(data, func(k string, raw []byte) error {
			got[k] = raw
			return nil
		})
		var want map[string]json.RawMessage
		if json.Unmarshal(data, &want) != nil || want == nil {
			return // not an object encoding/json accepts: only no panic is required
		}
		if err != nil {
			t.Fatalf("scanner rejects an object encoding/json accepts: %q", data)
		}
		for k, v := range want {
			var a, b any
			if json.Unmarshal(v, &a) != nil || json.Unmarshal(got[k], &b) != nil {
				t.Fatalf("member %q: %q versus %q", k, v, got[k])
			}
		}
	})
}

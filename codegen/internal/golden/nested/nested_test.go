package nested

import (
	"encoding/json"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"github.com/stretchr/testify/require"
)

// TestTwoLevelDispatch decodes each kind of message into its Go type, and
// encodes it back to the same JSON, and through CBOR to the same value.
func TestTwoLevelDispatch(t *testing.T) {
	for _, c := range []struct {
		in   string
		want any
	}{
		{`{"type":"success","id":7}`, &Resp{ID: 7}},
		{`{"type":"event","method":"m1","p":3}`, &Ev{Value: &EvM1{P: 3}}},
		{`{"type":"event","method":"m2","q":"two"}`, &Ev{Value: &EvM2{Q: "two"}}},
		{`{"type":"event","method":"m3","q":"three"}`, &Ev{Value: &EvM3{Q: "three"}}},
	} {
		var m Message
		require.NoError(t, json.Unmarshal([]byte(c.in), &m), c.in)
		require.Equal(t, c.want, m.Value)
		out, err := json.Marshal(m)
		require.NoError(t, err)
		require.JSONEq(t, c.in, string(out))

		b, err := cbor.Marshal(m)
		require.NoError(t, err)
		var back Message
		require.NoError(t, cbor.Unmarshal(b, &back))
		require.Equal(t, m, back)
	}
	var m Message
	require.NoError(t, json.Unmarshal([]byte(`{"type":"event","method":"m2","q":"x"}`), &m))
	ev, ok := m.Value.(*Ev)
	require.True(t, ok)
	require.Equal(t, "event", m.Value.Type())
	require.Equal(t, "m2", ev.Value.Method())
}

// TestTwoLevelDispatchRejects: an unknown type, an unknown method and a
// missing method are errors, not empty values.
func TestTwoLevelDispatchRejects(t *testing.T) {
	for _, in := range []string{
		`{"type":"other","id":1}`,
		`{"type":"event","method":"m9","p":1}`,
		`{"type":"event","p":1}`,
		`{"id":1}`,
	} {
		var m Message
		require.Error(t, json.Unmarshal([]byte(in), &m), in)
	}
}

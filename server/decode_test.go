package server

import (
	"math"
	"testing"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/stretchr/testify/require"
)

// decodeSamples are events in the layout encodeEventJSON writes, plain
// enough for decodeRouting (no escapes).
func decodeSamples(t testing.TB) [][]byte {
	name := "tok"
	ds := []eventData{
		customEvent(name, protocol.CustomData{Name: &name, Payload: map[string]any{"a": 1}}),
		customEvent("", protocol.CustomData{Payload: []any{"x"}}),
		lifecycleEvent(channels.Namespace{"sub:1", "tool:2"}, protocol.LifecycleData{Event: protocol.AgentStatusRunning}),
		lifecycleEvent(nil, protocol.LifecycleData{Event: protocol.AgentStatusCompleted}),
		valuesEvent(map[string]any{"name": "not a custom name"}),
		messagesEvent("agent", &protocol.MessageStartData{Role: "ai"}),
	}
	var out [][]byte
	for i, d := range ds {
		e, err := buildEvent(d, "ep1", uint64(i+1), 1763950000000)
		require.NoError(t, err)
		out = append(out, e.JSON())
	}
	return out
}

// The fast path reads what encoding/json reads, and is taken for the
// layout the server writes.
func TestDecodeRoutingAgreesWithEncodingJSON(t *testing.T) {
	for _, b := range decodeSamples(t) {
		fast, ok := decodeRouting(b)
		require.True(t, ok, "the fast path reads %s", b)
		slow, err := decodeRoutingJSON(b)
		require.NoError(t, err)
		requireSameRouting(t, slow, fast, b)
	}
	// Escaped strings and other layouts fall back.
	for _, b := range []string{
		`{"type":"event","event_id":"e-1","seq":1,"method":"custom","params":{"namespace":["a\"b"],"timestamp":1,"data":{"payload":1}}}`,
		`{"method":"custom","type":"event","event_id":"e-1","seq":1,"params":{"namespace":[],"timestamp":1,"data":{"payload":1}}}`,
		`{"type":"event","event_id":"e-1","seq":1,"method":"custom","params":{"namespace":[],"timestamp":1,"data":{"x":1,"name":"n"}}}`,
		`{"type":"event", "event_id":"e-1","seq":1,"method":"values","params":{"namespace":[],"timestamp":1,"data":{}}}`,
	} {
		_, ok := decodeRouting([]byte(b))
		require.False(t, ok, "%s", b)
	}
}

// FuzzDecodeRouting: whatever the fast path accepts, encoding/json reads
// the same way (go test ./server -run '^$' -fuzz FuzzDecodeRouting).
func FuzzDecodeRouting(f *testing.F) {
	for _, b := range decodeSamples(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, ok := decodeRouting(b)
		if !ok {
			return
		}
		slow, err := decodeRoutingJSON(b)
		if err != nil {
			// The fast path does not validate the data member: only
			// the routing fields must agree when the JSON is valid.
			return
		}
		if fast.method != "custom" {
			fast.name, fast.hasName, slow.name, slow.hasName = "", false, "", false // read for custom events only
		}
		requireSameRouting(t, slow, fast, b)
	})
}

// requireSameRouting compares two readings of b, an empty namespace the
// same as none (DecodeEvent keeps neither).
func requireSameRouting(t *testing.T, want, got routing, b []byte) {
	t.Helper()
	if len(want.namespace) == 0 && len(got.namespace) == 0 {
		want.namespace, got.namespace = nil, nil
	}
	require.Equal(t, want, got, "%s", b)
}

// BenchmarkDecodeEvent reads a 100-byte custom event as a node receiving
// it from another does: by the fast path, and by encoding/json.
func BenchmarkDecodeEvent(b *testing.B) {
	name := "firehose"
	e, err := buildEvent(customEvent(name, protocol.CustomData{Name: &name, Payload: map[string]any{"index": 7, "ts": 1763950000000000000, "pad": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}}), "ep1", 42, 1763950000000)
	require.NoError(b, err)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeEvent(e.JSON()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeRoutingJSON(e.JSON()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestDecodeRoutingNumbers: sequence numbers up to the largest uint64 are
// read by the fast path; past it, with a leading zero or with no digit,
// it leaves the event to encoding/json.
func TestDecodeRoutingNumbers(t *testing.T) {
	for _, c := range []struct {
		name, seq string
		want      uint64
		ok        bool
	}{
		{"zero", "0", 0, true},
		{"19 digits", "1234567890123456789", 1234567890123456789, true},
		{"the largest", "18446744073709551615", math.MaxUint64, true},
		{"one past it", "18446744073709551616", 0, false},
		{"21 digits", "123456789012345678901", 0, false},
		{"a leading zero", "012", 0, false},
		{"no digit", "x", 0, false},
		{"negative", "-1", 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := []byte(`{"type":"event","event_id":"e-1","seq":` + c.seq + `,"method":"values","params":{"namespace":[],"timestamp":1,"data":{}}}`)
			r, ok := decodeRouting(b)
			require.Equal(t, c.ok, ok)
			if ok {
				require.Equal(t, c.want, r.seq)
			}
		})
	}
}

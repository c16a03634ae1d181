package stream

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/stretchr/testify/require"
)

// Helpers of the internal tests: the events they publish.

func customEvent(name string, d protocol.CustomData) Data {
	return Data{Payload: protocol.NewServerEventCustom(d), Name: name}
}

func lifecycleEvent(ns channels.Namespace, data protocol.LifecycleData) Data {
	return Data{Payload: protocol.NewServerEventLifecycle(data), Namespace: ns}
}

func valuesEvent(v any) Data { return Data{Payload: protocol.NewServerEventValues(v)} }

func messagesEvent(node string, v protocol.MessagesDataVariant) Data {
	p := protocol.NewServerEventMessages(protocol.MessagesData{Value: v})
	p.Params.Node = &node
	return Data{Payload: p}
}

// decodeSamples are events as the server writes them, plain enough for
// the generated decoder's fast path (no escapes in what it reads).
func decodeSamples(t testing.TB) [][]byte {
	name := "tok"
	ds := []Data{
		customEvent(name, protocol.CustomData{Name: &name, Payload: map[string]any{"a": 1}}),
		customEvent("", protocol.CustomData{Payload: []any{"x"}}),
		lifecycleEvent(channels.Namespace{"sub:1", "tool:2"}, protocol.LifecycleData{Event: protocol.AgentStatusRunning}),
		lifecycleEvent(nil, protocol.LifecycleData{Event: protocol.AgentStatusCompleted}),
		valuesEvent(map[string]any{"name": "not a custom name"}),
		messagesEvent("agent", &protocol.MessageStartData{Role: "ai"}),
	}
	var out [][]byte
	for i, d := range ds {
		e, err := Build(d, "ep1", uint64(i+1), 1763950000000)
		require.NoError(t, err)
		out = append(out, e.JSON())
	}
	return out
}

// probe is what encoding/json reads of an event's routing members.
type probe struct {
	Method  string  `json:"method"`
	EventID *string `json:"event_id"`
	Seq     *uint64 `json:"seq"`
	Params  struct {
		Namespace []string `json:"namespace"`
		Data      struct {
			Name *string `json:"name"`
		} `json:"data"`
	} `json:"params"`
}

// requireDecodedAsJSON checks that e, decoded from b, routes as
// encoding/json reads b.
func requireDecodedAsJSON(t *testing.T, b []byte, e *Event) {
	t.Helper()
	var p probe
	require.NoError(t, json.Unmarshal(b, &p))
	require.Equal(t, p.Method, e.Method, "%s", b)
	require.Equal(t, *p.EventID, e.EventID(), "%s", b)
	require.Equal(t, *p.Seq, e.Seq, "%s", b)
	require.Equal(t, len(p.Params.Namespace), len(e.Namespace), "%s", b)
	for i := range e.Namespace {
		require.Equal(t, p.Params.Namespace[i], e.Namespace[i])
	}
	if e.Method == channels.Custom && p.Params.Data.Name != nil {
		require.Equal(t, *p.Params.Data.Name, e.Name)
	} else {
		require.Empty(t, e.Name, "only custom events are routed by name")
	}
}

// DecodeEvent reads what encoding/json reads, in the layout the server
// writes (the generated fast path) and in any other (its fallback).
func TestDecodeEventAgreesWithEncodingJSON(t *testing.T) {
	for _, b := range decodeSamples(t) {
		var r protocol.ServerEventRouting
		require.NoError(t, protocol.DecodeServerEventRouting(b, &r))
		require.True(t, r.HasSeq, "%s", b)
		e, err := DecodeEvent(b)
		require.NoError(t, err)
		requireDecodedAsJSON(t, b, e)
	}
	for _, b := range []string{
		`{"type":"event","event_id":"e-1","seq":1,"method":"custom","params":{"namespace":["a\"b"],"timestamp":1,"data":{"payload":1}}}`,
		`{"method":"custom","type":"event","event_id":"e-1","seq":1,"params":{"namespace":[],"timestamp":1,"data":{"payload":1}}}`,
		`{"type":"event","event_id":"e-1","seq":1,"method":"custom","params":{"namespace":[],"timestamp":1,"data":{"x":1,"name":"n","payload":1}}}`,
		`{"type":"event", "event_id":"e-1","seq":1,"method":"values","params":{"namespace":[],"timestamp":1,"data":{}}}`,
	} {
		e, err := DecodeEvent([]byte(b))
		require.NoError(t, err, b)
		requireDecodedAsJSON(t, []byte(b), e)
	}
	for _, b := range []string{
		`{"type":"event","method":"values","params":{"namespace":[],"timestamp":1,"data":{}}}`, // a notice: no seq
		`{"type":"event","event_id":"e-1","seq":1`,
		`[]`,
	} {
		_, err := DecodeEvent([]byte(b))
		require.Error(t, err, b)
	}
}

// FuzzDecodeEvent: never a panic, and whatever DecodeEvent reads,
// encoding/json reads the same (go test ./server -run '^$' -fuzz
// FuzzDecodeEvent).
func FuzzDecodeEvent(f *testing.F) {
	for _, b := range decodeSamples(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeEvent(b)
		if err != nil || !json.Valid(b) {
			return
		}
		var p probe
		if json.Unmarshal(b, &p) != nil || p.EventID == nil || p.Seq == nil {
			return
		}
		var full protocol.ServerEvent
		if full.UnmarshalJSON(b) != nil {
			return
		}
		again, err := full.AppendJSON(nil)
		if err != nil || string(again) != string(b) {
			return // not in the layout the server writes: a duplicate member may differ
		}
		requireDecodedAsJSON(t, b, e)
	})
}

// BenchmarkDecodeEvent reads a 100-byte custom event as a node receiving
// it from another does: by the generated fast path, and by the generated
// decoder in full (what any other layout costs).
func BenchmarkDecodeEvent(b *testing.B) {
	name := "firehose"
	e, err := Build(customEvent(name, protocol.CustomData{Name: &name, Payload: map[string]any{"index": 7, "ts": 1763950000000000000, "pad": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}}), "ep1", 42, 1763950000000)
	require.NoError(b, err)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeEvent(e.JSON()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("full", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var full protocol.ServerEvent
			if err := full.UnmarshalJSON(e.JSON()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestDecodeEventNumbers: sequence numbers up to the largest uint64 are
// read; past it, with a leading zero or with no digit, the event is not
// JSON the generated decoder reads.
func TestDecodeEventNumbers(t *testing.T) {
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
		{"a fraction", "1.5", 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := []byte(`{"type":"event","event_id":"e-1","seq":` + c.seq + `,"method":"values","params":{"namespace":[],"timestamp":1,"data":{}}}`)
			e, err := DecodeEvent(b)
			if !c.ok {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, e.Seq)
		})
	}
}

package fast

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

const tricky = "a<b>&\"c\"\\ \u2028é\x01\xff"

func ptr[T any](v T) *T { return &v }

// events are values of every variant, with members present and absent,
// tricky strings, extras and nil against empty.
func events() []EventVariant {
	tool := Cause{Value: &ToolCause{ID: tricky}}
	edge := Cause{Value: &EdgeCause{From: "n", Extra: map[string]any{"z": 1.5, "a": []any{tricky, nil}}}}
	started := NewStarted(StartedParamsData{Status: StatusRunning, Step: -3, Done: true})
	started.SetNs([]string{})
	started.Extra = map[string]any{"x-extra": map[string]any{"k": tricky}}
	full := NewStarted(StartedParamsData{Status: StatusDone, Graph: ptr(tricky), Cause: &edge, Step: math.MinInt64, Done: false})
	full.SetEventID(ptr("e-1"))
	full.SetSeq(ptr(uint64(math.MaxUint64)))
	full.SetNs([]string{"a", tricky})
	full.SetAt(1700000000000)
	said := NewSaid(tool)
	said.Params.Node = ptr("node-1")
	said.SetNs(nil) // null, as encoding/json writes a nil slice
	noted := NewNoted(NotedParamsData{Name: ptr("n"), Payload: map[string]any{"v": []any{1, "two", nil}}, Score: ptr(0.1),
		Tags: []string{}, Counts: map[string]int64{"b": 2, "a": -1}, Items: []Cause{tool, edge}, OddKey: tricky,
		Extra: map[string]any{"later": true}})
	noted.SetEventID(ptr("id"))
	noted.SetNs([]string{})
	bare := NewNoted(NotedParamsData{Payload: ownJSON{S: tricky}, Nothing: &tool})
	bare.SetNs([]string{"x"})
	odd := NewOdd()
	odd.SetSeq(ptr(uint64(0)))
	odd.SetNs([]string{})
	return []EventVariant{started, full, said, noted, bare, odd}
}

// ownJSON writes its own JSON (cddlrt.JSONAppender).
type ownJSON struct{ S string }

func (o ownJSON) AppendJSON(b []byte) []byte {
	j, _ := json.Marshal(o)
	return append(b, j...)
}

func TestAppendJSONIsMarshalJSON(t *testing.T) {
	for _, v := range events() {
		want, err := json.Marshal(Event{Value: v})
		require.NoError(t, err)
		got, err := v.AppendJSON([]byte("prefix"))
		require.NoError(t, err)
		require.Equal(t, "prefix", string(got[:6]), "appends")
		require.JSONEq(t, string(want), string(got[6:]), "%s", v.Method())
		require.True(t, json.Valid(got[6:]))
		// The union's own AppendJSON is its variant's.
		u := Event{Value: v}
		again, err := u.AppendJSON(nil)
		require.NoError(t, err)
		require.Equal(t, string(got[6:]), string(again))
	}
}

func TestAppendJSONKeepsAnUnknownVariant(t *testing.T) {
	var u Event
	require.NoError(t, json.Unmarshal([]byte(`{"type":"event","method":"new","params":{"ns":[],"at":1}}`), &u))
	require.Nil(t, u.Value)
	got, err := u.AppendJSON(nil)
	require.NoError(t, err)
	require.JSONEq(t, `{"type":"event","method":"new","params":{"ns":[],"at":1}}`, string(got))
}

func TestAppendJSONReportsAnUnencodableValue(t *testing.T) {
	v := NewNoted(NotedParamsData{Payload: math.Inf(1)})
	_, err := v.AppendJSON(nil)
	require.Error(t, err)
}

// TestDecodeRouting: the fast path reads what AppendJSON writes, the slow
// path the same from any other layout, and both agree.
func TestDecodeRouting(t *testing.T) {
	for i, v := range events() {
		fast, err := v.AppendJSON(nil)
		require.NoError(t, err)
		var r EventRouting
		// events()[1] has escaped strings in routed members, which only
		// the slow path reads.
		require.Equal(t, i != 1, decodeEventRoutingFast(fast, &r), "fast path: %s", fast)
		slow, err := json.Marshal(Event{Value: v}) // literals first: another layout
		require.NoError(t, err)
		if v.GetEventID() != nil {
			var unused EventRouting
			require.False(t, decodeEventRoutingFast(slow, &unused), "MarshalJSON writes literals first, event_id after method: %s", slow)
		}
		var fromSlow, fromFast EventRouting
		require.NoError(t, DecodeEventRouting(slow, &fromSlow))
		require.NoError(t, DecodeEventRouting(fast, &fromFast))
		require.Equal(t, fromSlow, fromFast, "%s", fast)
		require.Equal(t, v.Method(), fromFast.Method)
		if id := v.GetEventID(); id != nil {
			require.True(t, fromFast.HasEventID)
			require.Equal(t, *id, fromFast.EventID)
		}
		if seq := v.GetSeq(); seq != nil {
			require.True(t, fromFast.HasSeq)
			require.Equal(t, *seq, fromFast.Seq)
		}
	}
	full := events()[1].(*Started)
	plain := "plain"
	full.Params.Data.Graph = &plain
	full.Params.Ns = []string{"a", "b:c"}
	b, err := full.AppendJSON(nil)
	require.NoError(t, err)
	var r EventRouting
	require.True(t, decodeEventRoutingFast(b, &r))
	require.Equal(t, EventRouting{EventID: "e-1", HasEventID: true, Seq: math.MaxUint64, HasSeq: true, Method: "started",
		ParamsNs: []string{"a", "b:c"}, ParamsAt: 1700000000000, ParamsDataGraph: plain, HasParamsDataGraph: true}, r)
}

func TestDecodeRoutingRefusesWhatUnmarshalJSONRefuses(t *testing.T) {
	for _, b := range []string{``, `{`, `[]`, `{"type":"event","method":"started","params":{"ns":[],"at":-1}}`, `{"type":"other","method":"odd","params":{"ns":[],"at":1}}`} {
		var r EventRouting
		require.Error(t, DecodeEventRouting([]byte(b), &r), b)
	}
	var r EventRouting
	require.NoError(t, DecodeEventRouting([]byte(`{"type":"event","method":"new","params":{}}`), &r), "an unknown variant of an open union")
	require.Equal(t, "new", r.Method)
}

// FuzzDecodeRouting: never a panic; what the fast path reads of a value
// in AppendJSON's layout is what the slow path reads; and the fast path
// reads every value AppendJSON writes whose routed strings need no escape.
func FuzzDecodeRouting(f *testing.F) {
	for _, v := range events() {
		b, _ := v.AppendJSON(nil)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fast EventRouting
		fastOK := decodeEventRoutingFast(b, &fast)
		var slow EventRouting
		if decodeEventRoutingSlow(b, &slow) != nil {
			return
		}
		var u Event
		require.NoError(t, u.UnmarshalJSON(b))
		if u.Value == nil {
			return
		}
		again, err := u.Value.AppendJSON(nil)
		if err != nil {
			return // decoded leniently (a required union member missing): not a value AppendJSON writes
		}
		if !bytes.Equal(again, b) {
			return // not in AppendJSON's layout: the fast path may stop early or read a member that a duplicate replaces
		}
		if fastOK {
			require.Equal(t, slow, fast)
		} else {
			require.Contains(t, string(b), `\`, "the fast path refused a value AppendJSON wrote with no escape: %s", b)
		}
	})
}

package kitchen

import (
	"encoding/json"
	"testing"

	"github.com/agentstream/agentstream/runtime/cddlrt"
	"github.com/fxamacker/cbor/v2"
	"github.com/stretchr/testify/require"
)

const putJSON = `{
  "request_id": 7,
  "op": "put",
  "trace": {"span": "abc", "sampled": true, "n": 12345678901234567},
  "item": {
    "id": "note-1",
    "title": "Groceries",
    "kind": "note",
    "tags": ["home", "food"],
    "scores": [0.5, 1.25],
    "parent": {"id": "root", "kind": "link-ref", "tags": [], "position": [0, 0],
               "created_at": "2026-01-01T00:00:00Z", "flags": 0},
    "payload": "aGVsbG8=",
    "meta": {"a": 1, "b": null, "c": "x"},
    "position": [3, -4],
    "created_at": "2026-11-22T10:00:00Z",
    "flags": 3
  }
}`

// roundTripJSON decodes into T, encodes again and requires the same JSON.
func roundTripJSON[T any](t *testing.T, in string) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal([]byte(in), &v))
	out, err := json.Marshal(v)
	require.NoError(t, err)
	require.JSONEq(t, in, string(out))
	return v
}

// roundTripCBOR encodes v as CBOR, decodes it into a fresh T and requires
// the same value, then the same JSON.
func roundTripCBOR[T any](t *testing.T, v T) {
	t.Helper()
	b, err := cbor.Marshal(v)
	require.NoError(t, err)
	var back T
	require.NoError(t, cbor.Unmarshal(b, &back))
	j1, err := json.Marshal(v)
	require.NoError(t, err)
	j2, err := json.Marshal(back)
	require.NoError(t, err)
	require.JSONEq(t, string(j1), string(j2))
}

func TestEnvelopeKnownVariantRoundTrips(t *testing.T) {
	env := roundTripJSON[Envelope](t, putJSON)
	put, ok := env.Value.(*EnvelopePut)
	require.True(t, ok, "got %T", env.Value)
	require.Equal(t, uint64(7), put.RequestID)
	require.Equal(t, "note-1", put.Item.ID)
	require.Equal(t, ItemKindNote, put.Item.Kind)
	require.Equal(t, Point{X: 3, Y: -4}, put.Item.Position)
	require.Equal(t, []byte("hello"), put.Item.Payload)
	require.Equal(t, Flags(3), put.Item.Flags)
	require.NotNil(t, put.Item.Parent)
	require.Equal(t, ItemKindLinkRef, put.Item.Parent.Kind)
	// The unknown member is kept, numbers exactly.
	require.Contains(t, put.Extra, "trace")
	roundTripCBOR(t, env)
}

func TestEnvelopeUnknownVariantIsKept(t *testing.T) {
	in := `{"request_id": 9, "op": "rename", "from": "a", "to": "b"}`
	env := roundTripJSON[Envelope](t, in)
	require.Nil(t, env.Value)
	require.NotNil(t, env.Unknown)

	// The same from CBOR, and across encodings.
	var generic any
	require.NoError(t, json.Unmarshal([]byte(in), &generic))
	b, err := cbor.Marshal(generic)
	require.NoError(t, err)
	var fromCBOR Envelope
	require.NoError(t, cbor.Unmarshal(b, &fromCBOR))
	require.NotNil(t, fromCBOR.Unknown)
	again, err := cbor.Marshal(fromCBOR)
	require.NoError(t, err)
	require.Equal(t, b, again)
	asJSON, err := json.Marshal(fromCBOR)
	require.NoError(t, err)
	require.JSONEq(t, in, string(asJSON))
}

func TestEnvelopeOtherVariants(t *testing.T) {
	env := roundTripJSON[Envelope](t, `{"request_id": 1, "op": "delete"}`)
	del := env.Value.(*EnvelopeDelete)
	require.Nil(t, del.ItemID, "an absent optional member is nil")

	env = roundTripJSON[Envelope](t, `{"request_id": 2, "op": "list", "limit": 0, "cursor": "c1"}`)
	list := env.Value.(*EnvelopeList)
	require.NotNil(t, list.Limit, "a present zero is not absent")
	require.Equal(t, uint64(0), *list.Limit)
	roundTripCBOR(t, env)
}

func TestClosedUnionRejectsUnknownVariant(t *testing.T) {
	var s Shape
	err := json.Unmarshal([]byte(`{"type": "triangle", "side": 1}`), &s)
	require.ErrorIs(t, err, cddlrt.ErrUnknownVariant)
	err = json.Unmarshal([]byte(`{"side": 1}`), &s)
	require.ErrorIs(t, err, cddlrt.ErrUnknownVariant)

	s = roundTripJSON[Shape](t, `{"type": "square", "side": 2, "corner-radius": 0.5}`)
	sq := s.Value.(*Square)
	require.Equal(t, 0.5, *sq.CornerRadius)
	roundTripCBOR(t, s)
}

func TestLiteralMemberIsChecked(t *testing.T) {
	var p PutOp
	err := json.Unmarshal([]byte(`{"op": "delete", "item": {}}`), &p)
	require.ErrorIs(t, err, cddlrt.ErrLiteral)
	err = json.Unmarshal([]byte(`{"item": {}}`), &p)
	require.ErrorIs(t, err, cddlrt.ErrLiteral)
	out, err := json.Marshal(Circle{Radius: 1})
	require.NoError(t, err)
	require.JSONEq(t, `{"type": "circle", "radius": 1}`, string(out))
}

func TestEnumsAreValidated(t *testing.T) {
	var k ItemKind
	require.ErrorIs(t, json.Unmarshal([]byte(`"pdf"`), &k), cddlrt.ErrInvalidEnum)
	require.NoError(t, json.Unmarshal([]byte(`"other"`), &k), "added with /=")
	require.Equal(t, ItemKindOther, k)
	var c Color
	require.ErrorIs(t, json.Unmarshal([]byte(`"blue"`), &c), cddlrt.ErrInvalidEnum)
	var f Flags
	require.ErrorIs(t, json.Unmarshal([]byte(`4`), &f), cddlrt.ErrInvalidEnum, "bit 2 is not a flag")
	b, _ := cbor.Marshal(5)
	require.ErrorIs(t, cbor.Unmarshal(b, &f), cddlrt.ErrInvalidEnum)
}

func TestGroupChoiceAsType(t *testing.T) {
	r := roundTripJSON[Reply](t, `{"status": "error", "code": "not_found", "message": "no"}`)
	e := r.Value.(*ReplyErr)
	require.Equal(t, ErrorCodeNotFound, e.Code)
	roundTripCBOR(t, r)
}

func TestTuplesGenericsAndIntKeys(t *testing.T) {
	l := roundTripJSON[Labels](t, `{"entries": [["a", 1], ["b", -2]]}`)
	require.Equal(t, LabelsEntriesItem{Key: "b", Value: -2}, l.Entries[1])
	roundTripCBOR(t, l)

	var p Point
	require.Error(t, json.Unmarshal([]byte(`[1]`), &p), "wrong length")

	h := Header{Key1: 5, Key4: []byte{1, 2}}
	b, err := cbor.Marshal(h)
	require.NoError(t, err)
	var generic map[int]any
	require.NoError(t, cbor.Unmarshal(b, &generic), "integer keys on the wire")
	require.Contains(t, generic, 1)
	roundTripCBOR(t, h)
}

func TestRecursion(t *testing.T) {
	tr := roundTripJSON[Tree](t, `{"label": "a", "children": [{"label": "b", "children": []}]}`)
	require.Equal(t, "b", tr.Children[0].Label)
	roundTripCBOR(t, tr)
}

func TestUnionByMemberPresence(t *testing.T) {
	a := roundTripJSON[Answer](t, `{"question_id": "q1", "response": 3}`)
	require.Equal(t, "q1", a.Value.(*AnswerOne).QuestionID)
	a = roundTripJSON[Answer](t, `{"responses": [{"question_id": "q2", "response": true}]}`)
	require.Len(t, a.Value.(*AnswerMany).Responses, 1)
	roundTripCBOR(t, a)
	var bad Answer
	require.ErrorIs(t, json.Unmarshal([]byte(`{"other": 1}`), &bad), cddlrt.ErrUnknownVariant)
}

// The variants of a union share accessors, so code using the union needs
// no type switch: the discriminator's value, and Get/Set for the members
// every variant has with the same type (request_id here; item_id is not
// in every variant, so it gets none).
func TestUnionAccessors(t *testing.T) {
	var e Envelope
	require.NoError(t, json.Unmarshal([]byte(`{"op":"delete","request_id":7,"item_id":"x"}`), &e))
	require.Equal(t, "delete", e.Value.Op())
	require.Equal(t, uint64(7), e.Value.GetRequestID())
	e.Value.SetRequestID(8)
	b, err := json.Marshal(e)
	require.NoError(t, err)
	require.JSONEq(t, `{"op":"delete","request_id":8,"item_id":"x"}`, string(b))
	for _, v := range []EnvelopeVariant{&EnvelopePut{}, &EnvelopeDelete{}, &EnvelopeList{}} {
		b, err := json.Marshal(Envelope{Value: v})
		require.NoError(t, err)
		var back map[string]any
		require.NoError(t, json.Unmarshal(b, &back))
		require.Equal(t, v.Op(), back["op"], "Op() is the value on the wire")
	}
	var s Shape
	require.NoError(t, json.Unmarshal([]byte(`{"type":"square","side":2}`), &s))
	require.Equal(t, "square", s.Value.Type())
}

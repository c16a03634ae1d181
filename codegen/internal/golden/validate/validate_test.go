package validate

import (
	"encoding/json"
	"testing"

	"github.com/agentstream/agentstream/runtime/cddlrt"
	"github.com/fxamacker/cbor/v2"
	"github.com/stretchr/testify/require"
)

const good = `{"id": "o-1", "qty": 3, "discount": 0.25, "code": "ABC-12", "tags": ["a", "bb"],
  "lines": [{"sku": "s", "count": 2}], "status": "open", "note": null, "version": 2, "lat": 1, "lon": 2}`

// TestStrictDecode: each broken document is refused at its JSON path,
// naming the rule; the good one passes, in JSON and in CBOR.
func TestStrictDecode(t *testing.T) {
	var o Order
	require.NoError(t, cddlrt.DecodeStrictJSON([]byte(good), &o))
	b, err := cbor.Marshal(o)
	require.NoError(t, err)
	var back Order
	require.NoError(t, cddlrt.DecodeStrictCBOR(b, &back))
	require.Equal(t, o, back)

	for _, c := range []struct{ edit, path, rule, msg string }{
		{`"id": ""`, "id", "Order", "must be at least 1 bytes long, not 0"},
		{`"id": "123456789"`, "id", "Order", "must be at most 8 bytes long, not 9"},
		{`"qty": 0`, "qty", "Order", "must be >= 1 but found 0"},
		{`"qty": 101`, "qty", "Order", "must be <= 100 but found 101"},
		{`"discount": 0.75`, "discount", "Order", "must be <= 0.5 but found 0.75"},
		{`"code": "abc-1"`, "code", "Order", "does not match pattern '^(?:[A-Z]{3}-[0-9]+)$'"},
		{`"tags": []`, "tags", "Order", "must have at least 1 items, not 0"},
		{`"tags": ["a", "b", "c", "d"]`, "tags", "Order", "must have at most 3 items, not 4"},
		{`"tags": ["a", "toolong"]`, "tags[1]", "tag", "must be at most 5 bytes long, not 7"},
		{`"lines": [{"sku": "s", "count": 0}]`, "lines[0].count", "Line", "must be > 0 but found 0"},
		{`"lines": [{"sku": "s"}]`, "lines[0]", "Line", "missing members: 'count'"},
		{`"lines": [{"sku": "s", "count": 1, "color": "red"}]`, "lines[0]", "Line", "members not allowed: 'color'"},
		{`"status": "lost"`, "status", "", "Status: lost: cddlrt: value is not one of the allowed literals"},
		{`"version": 3`, "version", "Order", "must be 2, not 3"},
		{`"qty": "three"`, "qty", "", "expected uint64, but got string"},
		{`"id": null`, "id", "Order", "null is not allowed here"},
		{`"status": null`, "status", "Order", "null is not allowed here"},
		{`"tags": [null]`, "tags[0]", "", "null is not allowed here"},
		{`"lines": [null]`, "lines[0]", "", "null is not allowed here"},
		{`"shape": {"kind": "hexagon"}`, "shape", "", "matches none of the variants of Shape"},
		{`"shape": {"kind": "circle", "r": "big"}`, "shape.r", "", "expected float64, but got string"},
	} {
		doc := map[string]json.RawMessage{}
		require.NoError(t, json.Unmarshal([]byte(good), &doc))
		var patch map[string]json.RawMessage
		require.NoError(t, json.Unmarshal([]byte("{"+c.edit+"}"), &patch))
		for k, v := range patch {
			doc[k] = v
		}
		data, err := json.Marshal(doc)
		require.NoError(t, err)
		var o Order
		err = cddlrt.DecodeStrictJSON(data, &o)
		var ve *cddlrt.ValidationError
		require.ErrorAs(t, err, &ve, c.edit)
		require.Equal(t, cddlrt.ValidationError{Path: c.path, Rule: c.rule, Msg: c.msg}, *ve, c.edit)
	}
	// An optional group's members come together.
	err = cddlrt.DecodeStrictJSON([]byte(`{"id": "o", "qty": 1, "code": "ABC-1", "tags": ["a"], "lines": [], "version": 2, "lat": 1}`), &o)
	require.EqualError(t, err, "members 'lat', 'lon' go together: all or none (rule Order)")
	require.NoError(t, cddlrt.DecodeStrictJSON([]byte(`{"id": "o", "qty": 1, "code": "ABC-1", "tags": ["a"], "lines": [], "version": 2}`), &o))
	// Null where the rule admits it, a known variant of an open union.
	require.NoError(t, cddlrt.DecodeStrictJSON([]byte(`{"id": "o", "qty": 1, "code": "ABC-1", "tags": ["a"], "lines": [], "version": 2,
		"note": null, "marks": ["m", null], "shape": {"kind": "square", "side": 2, "color": "red"}}`), &o))
	require.Equal(t, []*string{ptr("m"), nil}, o.Marks)
	// A choice typed any is left to the schema: present, the strict decode
	// says it cannot check it, whether the value is good or not.
	for _, hint := range []string{`"text"`, `{"sku": "s", "count": 1}`, `12`} {
		err := cddlrt.DecodeStrictJSON([]byte(`{"id": "o", "qty": 1, "code": "ABC-1", "tags": ["a"], "lines": [], "version": 2, "hint": `+hint+`}`), &o)
		require.ErrorIs(t, err, cddlrt.ErrUnchecked, hint)
		require.ErrorContains(t, err, "hint: ", hint)
	}
	// A plain decode keeps an unknown variant of an open union.
	var plain Order
	require.NoError(t, json.Unmarshal([]byte(`{"shape": {"kind": "hexagon"}}`), &plain))
	require.NotNil(t, plain.Shape.Unknown)
	// A required member left out is missing, not zero.
	var missing Order
	err = cddlrt.DecodeStrictJSON([]byte(`{"id": "o", "qty": 1, "code": "ABC-1", "tags": ["a"], "lines": []}`), &missing)
	require.EqualError(t, err, "missing members: 'version' (rule Order)")
	require.NoError(t, json.Unmarshal([]byte(`{"id": "o", "qty": 1, "code": "ABC-1", "tags": ["a"], "lines": []}`), &missing),
		"a plain decode does not check")
}

func ptr[T any](v T) *T { return &v }

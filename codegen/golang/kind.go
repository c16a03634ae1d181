package golang

import (
	"fmt"
	"strings"

	"github.com/agentstream/agentstream/codegen/cddl"
	"github.com/agentstream/agentstream/codegen/model"
)

// kindVariant is one alternative of a union told apart by the kind of its
// value.
type kindVariant struct {
	kind    string // the cddlrt Kind constant's suffix: Null, Bool, Int, ...
	typ     string // the Go type that implements the union's interface ("" for null)
	ptr     bool   // the variant is *typ (a struct)
	named   string // for a scalar, the named type declared for it
	under   string // its underlying type
	wireAlt string // what the doc calls it
}

// jsonKinds returns the kind of the values of shape s, as the encoded
// value shows it: one of Null, Bool, Int, Float, Text, Bytes, Array, Map,
// or "" when its values may be of several kinds.
func (gg *goGen) kindOf(s *model.Shape) string {
	r := gg.M.Resolve(s)
	if r == nil {
		return ""
	}
	switch r.Kind {
	case model.KNull:
		return "Null"
	case model.KBool:
		return "Bool"
	case model.KInt:
		return "Int"
	case model.KFloat:
		return "Float"
	case model.KText:
		return "Text"
	case model.KBytes:
		return "Bytes"
	case model.KStruct, model.KMap:
		return "Map"
	case model.KArray, model.KTuple:
		return "Array"
	case model.KLiteral:
		switch {
		case r.LitBool != nil:
			return "Bool"
		case r.Lit.Kind == cddl.ValueInt:
			return "Int"
		case r.Lit.Kind == cddl.ValueFloat:
			return "Float"
		case r.Lit.Kind == cddl.ValueText:
			return "Text"
		case r.Lit.Kind == cddl.ValueBytes:
			return "Bytes"
		}
	case model.KUnion:
		switch {
		case r.IsTextEnum():
			return "Text"
		case isIntEnum(r):
			return "Int"
		}
		if s.Kind == model.KRef && hasStructLeaves(gg.M, r) {
			if d, _ := gg.M.Discriminator(r); d != "" {
				return "Map"
			}
			if gg.M.Markers(r) != nil {
				return "Map"
			}
			if d, _ := gg.M.NestedDiscriminator(r); d != "" {
				return "Map"
			}
		}
	}
	return ""
}

// kindVariants analyses union d for writeKindSum: its variants, the kinds seen,
// whether null is one of them, and whether the union can be told apart by
// kind at all.
func (gg *goGen) kindVariants(d *model.Decl, id string) (vs []kindVariant, seen map[string]bool, hasNull, ok bool) {
	alts := d.Shape.Alts
	if len(alts) < 2 {
		return nil, nil, false, false
	}
	seen = map[string]bool{}
	for _, a := range alts {
		k := gg.kindOf(a)
		jsonK := k
		if k == "Bytes" {
			jsonK = "Text"
		}
		if k == "" || seen[jsonK] {
			return nil, nil, false, false
		}
		seen[jsonK] = true
		if k == "Null" {
			hasNull = true
			continue
		}
		v := kindVariant{kind: k}
		r := gg.M.Resolve(a)
		switch {
		case a.Kind == model.KRef && (r.Kind == model.KStruct || (r.Kind == model.KUnion && k == "Map")):
			v.typ, v.ptr = gg.Ident(a.Ref), true
		default:
			v.named = id + k
			if a.Kind == model.KRef {
				v.named = id + gg.Ident(a.Ref)
			}
			v.under = gg.goType(d, a)
			v.typ = v.named
		}
		vs = append(vs, v)
	}
	return vs, seen, hasNull, true
}

// writeKindSum writes union d, whose alternatives are each of a
// different kind (`JsInt / text`, `text / RunSend / [* ...]`; form "kind"),
// as a struct holding one variant chosen by the kind of the value
// received.
func (gg *goGen) writeKindSum(d *model.Decl, id string, vs []kindVariant, seen map[string]bool, hasNull bool) {
	gg.use(impJSON)
	gg.use(impCBOR)
	gg.use(impRT)
	var names []string
	for _, v := range vs {
		n := v.typ
		if v.ptr {
			n = "*" + n
		}
		names = append(names, n)
	}
	gg.doc("", id, d.Doc, fmt.Sprintf("%s is generated from CDDL rule %q.", id, d.Name))
	gg.p("//")
	gg.p("// Its Value is one of %s, chosen by the kind of the value (text, number, map, ...).", strings.Join(names, ", "))
	gg.p("type %s struct {", id)
	if hasNull {
		gg.p("\t// Value is the variant; nil is null.")
	} else {
		gg.p("\t// Value is the variant.")
	}
	gg.p("\tValue %sVariant", id)
	gg.p("}")
	gg.p("")
	gg.p("// %sVariant is implemented by the variants of %s.", id, id)
	gg.p("type %sVariant interface{ is%s() }", id, id)
	for i, v := range vs {
		if v.named != "" {
			gg.r("", fmt.Sprintf("// %s is the %s variant of %s.", v.named, strings.ToLower(v.kind), id),
				fmt.Sprintf("type %s %s", v.named, v.under))
		}
		gg.r("", fmt.Sprintf("func (%s) is%s() {}", names[i], id))
	}
	// The kinds each variant is chosen for, per encoding.
	kindCases := func(v kindVariant, json bool) string {
		kinds := "cddlrt.Kind" + v.kind
		if v.kind == "Bytes" && json {
			kinds = "cddlrt.KindText"
		}
		if v.kind == "Float" && !seen["Int"] {
			kinds += ", cddlrt.KindInt" // 1 is a float too
		}
		return kinds
	}
	for _, enc := range []struct{ name, pkg, kindFn, unmarshal string }{
		{"JSON", "json", "cddlrt.JSONKind", "json.Unmarshal"},
		{"CBOR", "cbor", "cddlrt.CBORKind", "cddlrt.CBORDecMode.Unmarshal"},
	} {
		gg.q("")
		gg.q("// Marshal%s encodes the variant.", enc.name)
		gg.q("func (u %s) Marshal%s() ([]byte, error) {", id, enc.name)
		if hasNull {
			gg.q("return %s.Marshal(u.Value)", enc.pkg)
		} else {
			gg.q("v, err := cddlrt.EncodeVariant(%q, u.Value, nil)", id)
			gg.q("if err != nil {")
			gg.q("return nil, err")
			gg.q("}")
			gg.q("return %s.Marshal(v)", enc.pkg)
		}
		gg.q("}")
		gg.q("")
		gg.q("// Unmarshal%s decodes the variant the value's kind names.", enc.name)
		gg.q("func (u *%s) Unmarshal%s(data []byte) error {", id, enc.name)
		gg.q("switch k := %s(data); k {", enc.kindFn)
		if hasNull {
			gg.q("case cddlrt.KindNull:")
			gg.q("u.Value = nil")
			gg.q("return nil")
		}
		for _, v := range vs {
			gg.q("case %s:", kindCases(v, enc.name == "JSON"))
			gg.q("v := new(%s)", v.typ)
			gg.q("if err := %s(data, v); err != nil {", enc.unmarshal)
			gg.q("return err")
			gg.q("}")
			if v.ptr {
				gg.q("u.Value = v")
			} else {
				gg.q("u.Value = *v")
			}
			gg.q("return nil")
		}
		gg.q("default:")
		gg.q("return cddlrt.WrongKind(%q, k)", id)
		gg.q("}")
		gg.q("}")
	}
	gg.q("")
	gg.q("// CDDLVariant returns a new, empty variant for the encoded value data,")
	gg.q("// as the decoders choose it (strict decoding: cddlrt.DecodeStrictJSON).")
	gg.q("func (%s) CDDLVariant(data []byte, isCBOR bool) (any, error) {", id)
	gg.q("k := cddlrt.JSONKind(data)")
	gg.q("if isCBOR {")
	gg.q("k = cddlrt.CBORKind(data)")
	gg.q("}")
	gg.q("switch {")
	if hasNull {
		gg.q("case k == cddlrt.KindNull:")
		gg.q("return nil, nil")
	}
	for _, v := range vs {
		jsonCases, cborCases := kindCases(v, true), kindCases(v, false)
		cond := func(cases string) string {
			var parts []string
			for _, c := range strings.Split(cases, ", ") {
				parts = append(parts, "k == "+c)
			}
			return strings.Join(parts, " || ")
		}
		if jsonCases == cborCases {
			gg.q("case %s:", cond(jsonCases))
		} else {
			gg.q("case !isCBOR && (%s), isCBOR && (%s):", cond(jsonCases), cond(cborCases))
		}
		gg.q("return new(%s), nil", v.typ)
	}
	gg.q("}")
	gg.q("return nil, cddlrt.WrongKind(%q, k)", id)
	gg.q("}")
	if hasNull {
		gg.q("")
		gg.q("// CDDLAdmitsNull tells strict decoding that %s may be null.", id)
		gg.q("func (%s) CDDLAdmitsNull() bool { return true }", id)
	}
	gg.flushQ()
	gg.validateUnion(d, id, hasNull, false)
}

package codegen

import (
	"fmt"
	"strings"
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
func (gg *goGen) kindOf(s *Shape) string {
	r := gg.m.Resolve(s)
	if r == nil {
		return ""
	}
	switch r.Kind {
	case KNull:
		return "Null"
	case KBool:
		return "Bool"
	case KInt:
		return "Int"
	case KFloat:
		return "Float"
	case KText:
		return "Text"
	case KBytes:
		return "Bytes"
	case KStruct, KMap:
		return "Map"
	case KArray, KTuple:
		return "Array"
	case KLiteral:
		switch {
		case r.LitBool != nil:
			return "Bool"
		case r.Lit.Kind == ValueInt:
			return "Int"
		case r.Lit.Kind == ValueFloat:
			return "Float"
		case r.Lit.Kind == ValueText:
			return "Text"
		case r.Lit.Kind == ValueBytes:
			return "Bytes"
		}
	case KUnion:
		switch {
		case r.IsTextEnum():
			return "Text"
		case isIntEnum(r):
			return "Int"
		}
		if s.Kind == KRef && hasStructLeaves(gg.m, r) {
			if d, _ := gg.m.Discriminator(r); d != "" {
				return "Map"
			}
			if gg.m.Markers(r) != nil {
				return "Map"
			}
			if d, _ := gg.m.NestedDiscriminator(r); d != "" {
				return "Map"
			}
		}
	}
	return ""
}

// kindSum writes union d, whose alternatives are each of a different kind
// (`JsInt / text`, `text / RunSend / [* ...]`), as a struct holding one
// variant chosen by the kind of the value received; it reports false, and
// writes nothing, when two alternatives share a kind (JSON: text and bytes
// are both text) or one may be of several.
func (gg *goGen) kindSum(d *Decl, id string) bool {
	alts := d.Shape.Alts
	if len(alts) < 2 {
		return false
	}
	var vs []kindVariant
	seen := map[string]bool{}
	hasNull := false
	for _, a := range alts {
		k := gg.kindOf(a)
		jsonK := k
		if k == "Bytes" {
			jsonK = "Text"
		}
		if k == "" || seen[jsonK] {
			return false
		}
		seen[jsonK] = true
		if k == "Null" {
			hasNull = true
			continue
		}
		v := kindVariant{kind: k}
		r := gg.m.Resolve(a)
		switch {
		case a.Kind == KRef && (r.Kind == KStruct || (r.Kind == KUnion && k == "Map")):
			v.typ, v.ptr = gg.ident(a.Ref), true
		default:
			v.named = id + k
			if a.Kind == KRef {
				v.named = id + gg.ident(a.Ref)
			}
			v.under = gg.goType(d, a)
			v.typ = v.named
		}
		vs = append(vs, v)
	}
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
	for _, enc := range []struct{ name, pkg, kindFn, unmarshal string }{
		{"JSON", "json", "cddlrt.JSONKind", "json.Unmarshal"},
		{"CBOR", "cbor", "cddlrt.CBORKind", "cddlrt.CBORDecMode.Unmarshal"},
	} {
		gg.p("")
		gg.p("// Marshal%s encodes the variant.", enc.name)
		gg.p("func (u %s) Marshal%s() ([]byte, error) {", id, enc.name)
		if hasNull {
			gg.p("return %s.Marshal(u.Value)", enc.pkg)
		} else {
			gg.p("v, err := cddlrt.EncodeVariant(%q, u.Value, nil)", id)
			gg.p("if err != nil {")
			gg.p("return nil, err")
			gg.p("}")
			gg.p("return %s.Marshal(v)", enc.pkg)
		}
		gg.p("}")
		gg.p("")
		gg.p("// Unmarshal%s decodes the variant the value's kind names.", enc.name)
		gg.p("func (u *%s) Unmarshal%s(data []byte) error {", id, enc.name)
		gg.p("switch k := %s(data); k {", enc.kindFn)
		if hasNull {
			gg.p("case cddlrt.KindNull:")
			gg.p("u.Value = nil")
			gg.p("return nil")
		}
		for _, v := range vs {
			kinds := "cddlrt.Kind" + v.kind
			if v.kind == "Bytes" && enc.name == "JSON" {
				kinds = "cddlrt.KindText"
			}
			if v.kind == "Float" && !seen["Int"] {
				kinds += ", cddlrt.KindInt" // 1 is a float too
			}
			gg.p("case %s:", kinds)
			gg.p("v := new(%s)", v.typ)
			gg.p("if err := %s(data, v); err != nil {", enc.unmarshal)
			gg.p("return err")
			gg.p("}")
			if v.ptr {
				gg.p("u.Value = v")
			} else {
				gg.p("u.Value = *v")
			}
			gg.p("return nil")
		}
		gg.p("default:")
		gg.p("return cddlrt.WrongKind(%q, k)", id)
		gg.p("}")
		gg.p("}")
	}
	return true
}

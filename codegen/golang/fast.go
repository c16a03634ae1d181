package golang

import (
	"encoding/json"
	"fmt"
	gotoken "go/token"
	"strconv"
	"strings"

	"github.com/agentstream/agentstream/codegen/cddl"
	"github.com/agentstream/agentstream/codegen/model"
)

// This file writes the fast paths of the unions named in Options.GoFast
// (cddlgen --go-fast), for code that encodes and routes many values of
// one union (a server's events), so that no hand code mirrors the
// generated types:
//   - AppendJSON on every struct and union the union reaches through its
//     members: an append-style encoder, members in schema order, with no
//     reflection but for members typed any;
//   - on the union's variant interface, AppendJSON and accessors for the
//     members every variant's nested struct has (GetNamespace when every
//     variant has params.namespace);
//   - a constructor per variant taking what those accessors do not set;
//   - a routing decoder, DecodeXRouting: the union's discriminator and the
//     leading scalar members of each variant read in the layout AppendJSON
//     writes, with no allocation but for arrays, falling back to the
//     generated decoder for any other layout.

// appendCat is how AppendJSON writes a value.
type appendCat int

const (
	catValue    appendCat = iota // encoding/json (or the value's own AppendJSON)
	catText                      // string, or an alias of it
	catEnum                      // a named text enumeration
	catUint                      // an unsigned integer
	catInt                       // a signed integer
	catBool                      // true or false
	catStrings                   // an array of text
	catAppender                  // a generated type with AppendJSON
)

// fastSet finds the declarations that get AppendJSON: the unions of
// Options.GoFast and every struct or union they reach through members.
func (gg *goGen) fastSet() error {
	gg.fast = map[string]bool{}
	gg.fastRoots = map[string]bool{}
	var visit func(name string)
	visit = func(name string) {
		d := gg.M.Decl(name)
		if d == nil || gg.fast[name] {
			return
		}
		switch gg.form(d) {
		case "struct":
			gg.fast[name] = true
			for _, f := range d.Shape.Fields {
				if s := unwrapNull(f.Shape); s.Kind == model.KRef {
					visit(s.Ref)
				}
			}
		case "sum":
			gg.fast[name] = true
			_, _, leaves, _ := gg.sumOf(d.Shape)
			for _, l := range leaves {
				if l.Kind == model.KRef {
					visit(l.Ref)
				}
			}
		}
	}
	for _, name := range gg.Opt.GoFast {
		d := gg.M.Decl(name)
		if d == nil {
			return fmt.Errorf("--go-fast: no rule %q", name)
		}
		if gg.form(d) != "sum" {
			return fmt.Errorf("--go-fast: rule %q is not a union of maps told apart by a member", name)
		}
		if disc, _, leaves, _ := gg.sumOf(d.Shape); disc == "" || !gg.structLeaves(leaves) {
			return fmt.Errorf("--go-fast: rule %q is not a union of maps told apart by a member", name)
		}
		gg.fastRoots[name] = true
		visit(name)
	}
	return nil
}

// structLeaves reports whether every leaf is a reference to a struct.
func (gg *goGen) structLeaves(leaves []*model.Shape) bool {
	for _, l := range leaves {
		ld := gg.M.Decl(l.Ref)
		if l.Kind != model.KRef || ld == nil || gg.form(ld) != "struct" {
			return false
		}
	}
	return true
}

func unwrapNull(s *model.Shape) *model.Shape {
	if inner, ok := s.Nullable(); ok {
		return inner
	}
	return s
}

// category tells how AppendJSON writes a member of shape s (null
// unwrapped).
func (gg *goGen) category(s *model.Shape) appendCat {
	s = unwrapNull(s)
	if s.Kind == model.KRef {
		if d := gg.M.Decl(s.Ref); d != nil {
			switch f := gg.form(d); {
			case (f == "struct" || f == "sum") && gg.fast[s.Ref]:
				return catAppender
			case f == "enum" && d.Shape.IsTextEnum():
				return catEnum
			case f != "alias":
				return catValue
			}
		}
	}
	r := gg.M.Resolve(s)
	if r == nil {
		return catValue
	}
	switch r.Kind {
	case model.KText:
		return catText
	case model.KBool:
		return catBool
	case model.KInt:
		if r.Min != nil && r.Min.Kind == cddl.ValueInt && r.Min.Int.Sign() >= 0 {
			return catUint
		}
		return catInt
	case model.KLiteral:
		switch {
		case r.LitBool != nil:
			return catBool
		case r.Lit.Kind == cddl.ValueText:
			return catText
		case r.Lit.Kind == cddl.ValueInt && r.Lit.Int.Sign() >= 0:
			return catUint
		case r.Lit.Kind == cddl.ValueInt:
			return catInt
		}
	case model.KArray:
		if e := gg.M.Resolve(r.Elem); e != nil && e.Kind == model.KText {
			return catStrings
		}
	}
	return catValue
}

// appendLines returns the lines that append expression x, of category c,
// to b (err is declared by the caller).
func appendLines(c appendCat, x string) []string {
	switch c {
	case catText:
		return []string{fmt.Sprintf("b = cddlrt.AppendString(b, %s)", x)}
	case catEnum:
		return []string{fmt.Sprintf("b = cddlrt.AppendString(b, string(%s))", x)}
	case catUint:
		return []string{fmt.Sprintf("b = cddlrt.AppendUint(b, uint64(%s))", x)}
	case catInt:
		return []string{fmt.Sprintf("b = cddlrt.AppendInt(b, int64(%s))", x)}
	case catBool:
		return []string{fmt.Sprintf("b = cddlrt.AppendBool(b, bool(%s))", x)}
	case catStrings:
		return []string{fmt.Sprintf("b = cddlrt.AppendStrings(b, %s)", x)}
	case catAppender:
		return []string{fmt.Sprintf("if b, err = %s.AppendJSON(b); err != nil {", x), "return nil, err", "}"}
	}
	return []string{fmt.Sprintf("if b, err = cddlrt.AppendValue(b, %s); err != nil {", x), "return nil, err", "}"}
}

// jsonKey is the Go literal of a member's key as AppendJSON writes it:
// a comma, the quoted name and a colon.
func jsonKey(wire string) string {
	q := jsonQuote(wire)
	return strconv.Quote("," + q + ":")
}

// jsonQuote quotes s as encoding/json does (what AppendJSON's runtime,
// cddlrt.AppendString, writes).
func jsonQuote(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}

// appendMethod writes AppendJSON for struct d.
func (gg *goGen) structAppend(d *model.Decl, id string) {
	gg.use(impRT)
	fs := gg.fields(d, d.Shape)
	var body []string
	usesErr := false
	for _, gf := range fs {
		if gf.literal != "" {
			kq := jsonQuote(gf.wire)
			vq := jsonQuote(gf.literal)
			body = append(body, fmt.Sprintf("b = append(b, %s...)", strconv.Quote(","+kq+":"+vq)))
			continue
		}
		c := gg.category(gf.f.Shape)
		usesErr = usesErr || c == catAppender || c == catValue
		x := "s." + gf.name
		key := fmt.Sprintf("b = append(b, %s...)", jsonKey(gf.wire))
		switch {
		case strings.HasPrefix(gf.typ, "*"):
			// An optional member (absent when nil), or a nullable one.
			elem := appendLines(c, derefExpr(c, x))
			if gf.tagOpt != "" {
				body = append(body, fmt.Sprintf("if %s != nil {", x), key)
				body = append(body, elem...)
				body = append(body, "}")
			} else {
				body = append(body, key, fmt.Sprintf("if %s == nil {", x), `b = append(b, "null"...)`, "} else {")
				body = append(body, elem...)
				body = append(body, "}")
			}
		case gf.tagOpt != "":
			// Nilable: a slice or map (omitzero) or any (omitempty), absent
			// when nil.
			body = append(body, fmt.Sprintf("if %s != nil {", x), key)
			body = append(body, appendLines(c, x)...)
			body = append(body, "}")
		default:
			body = append(body, key)
			body = append(body, appendLines(c, x)...)
		}
	}
	if d.Shape.Rest != nil {
		usesErr = true
		body = append(body, "if b, err = cddlrt.AppendExtra(b, s.Extra); err != nil {", "return nil, err", "}")
	}
	gg.q("")
	gg.q("// AppendJSON appends s as JSON to b: the JSON MarshalJSON writes, with the")
	gg.q("// members in the schema's order, written without reflection but for")
	gg.q("// members typed any (cddlgen --go-fast).")
	gg.q("func (s *%s) AppendJSON(b []byte) ([]byte, error) {", id)
	gg.q("start := len(b)")
	if usesErr {
		gg.q("var err error")
	}
	for _, l := range body {
		gg.q("%s", l)
	}
	gg.q("return cddlrt.CloseObject(b, start), nil")
	gg.q("}")
	gg.flushQ()
}

// derefExpr is the value of pointer expression x.
func derefExpr(c appendCat, x string) string {
	if c == catAppender {
		return x // a method on the pointer
	}
	return "(*" + x + ")"
}

// sumAppend writes AppendJSON for union d.
func (gg *goGen) sumAppend(id string) {
	gg.use(impRT)
	gg.use(impJSON)
	gg.q("")
	gg.q("// AppendJSON appends u as JSON to b: its variant's AppendJSON, or")
	gg.q("// MarshalJSON's output for a variant this code does not know.")
	gg.q("func (u *%s) AppendJSON(b []byte) ([]byte, error) {", id)
	gg.q("if a, ok := u.Value.(cddlrt.Appender); ok {")
	gg.q("return a.AppendJSON(b)")
	gg.q("}")
	gg.q("j, err := json.Marshal(u)")
	gg.q("if err != nil {")
	gg.q("return nil, err")
	gg.q("}")
	gg.q("return append(b, j...), nil")
	gg.q("}")
	gg.flushQ()
}

// nestedAccessors lists, for a fast union, accessors of the members that
// every variant's struct member (params) has with the same Go type: the
// paths that code handling any variant reads and sets.
func (gg *goGen) nestedAccessors(d *model.Decl, leaves []*model.Shape, have []accessor) []accessor {
	if !gg.fastRoots[d.Name] {
		return nil
	}
	var perLeaf [][]goField
	for _, l := range leaves {
		ld := gg.M.Decl(l.Ref)
		perLeaf = append(perLeaf, gg.fields(ld, ld.Shape))
	}
	taken := map[string]bool{"Extra": true, "AppendJSON": true}
	for _, fs := range perLeaf {
		for _, gf := range fs {
			taken[gf.name] = true
		}
	}
	for _, a := range have {
		taken[a.name] = true
	}
	var out []accessor
	for _, outer := range perLeaf[0] {
		if outer.literal != "" || outer.tagOpt != "" || strings.HasPrefix(outer.typ, "*") || gg.category(outer.f.Shape) != catAppender {
			continue
		}
		// The members of outer's struct in every variant.
		var inner [][]goField
		for _, fs := range perLeaf {
			var found *goField
			for i, o := range fs {
				if o.name == outer.name && o.wire == outer.wire && o.literal == "" && o.tagOpt == "" {
					found = &fs[i]
				}
			}
			od := (*model.Decl)(nil)
			if found != nil && found.f.Shape.Kind == model.KRef {
				od = gg.M.Decl(found.f.Shape.Ref)
			}
			if od == nil || gg.form(od) != "struct" {
				inner = nil
				break
			}
			inner = append(inner, gg.fields(od, od.Shape))
		}
		if inner == nil {
			continue
		}
		for _, gf := range inner[0] {
			if gf.literal != "" || !sharedField(gf, inner[1:]) {
				continue
			}
			name := gf.name
			if taken["Get"+name] || taken["Set"+name] {
				name = outer.name + gf.name
			}
			get, set := "Get"+name, "Set"+name
			if taken[get] || taken[set] {
				continue
			}
			taken[get], taken[set] = true, true
			path := outer.name + "." + gf.name
			out = append(out,
				accessor{name: get, field: path, sig: fmt.Sprintf("%s() %s", get, gf.typ),
					doc: fmt.Sprintf("%s returns member %q.", get, outer.wire+"."+gf.wire)},
				accessor{name: set, field: path, set: true, sig: fmt.Sprintf("%s(v %s)", set, gf.typ),
					doc: fmt.Sprintf("%s sets member %q.", set, outer.wire+"."+gf.wire)})
		}
	}
	return out
}

// sharedField reports whether every field list has a field like gf.
func sharedField(gf goField, others [][]goField) bool {
	for _, fs := range others {
		found := false
		for _, o := range fs {
			if o.literal == "" && o.name == gf.name && o.typ == gf.typ && o.wire == gf.wire {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// fastUnion writes, after union d, its constructors and routing decoder.
func (gg *goGen) fastUnion(d *model.Decl, id, disc string, values []string, leaves []*model.Shape, accessors []accessor) {
	covered := map[string]bool{} // Go field paths the accessors set
	for _, a := range accessors {
		if a.set {
			covered[a.field] = true
		}
	}
	for i, l := range leaves {
		gg.constructor(gg.M.Decl(l.Ref), values[i], covered)
	}
	gg.routing(d.Name, id, disc, values, leaves)
}

// constructor writes NewV for variant ld: its arguments are the required
// members the union's setters do not cover, found by descending into the
// struct members some of whose members they cover.
func (gg *goGen) constructor(ld *model.Decl, value string, covered map[string]bool) {
	vid := gg.Ident(ld.Name)
	var params []string
	used := map[string]bool{}
	var lit func(d *model.Decl, prefix string) string
	lit = func(d *model.Decl, prefix string) string {
		var parts []string
		for _, gf := range gg.fields(d, d.Shape) {
			path := prefix + gf.name
			if gf.literal != "" || gf.tagOpt != "" || covered[path] {
				continue
			}
			partly := false
			for c := range covered {
				partly = partly || strings.HasPrefix(c, path+".")
			}
			if sd := gg.M.Decl(gf.f.Shape.Ref); partly && gf.f.Shape.Kind == model.KRef && sd != nil && gg.form(sd) == "struct" && !strings.HasPrefix(gf.typ, "*") {
				parts = append(parts, fmt.Sprintf("%s: %s", gf.name, lit(sd, path+".")))
				continue
			}
			arg := lowerFirst(gf.name)
			if gotoken.IsKeyword(arg) || !gotoken.IsIdentifier(arg) || used[arg] {
				arg = fmt.Sprintf("a%d", len(params))
			}
			used[arg] = true
			params = append(params, arg+" "+gf.typ)
			parts = append(parts, fmt.Sprintf("%s: %s", gf.name, arg))
		}
		return gg.Ident(d.Name) + "{" + strings.Join(parts, ", ") + "}"
	}
	body := lit(ld, "")
	gg.q("")
	gg.q("// New%s returns the %q variant holding the required members that", vid, value)
	gg.q("// the union's setters do not set (cddlgen --go-fast).")
	gg.q("func New%s(%s) *%s {", vid, strings.Join(params, ", "), vid)
	gg.q("return &%s", body)
	gg.q("}")
	gg.flushQ()
}

// headTok is a member a routing decoder reads, in layout order.
type headTok struct {
	kind     int // tokLit, tokDisc, tokScalar, tokOpen
	wire     string
	lit      string    // tokLit: the value
	cat      appendCat // tokScalar
	optional bool
	goPath   string   // the Go field path from the variant
	wirePath string   // the same on the wire, members joined by dots
	field    string   // the routing struct's field
	typ      string   // its Go type
	next     []string // tokNext: the keys one of which must follow
	// follow, for a scalar, is the keys that may come after it: the
	// members after it in its map up to the first required one (none when
	// every member after it is optional).
	follow []string
}

const (
	tokLit = iota
	tokDisc
	tokScalar
	tokOpen
	tokNext
	tokSkip // a scalar read past, not kept
)

func (t headTok) same(o headTok) bool {
	return t.kind == o.kind && t.wire == o.wire && t.lit == o.lit && t.cat == o.cat && t.optional == o.optional && t.field == o.field &&
		strings.Join(t.next, "\x00") == strings.Join(o.next, "\x00")
}

// routingType is the Go type a routing field of category c has.
func routingType(c appendCat) string {
	switch c {
	case catUint:
		return "uint64"
	case catInt:
		return "int64"
	case catBool:
		return "bool"
	case catStrings:
		return "[]string"
	}
	return "string"
}

// head lists the members of variant ld that a routing decoder reads: its
// literal members, the discriminator and its scalar members, in order,
// descending into a required struct member, up to the first member of
// another kind. types keeps each routing field's type across variants: a
// variant whose member would give a field another type ends there.
func (gg *goGen) head(ld *model.Decl, disc string, types map[string]string) []headTok {
	var toks []headTok
	var walk func(d *model.Decl, goPrefix, fieldPrefix, wirePrefix string, top bool)
	walk = func(d *model.Decl, goPrefix, fieldPrefix, wirePrefix string, top bool) {
		fs := gg.fields(d, d.Shape)
		// stop ends the head before fs[i]: the member that comes next must
		// be one the schema places there (up to the first required one),
		// or else a routed optional member read as absent might follow.
		stop := func(i int) {
			var next []string
			for _, gf := range fs[i:] {
				next = append(next, gf.wire)
				if gf.literal != "" || !gf.f.Optional {
					toks = append(toks, headTok{kind: tokNext, next: next})
					return
				}
			}
		}
		for i, gf := range fs {
			if gf.literal != "" {
				if top && gf.f.Name == disc {
					toks = append(toks, headTok{kind: tokDisc, wire: gf.wire, field: model.GoName(disc), typ: "string"})
				} else {
					toks = append(toks, headTok{kind: tokLit, wire: gf.wire, lit: gf.literal})
				}
				continue
			}
			c := gg.category(gf.f.Shape)
			ptr := strings.HasPrefix(gf.typ, "*")
			optional := gf.tagOpt != ""
			field := fieldPrefix + gf.name
			switch c {
			case catText, catEnum, catUint, catInt, catBool, catStrings:
				if ptr && !optional {
					stop(i) // nullable: null is not a scalar
					return
				}
				typ := routingType(c)
				if t, ok := types[field]; ok && t != typ {
					stop(i)
					return
				}
				types[field] = typ
				var follow []string
				for _, after := range fs[i+1:] {
					follow = append(follow, after.wire)
					if after.literal != "" || !after.f.Optional {
						break
					}
				}
				if n := len(follow); n > 0 && fs[i+n].literal == "" && fs[i+n].f.Optional {
					follow = nil // every member after it is optional: whatever follows is allowed
				}
				toks = append(toks, headTok{kind: tokScalar, wire: gf.wire, cat: c, optional: optional, goPath: goPrefix + gf.name,
					wirePath: wirePrefix + gf.wire, field: field, typ: typ, follow: follow})
				continue
			case catAppender:
				sd := gg.M.Decl(gf.f.Shape.Ref)
				if ptr || optional || sd == nil || gg.form(sd) != "struct" {
					stop(i)
					return
				}
				toks = append(toks, headTok{kind: tokOpen, wire: gf.wire})
				walk(sd, goPrefix+gf.name+".", field, wirePrefix+gf.wire+".", false)
				return
			}
			stop(i)
			return
		}
	}
	walk(ld, "", "", "", true)
	return toks
}

// routing writes the routing decoder of fast union id.
func (gg *goGen) routing(rule, id, disc string, values []string, leaves []*model.Shape) {
	types := map[string]string{}
	heads := make([][]headTok, len(leaves))
	for i, l := range leaves {
		heads[i] = gg.head(gg.M.Decl(l.Ref), disc, types)
	}
	// The members every variant starts with, the discriminator among them.
	common := 0
	for ; common < len(heads[0]); common++ {
		t := heads[0][common]
		same := true
		for _, h := range heads[1:] {
			same = same && common < len(h) && h[common].same(t)
		}
		if !same {
			break
		}
	}
	hasDisc := false
	for _, t := range heads[0][:common] {
		hasDisc = hasDisc || t.kind == tokDisc
	}
	// Past the common members, a variant's head keeps the members
	// Options.GoRoutes names (reading past the scalars before them), then
	// checks that what follows the last is what the schema puts there.
	// Fewer fields keep the routing value small: zeroing and filling a
	// large one before reading the input made the decoder's speed depend
	// on where the stack happened to be (4K aliasing).
	routed := map[string]bool{}
	for _, r := range gg.Opt.GoRoutes[rule] {
		routed[r] = true
	}
	found := map[string]bool{}
	for i, h := range heads {
		part := h[common:]
		last := -1
		for j, t := range part {
			if t.kind == tokScalar && routed[t.wirePath] {
				last = j
				found[t.wirePath] = true
			}
		}
		kept := append([]headTok(nil), h[:common]...)
		if last >= 0 {
			for _, t := range part[:last+1] {
				if t.kind == tokScalar && !routed[t.wirePath] {
					t.kind = tokSkip
				}
				kept = append(kept, t)
			}
			if f := part[last].follow; len(f) > 0 {
				kept = append(kept, headTok{kind: tokNext, next: f})
			}
		}
		heads[i] = kept
	}
	for r := range routed {
		if !found[r] {
			gg.Warn(gg.M.Decl(rule), "--go-route: no variant of %s has %s among the scalar members its routing decoder reads; it is not routed", rule, r)
		}
	}
	// The routing struct's fields, the common ones first.
	type rfield struct{ name, typ, doc string }
	var fields []rfield
	seen := map[string]bool{}
	addField := func(t headTok) {
		if t.kind != tokScalar && t.kind != tokDisc || seen[t.field] {
			return
		}
		seen[t.field] = true
		doc := fmt.Sprintf("member %s", t.wirePath)
		if t.kind == tokDisc {
			doc = fmt.Sprintf("the discriminator, member %s", t.wire)
		}
		fields = append(fields, rfield{t.field, t.typ, doc})
		if t.optional {
			fields = append(fields, rfield{"Has" + t.field, "bool", "whether " + t.field + " was present"})
		}
	}
	for _, t := range heads[0][:common] {
		addField(t)
	}
	for _, h := range heads {
		for _, t := range h[common:] {
			addField(t)
		}
	}
	rid := id + "Routing"
	gg.q("")
	gg.q("// %s is what Decode%s reads of an encoded %s: the members", rid, rid, id)
	gg.q("// its variants start with, up to the first that is not a scalar or an")
	gg.q("// array of text (cddlgen --go-fast). A member a variant does not have is")
	gg.q("// left zero. Its strings may share the decoded bytes' memory.")
	gg.q("type %s struct {", rid)
	for _, f := range fields {
		gg.q("// %s is %s.", f.name, f.doc)
		gg.q("%s %s", f.name, f.typ)
	}
	gg.q("}")
	gg.q("")
	gg.q("// Decode%s sets r to the routing members of the %s in b.", rid, id)
	gg.q("// In the layout AppendJSON writes it allocates nothing but arrays, and")
	gg.q("// the strings it sets share b's memory: b must not be modified while")
	gg.q("// they are used. The fast path trusts that layout's member order: a")
	gg.q("// routed member written after the members the schema puts after it")
	gg.q("// is read as absent. Any other valid JSON is decoded in full with")
	gg.q("// UnmarshalJSON; an error is UnmarshalJSON's.")
	gg.q("func Decode%s(b []byte, r *%s) error {", rid, rid)
	gg.q("*r = %s{}", rid)
	if hasDisc {
		gg.q("if decode%sFast(b, r) {", rid)
		gg.q("return nil")
		gg.q("}")
		gg.q("*r = %s{}", rid)
	}
	gg.q("return decode%sSlow(b, r)", rid)
	gg.q("}")
	gg.q("")
	gg.q("// decode%sSlow decodes b in full and reads the routing members", rid)
	gg.q("// of the result.")
	gg.q("func decode%sSlow(b []byte, r *%s) error {", rid, rid)
	gg.q("var u %s", id)
	gg.q("if err := u.UnmarshalJSON(b); err != nil {")
	gg.q("return err")
	gg.q("}")
	gg.q("switch v := u.Value.(type) {")
	for i, l := range leaves {
		gg.q("case *%s:", gg.Ident(l.Ref))
		for _, t := range heads[i] {
			switch {
			case t.kind == tokDisc:
				gg.q("r.%s = %q", t.field, values[i])
			case t.kind != tokScalar:
			case t.optional && t.cat == catStrings:
				gg.q("if v.%s != nil {", t.goPath)
				gg.q("r.%s, r.Has%s = v.%s, true", t.field, t.field, t.goPath)
				gg.q("}")
			case t.optional:
				gg.q("if v.%s != nil {", t.goPath)
				gg.q("r.%s, r.Has%s = %s, true", t.field, t.field, routingConv(t, "*v."+t.goPath))
				gg.q("}")
			default:
				gg.q("r.%s = %s", t.field, routingConv(t, "v."+t.goPath))
			}
		}
	}
	gg.q("default:")
	gg.q("if m, ok, err := cddlrt.Probe(b, %q); err == nil && ok {", gg.Opt.FieldCase.Apply(disc))
	gg.q("r.%s = m", model.GoName(disc))
	gg.q("}")
	gg.q("}")
	gg.q("return nil")
	gg.q("}")
	if hasDisc {
		gg.q("")
		gg.q("// decode%sFast reads b in the layout AppendJSON writes; it", rid)
		gg.q("// reports false for anything else.")
		gg.q("func decode%sFast(b []byte, r *%s) bool {", rid, rid)
		gg.q("p := cddlrt.Scanner{B: b}")
		gg.q("if !p.Lit(\"{\") {")
		gg.q("return false")
		gg.q("}")
		gg.q("first, ok := true, false")
		gg.q("_ = first")
		sc := &scanWriter{gg: gg, state: stateFirst}
		for _, t := range heads[0][:common] {
			sc.tok(t)
		}
		sc.flush()
		gg.q("switch r.%s {", model.GoName(disc))
		for i, h := range heads {
			if len(h) == common {
				continue
			}
			gg.q("case %q:", values[i])
			branch := *sc
			for _, t := range h[common:] {
				branch.tok(t)
			}
			branch.flush()
		}
		gg.q("}")
		gg.q("return true")
		gg.q("}")
	}
	gg.flushQ()
}

// routingConv converts x, a member's Go value, to its routing field's type.
func routingConv(t headTok, x string) string {
	switch t.cat {
	case catEnum, catText:
		return "string(" + x + ")"
	case catUint:
		return "uint64(" + x + ")"
	case catInt:
		return "int64(" + x + ")"
	}
	return x
}

// The comma state of the object a fast routing decoder reads: before
// its first member, after a member, or either (only optional members read
// so far); the generated code tracks the last at run time in first.
const (
	stateFirst = iota
	stateAfter
	stateEither
)

// scanWriter writes the fast routing decoder's reading of tokens, with
// the literal text known at generation time merged into one Lit call.
type scanWriter struct {
	gg      *goGen
	state   int
	pending string // literal text to consume before the next dynamic read
}

func (w *scanWriter) lit(s string) { w.pending += s }

// flush writes the consumption of the pending literal text.
func (w *scanWriter) flush() {
	if w.pending == "" {
		return
	}
	w.gg.q("if !p.Lit(%s) {", strconv.Quote(w.pending))
	w.gg.q("return false")
	w.gg.q("}")
	w.pending = ""
}

// key is member name's key as written, with the comma the state calls for
// ("" when the state is known only at run time).
func (w *scanWriter) key(name string) (string, bool) {
	switch w.state {
	case stateFirst:
		return `"` + name + `":`, true
	case stateAfter:
		return `,"` + name + `":`, true
	}
	return "", false
}

// required consumes a required member's key.
func (w *scanWriter) required(name string) {
	if k, ok := w.key(name); ok {
		w.lit(k)
	} else {
		w.flush()
		w.gg.q("if !p.Member(%q, &first) {", name)
		w.gg.q("return false")
		w.gg.q("}")
	}
	w.state = stateAfter
}

// optional opens the block that reads an optional member if present.
func (w *scanWriter) optional(name string) {
	w.flush()
	if k, ok := w.key(name); ok {
		if w.state == stateFirst {
			// What follows reads first to know whether a comma is due.
			w.gg.q("first = true")
		}
		w.gg.q("if p.Lit(%s) {", strconv.Quote(k))
		if w.state == stateFirst {
			w.gg.q("first = false")
		}
	} else {
		w.gg.q("if p.Member(%q, &first) {", name)
	}
	if w.state == stateFirst {
		w.state = stateEither
	}
}

// tok writes the reading of t.
func (w *scanWriter) tok(t headTok) {
	gg := w.gg
	q := jsonQuote(t.wire)
	name := q[1 : len(q)-1] // keys are compared as they are written
	read := map[appendCat]string{catText: "Str", catEnum: "Str", catUint: "Uint", catInt: "Int", catBool: "Bool", catStrings: "Strs"}
	switch t.kind {
	case tokLit:
		lq := jsonQuote(t.lit)
		w.required(name)
		w.lit(lq)
	case tokDisc:
		w.required(name)
		w.flush()
		gg.q("if r.%s, ok = p.Str(); !ok {", t.field)
		gg.q("return false")
		gg.q("}")
	case tokOpen:
		w.required(name)
		w.lit("{")
		w.state = stateFirst
	case tokNext:
		w.flush()
		var conds []string
		for _, n := range t.next {
			nq := jsonQuote(n)
			if k, ok := w.key(nq[1 : len(nq)-1]); ok {
				conds = append(conds, fmt.Sprintf("!p.Has(%s)", strconv.Quote(k)))
			} else {
				conds = append(conds, fmt.Sprintf("!p.Peek(%q, first)", nq[1:len(nq)-1]))
			}
		}
		gg.q("if %s {", strings.Join(conds, " && "))
		gg.q("return false")
		gg.q("}")
	case tokSkip:
		if t.optional {
			w.optional(name)
			gg.q("if _, ok = p.%s(); !ok {", read[t.cat])
			gg.q("return false")
			gg.q("}")
			gg.q("}")
			return
		}
		w.required(name)
		w.flush()
		gg.q("if _, ok = p.%s(); !ok {", read[t.cat])
		gg.q("return false")
		gg.q("}")
	case tokScalar:
		if t.optional {
			w.optional(name)
			gg.q("if r.%s, ok = p.%s(); !ok {", t.field, read[t.cat])
			gg.q("return false")
			gg.q("}")
			gg.q("r.Has%s = true", t.field)
			gg.q("}")
			return
		}
		w.required(name)
		w.flush()
		gg.q("if r.%s, ok = p.%s(); !ok {", t.field, read[t.cat])
		gg.q("return false")
		gg.q("}")
	}
}

package model

import (
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/agentstream/agentstream/codegen/cddl"
)

// Lower turns a resolved schema into a [Model]: one declaration per rule
// without generic parameters (generic rules are expanded where they are
// used), with anonymous structs, unions of structs and enumerations inside
// other declarations hoisted into declarations of their own, so that every
// target can name them.
func Lower(res *cddl.Resolved) *Model {
	l := &lowerer{res: res, warned: map[string]bool{}}
	m := &Model{File: res.Schema.File, byName: map[string]*Decl{}}
	for _, name := range res.Order {
		d := res.Defs[name]
		l.rule, l.rulePos = name, d.Pos
		if len(d.Params) > 0 {
			l.warn(d.Pos, "generic rule %s is expanded at each use rather than generated on its own", name)
			continue
		}
		decl := &Decl{Name: name, Doc: d.Doc, Pos: d.Pos, Shape: l.lowerDef(d, nil)}
		m.Decls = append(m.Decls, decl)
		m.byName[name] = decl
	}
	m.hoist()
	m.Warnings = l.warnings
	return m
}

type lowerer struct {
	res      *cddl.Resolved
	rule     string
	rulePos  cddl.Pos
	warnings []Warning
	warned   map[string]bool
	depth    int
	splicing map[string]bool
	memo     map[*cddl.Type]*Shape
	// optGroups counts the optional groups met (Field.OptGroup).
	optGroups int
}

// maxExpand bounds generic expansion and splicing depth.
const maxExpand = 64

func (l *lowerer) warn(pos cddl.Pos, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	key := l.rule + "\x00" + msg
	if l.warned[key] {
		return
	}
	l.warned[key] = true
	l.warnings = append(l.warnings, Warning{Pos: pos, Rule: l.rule, Msg: msg})
}

type env map[string]*Shape

func (l *lowerer) lowerDef(d *cddl.Def, e env) *Shape {
	if !d.IsGroup {
		return l.lowerType(d.Type, e)
	}
	// A group rule whose every alternative is one plain entry is the type
	// choice of those entries (idiom 2 of the package doc).
	plain := true
	for _, gc := range d.Group.Choices {
		if len(gc.Entries) != 1 || gc.Entries[0].Key != nil || gc.Entries[0].Occur != nil {
			plain = false
		}
	}
	if plain {
		var alts []*Shape
		for _, gc := range d.Group.Choices {
			en := gc.Entries[0]
			if en.Group != nil {
				alts = append(alts, l.lowerMap(en.Group, e, en.Pos))
				continue
			}
			alts = append(alts, l.lowerType(en.Type, e))
		}
		return mkUnion(alts)
	}
	return l.lowerMap(d.Group, e, d.Pos)
}

func (l *lowerer) lowerType(t *cddl.Type, e env) *Shape {
	// Outside generic expansion a type lowers to one shared shape, so that a
	// map spliced into several others is hoisted once.
	if len(e) == 0 {
		if s, ok := l.memo[t]; ok {
			return s
		}
	}
	alts := make([]*Shape, 0, len(t.Choices))
	for _, c := range t.Choices {
		alts = append(alts, l.lowerType1(c, e))
	}
	s := mkUnion(alts)
	if len(e) == 0 {
		if l.memo == nil {
			l.memo = map[*cddl.Type]*Shape{}
		}
		l.memo[t] = s
	}
	return s
}

// mkUnion builds a union, flattening nested anonymous unions and removing
// exact duplicates; a single alternative is returned as is.
func mkUnion(alts []*Shape) *Shape {
	var flat []*Shape
	var add func(s *Shape)
	add = func(s *Shape) {
		if s.Kind == KUnion && s.Note == "" && s.Default == nil {
			for _, a := range s.Alts {
				add(a)
			}
			return
		}
		if s.Kind == KNever {
			return
		}
		for _, f := range flat {
			if sameShape(f, s) {
				return
			}
		}
		flat = append(flat, s)
	}
	for _, a := range alts {
		add(a)
	}
	for _, f := range flat {
		if f.Kind == KAny && f.Note == "" {
			return f
		}
	}
	switch len(flat) {
	case 0:
		return &Shape{Kind: KNever}
	case 1:
		return flat[0]
	}
	// true / false is bool.
	if len(flat) == 2 && flat[0].LitBool != nil && flat[1].LitBool != nil && *flat[0].LitBool != *flat[1].LitBool {
		return &Shape{Kind: KBool}
	}
	return &Shape{Kind: KUnion, Alts: flat}
}

// sameShape reports whether two shapes are trivially identical.
func sameShape(a, b *Shape) bool {
	if a.Kind != b.Kind {
		return false
	}
	switch a.Kind {
	case KRef:
		return a.Ref == b.Ref
	case KLiteral:
		if a.LitBool != nil || b.LitBool != nil {
			return a.LitBool != nil && b.LitBool != nil && *a.LitBool == *b.LitBool
		}
		return a.Lit.Kind == b.Lit.Kind && literalKey(a.Lit) == literalKey(b.Lit)
	case KAny, KNull, KUndefined, KBool, KNever:
		return true
	case KInt, KFloat, KText, KBytes:
		return a.Min == nil && b.Min == nil && a.Max == nil && b.Max == nil && a.Pattern == b.Pattern &&
			a.MinLen == nil && b.MinLen == nil && a.MaxLen == nil && b.MaxLen == nil && a.Format == b.Format && a.Default == nil && b.Default == nil
	}
	return false
}

func literalKey(v *cddl.Value) string {
	switch v.Kind {
	case cddl.ValueInt:
		return "i" + v.Int.String()
	case cddl.ValueFloat:
		return fmt.Sprintf("f%v", v.Float)
	case cddl.ValueText:
		return "t" + v.Text
	default:
		return "b" + string(v.Bytes)
	}
}

func prim(k Kind) *Shape { return &Shape{Kind: k, MinItems: -1, MaxItems: -1} }

// maxUint64 and minNint64 bound CBOR's major types 0 and 1, which are what
// uint, nint and int stand for.
func maxUint64() *cddl.Value {
	n := new(big.Int).SetUint64(^uint64(0))
	return &cddl.Value{Kind: cddl.ValueInt, Int: n, Raw: n.String()}
}

func minNint64() *cddl.Value {
	n := new(big.Int).Neg(new(big.Int).Lsh(big.NewInt(1), 64))
	return &cddl.Value{Kind: cddl.ValueInt, Int: n, Raw: n.String()}
}

func intValue(n int64) *cddl.Value {
	return &cddl.Value{Kind: cddl.ValueInt, Int: big.NewInt(n), Raw: fmt.Sprint(n)}
}

// preludeShapes maps prelude names to shapes directly, so that generators
// see `uint` rather than `#0` and `tdate` as a date-time string.
func preludeShape(name string) *Shape {
	switch name {
	case "any", "eb64url", "eb64legacy", "eb16", "cbor-any":
		return prim(KAny)
	case "uint":
		s := prim(KInt)
		s.Min, s.Max = intValue(0), maxUint64()
		return s
	case "nint":
		s := prim(KInt)
		s.Min, s.Max = minNint64(), intValue(-1)
		return s
	case "int":
		s := prim(KInt)
		s.Min, s.Max = minNint64(), maxUint64()
		return s
	case "integer", "bigint":
		return prim(KInt)
	case "biguint", "unsigned":
		s := prim(KInt)
		s.Min = intValue(0)
		return s
	case "bignint":
		s := prim(KInt)
		s.Max = intValue(-1)
		return s
	case "bstr", "bytes", "encoded-cbor":
		return prim(KBytes)
	case "tstr", "text", "mime-message":
		return prim(KText)
	case "tdate":
		s := prim(KText)
		s.Format = "date-time"
		return s
	case "uri":
		s := prim(KText)
		s.Format = "uri"
		return s
	case "b64url", "b64legacy":
		s := prim(KText)
		s.Format = "base64"
		return s
	case "regexp":
		s := prim(KText)
		s.Format = "regex"
		return s
	case "time", "number", "float16", "float32", "float64", "float16-32", "float32-64", "float":
		return prim(KFloat)
	case "false", "true":
		b := name == "true"
		return &Shape{Kind: KLiteral, LitBool: &b}
	case "bool":
		return prim(KBool)
	case "nil", "null":
		return prim(KNull)
	case "undefined":
		return prim(KUndefined)
	}
	return nil
}

func (l *lowerer) lowerType2(t *cddl.Type2, e env) *Shape {
	switch t.Kind {
	case cddl.T2Value:
		return &Shape{Kind: KLiteral, Lit: t.Value}
	case cddl.T2Name:
		return l.lowerName(t.Pos, t.Name, t.Args, e)
	case cddl.T2Paren:
		return l.lowerType(t.Inner, e)
	case cddl.T2Map:
		return l.lowerMap(t.Group, e, t.Pos)
	case cddl.T2Array:
		return l.lowerArray(t.Group, e, t.Pos)
	case cddl.T2Unwrap:
		return l.lowerUnwrap(t, e)
	case cddl.T2EnumGroup:
		return l.lowerEnum(t.Group, e)
	case cddl.T2EnumName:
		d := l.res.Defs[t.Name]
		if d == nil {
			return prim(KNever)
		}
		if !d.IsGroup {
			l.warn(t.Pos, "&%s names a type, not a group; read as the type", t.Name)
			return l.lowerName(t.Pos, t.Name, t.Args, e)
		}
		return l.withGeneric(d, t.Args, e, func(inner env) *Shape { return l.lowerEnum(d.Group, inner) })
	case cddl.T2Tag:
		inner := l.lowerType(t.Inner, e)
		tag := "a tag"
		if t.Tag != nil {
			tag = "tag " + t.Tag.String()
		}
		l.warn(t.Pos, "%s has no counterpart in this target; its content type is used", tag)
		return inner
	case cddl.T2Major:
		return l.lowerMajor(t, e)
	case cddl.T2Any:
		return prim(KAny)
	}
	return prim(KAny)
}

func (l *lowerer) lowerMajor(t *cddl.Type2, e env) *Shape {
	if t.MinorType != nil {
		if t.Major == 7 && len(t.MinorType.Choices) == 1 {
			if vals := l.intSet(&cddl.Type2{Kind: cddl.T2Paren, Inner: t.MinorType}, e, 32); vals != nil {
				alts := make([]*Shape, len(vals))
				for i, v := range vals {
					alts[i] = l.lowerMajor(&cddl.Type2{Pos: t.Pos, Kind: cddl.T2Major, Major: 7, Minor: big.NewInt(v)}, e)
				}
				return mkUnion(alts)
			}
		}
		l.warn(t.Pos, "a computed additional information #%d.<...> is read as major type %d", t.Major, t.Major)
	}
	switch t.Major {
	case 0:
		s := prim(KInt)
		s.Min, s.Max = intValue(0), maxUint64()
		return s
	case 1:
		s := prim(KInt)
		s.Min, s.Max = minNint64(), intValue(-1)
		return s
	case 2:
		return prim(KBytes)
	case 3:
		return prim(KText)
	case 4:
		a := prim(KArray)
		a.Elem = prim(KAny)
		return a
	case 5:
		mp := prim(KMap)
		mp.Key, mp.Elem = prim(KAny), prim(KAny)
		return mp
	case 7:
		if t.Minor != nil && t.MinorType == nil {
			switch t.Minor.Int64() {
			case 20, 21:
				b := t.Minor.Int64() == 21
				return &Shape{Kind: KLiteral, LitBool: &b}
			case 22:
				return prim(KNull)
			case 23:
				return prim(KUndefined)
			case 25, 26, 27:
				return prim(KFloat)
			}
		}
	}
	return prim(KAny)
}

// lowerName lowers a reference to a rule or a generic parameter.
func (l *lowerer) lowerName(pos cddl.Pos, name string, args []*cddl.Type1, e env) *Shape {
	if s, ok := e[name]; ok {
		return s
	}
	d := l.res.Defs[name]
	if d == nil {
		return prim(KNever) // an unplugged socket
	}
	if d.Prelude {
		if s := preludeShape(name); s != nil {
			return s
		}
	}
	if len(d.Params) > 0 || d.Prelude {
		return l.withGeneric(d, args, e, func(inner env) *Shape { return l.lowerDef(d, inner) })
	}
	return &Shape{Kind: KRef, Ref: name}
}

// withGeneric binds d's generic parameters to args (lowered in e) and calls f.
func (l *lowerer) withGeneric(d *cddl.Def, args []*cddl.Type1, e env, f func(env) *Shape) *Shape {
	if l.depth > maxExpand {
		l.warn(d.Pos, "expansion of %s is nested deeper than %d levels; any is used", d.Name, maxExpand)
		return prim(KAny)
	}
	inner := env{}
	for i, p := range d.Params {
		if i < len(args) {
			inner[p] = l.lowerType1(args[i], e)
		} else {
			inner[p] = prim(KAny)
		}
	}
	l.depth++
	defer func() { l.depth-- }()
	return f(inner)
}

// lowerUnwrap lowers `~name` used as a type: the content of a tag, or the
// map or array the rule defines.
func (l *lowerer) lowerUnwrap(t *cddl.Type2, e env) *Shape {
	d := l.res.Defs[t.Name]
	if d == nil || d.IsGroup {
		return prim(KAny)
	}
	if len(d.Type.Choices) == 1 && d.Type.Choices[0].Op == "" {
		t2 := d.Type.Choices[0].Left
		if t2.Kind == cddl.T2Tag {
			return l.withGeneric(d, t.Args, e, func(inner env) *Shape { return l.lowerType(t2.Inner, inner) })
		}
	}
	return l.lowerName(t.Pos, t.Name, t.Args, e)
}

// lowerEnum lowers `&(group)`: the choice of the values of its members.
func (l *lowerer) lowerEnum(g *cddl.Group, e env) *Shape {
	var alts []*Shape
	for _, gc := range g.Choices {
		for _, en := range gc.Entries {
			if en.Group != nil {
				alts = append(alts, l.lowerEnum(en.Group, e))
				continue
			}
			if en.Key == nil && len(en.Type.Choices) == 1 && en.Type.Choices[0].Left.Kind == cddl.T2Name {
				if d := l.res.Defs[en.Type.Choices[0].Left.Name]; d != nil && d.IsGroup && len(d.Params) == 0 {
					alts = append(alts, l.lowerEnum(d.Group, e))
					continue
				}
			}
			alts = append(alts, l.lowerType(en.Type, e))
		}
	}
	return mkUnion(alts)
}

func (l *lowerer) literalOf(t *cddl.Type2, e env) *cddl.Value {
	switch t.Kind {
	case cddl.T2Value:
		return t.Value
	case cddl.T2Name:
		if s, ok := e[t.Name]; ok && s.Kind == KLiteral {
			return s.Lit
		}
		d := l.res.Defs[t.Name]
		if d != nil && !d.IsGroup && len(d.Type.Choices) == 1 && d.Type.Choices[0].Op == "" && l.depth < maxExpand {
			l.depth++
			defer func() { l.depth-- }()
			return l.literalOf(d.Type.Choices[0].Left, e)
		}
	case cddl.T2Paren:
		if len(t.Inner.Choices) == 1 && t.Inner.Choices[0].Op == "" {
			return l.literalOf(t.Inner.Choices[0].Left, e)
		}
	}
	return nil
}

// preludeValue returns the value of the prelude's true, false, null and
// nil, also through a rule that names one (`off = false`), or nil.
func (l *lowerer) preludeValue(t *cddl.Type2) *cddl.Value {
	for i := 0; t != nil && i < maxExpand; i++ {
		if t.Kind == cddl.T2Paren && len(t.Inner.Choices) == 1 && t.Inner.Choices[0].Op == "" {
			t = t.Inner.Choices[0].Left
			continue
		}
		if t.Kind != cddl.T2Name {
			return nil
		}
		d := l.res.Defs[t.Name]
		if d == nil || d.IsGroup {
			return nil
		}
		if d.Prelude {
			switch t.Name {
			case "true", "false":
				return &cddl.Value{Pos: t.Pos, Kind: cddl.ValueBool, Bool: t.Name == "true", Raw: t.Name}
			case "null", "nil":
				return &cddl.Value{Pos: t.Pos, Kind: cddl.ValueNull, Raw: t.Name}
			}
			return nil
		}
		if len(d.Type.Choices) != 1 || d.Type.Choices[0].Op != "" {
			return nil
		}
		t = d.Type.Choices[0].Left
	}
	return nil
}

func (l *lowerer) lowerType1(t *cddl.Type1, e env) *Shape {
	if t.Op == "" {
		return l.lowerType2(t.Left, e)
	}
	if t.Op == ".." || t.Op == "..." {
		return l.lowerRange(t, e)
	}
	base := l.lowerType2(t.Left, e)
	right := l.literalOf(t.Right, e)
	cp := *base
	out := &cp
	switch t.Op {
	case ".size":
		lo, hi := int64(-1), int64(-1)
		if right != nil && right.Kind == cddl.ValueInt && right.Int.IsInt64() {
			lo, hi = -1, right.Int.Int64()
		} else if r := l.rangeBounds(t.Right, e); r != nil {
			lo, hi = r[0], r[1]
		} else {
			l.warn(t.Pos, ".size with a non-literal size is not checked")
			return out
		}
		switch l.resolveKind(out) {
		case KText, KBytes:
			if right != nil {
				lo = hi // `.size n` is exactly n bytes
			}
			if lo > 0 {
				out.MinLen = &lo
			}
			if hi >= 0 {
				out.MaxLen = &hi
			}
		case KInt:
			if hi >= 0 && hi < 8 {
				out.Min = intValue(0)
				max := new(big.Int).Lsh(big.NewInt(1), uint(8*hi))
				out.Max = &cddl.Value{Kind: cddl.ValueInt, Int: max.Sub(max, big.NewInt(1))}
				out.Max.Raw = out.Max.Int.String()
			} else {
				out.Min = intValue(0)
			}
		default:
			l.warn(t.Pos, ".size on this type is not checked")
		}
	case ".regexp", ".pcre":
		if right == nil || right.Kind != cddl.ValueText {
			l.warn(t.Pos, "%s without a literal pattern is not checked", t.Op)
			return out
		}
		if t.Op == ".pcre" {
			l.warn(t.Pos, ".pcre pattern is used as an ECMAScript pattern")
		}
		out.Pattern = right.Text
	case ".lt", ".le", ".gt", ".ge":
		if right == nil || (right.Kind != cddl.ValueInt && right.Kind != cddl.ValueFloat) {
			l.warn(t.Pos, "%s without a literal number is not checked", t.Op)
			return out
		}
		switch t.Op {
		case ".lt":
			out.Max, out.MaxExclusive = right, true
		case ".le":
			out.Max = right
		case ".gt":
			out.Min, out.MinExclusive = right, true
		case ".ge":
			out.Min = right
		}
	case ".eq":
		if right != nil {
			return &Shape{Kind: KLiteral, Lit: right}
		}
		l.warn(t.Pos, ".eq without a literal is not checked")
	case ".default":
		if right == nil {
			right = l.preludeValue(t.Right)
		}
		out.Default = right
		if right == nil {
			l.warn(t.Pos, ".default without a literal value is ignored")
		}
	case ".bits":
		if l.resolveKind(out) == KInt {
			if vals := l.bitValues(t.Right, e); vals != nil {
				alts := make([]*Shape, len(vals))
				for i, v := range vals {
					alts[i] = &Shape{Kind: KLiteral, Lit: intValue(v)}
				}
				return mkUnion(alts)
			}
		}
		l.warn(t.Pos, ".bits is not checked; its left-hand type is used")
	case ".feature":
		// An annotation: the type is the left-hand side.
	case ".cat", ".det":
		lv := l.literalOf(t.Left, e)
		if lv != nil && right != nil && (lv.Kind == cddl.ValueText || lv.Kind == cddl.ValueBytes) && (right.Kind == cddl.ValueText || right.Kind == cddl.ValueBytes) {
			a, b := literalString(lv), literalString(right)
			if t.Op == ".det" {
				a, b = dedent(a), dedent(b)
			}
			v := &cddl.Value{Kind: lv.Kind, Text: a + b, Bytes: []byte(a + b)}
			v.Raw = fmt.Sprintf("%q", v.Text)
			return &Shape{Kind: KLiteral, Lit: v}
		}
		l.warn(t.Pos, "%s of non-literal operands is read as its left-hand type", t.Op)
	case ".plus":
		lv := l.literalOf(t.Left, e)
		if lv != nil && right != nil && lv.Kind == cddl.ValueInt && right.Kind == cddl.ValueInt {
			sum := new(big.Int).Add(lv.Int, right.Int)
			return &Shape{Kind: KLiteral, Lit: &cddl.Value{Kind: cddl.ValueInt, Int: sum, Raw: sum.String()}}
		}
		l.warn(t.Pos, ".plus of non-literal operands is read as its left-hand type")
	default:
		l.warn(t.Pos, "control operator %s is not checked; its left-hand type is used", t.Op)
	}
	return out
}

// intSet returns the integers a small literal type stands for (a literal,
// a range or a choice of them), or nil when it is not such a type or has
// more than limit members.
func (l *lowerer) intSet(t *cddl.Type2, e env, limit int) []int64 {
	var out []int64
	var add func(t *cddl.Type2) bool
	add = func(t *cddl.Type2) bool {
		if v := l.literalOf(t, e); v != nil {
			if v.Kind != cddl.ValueInt || !v.Int.IsInt64() {
				return false
			}
			out = append(out, v.Int.Int64())
			return len(out) <= limit
		}
		var ty *cddl.Type
		switch t.Kind {
		case cddl.T2EnumGroup:
			for _, gc := range t.Group.Choices {
				for _, en := range gc.Entries {
					if en.Type == nil || len(en.Type.Choices) != 1 || en.Type.Choices[0].Op != "" || !add(en.Type.Choices[0].Left) {
						return false
					}
				}
			}
			return true
		case cddl.T2Paren:
			ty = t.Inner
		case cddl.T2Name:
			d := l.res.Defs[t.Name]
			if d == nil || d.IsGroup || l.depth > maxExpand {
				return false
			}
			ty = d.Type
		default:
			return false
		}
		for _, c := range ty.Choices {
			switch c.Op {
			case "":
				if !add(c.Left) {
					return false
				}
			case "..", "...":
				lo, hi := l.literalOf(c.Left, e), l.literalOf(c.Right, e)
				if lo == nil || hi == nil || lo.Kind != cddl.ValueInt || hi.Kind != cddl.ValueInt || !lo.Int.IsInt64() || !hi.Int.IsInt64() {
					return false
				}
				end := hi.Int.Int64()
				if c.Op == "..." {
					end--
				}
				for v := lo.Int.Int64(); v <= end; v++ {
					out = append(out, v)
					if len(out) > limit {
						return false
					}
				}
			default:
				return false
			}
		}
		return true
	}
	if !add(t) {
		return nil
	}
	return out
}

// bitValues returns every unsigned integer whose set bits are all among the
// bit numbers right stands for (`uint .bits flags`), when there are at most
// ten such bits.
func (l *lowerer) bitValues(right *cddl.Type2, e env) []int64 {
	bits := l.intSet(right, e, 10)
	if bits == nil {
		return nil
	}
	for _, b := range bits {
		if b < 0 || b > 62 {
			return nil
		}
	}
	vals := []int64{0}
	seen := map[int64]bool{}
	for _, b := range bits {
		if seen[b] {
			continue
		}
		seen[b] = true
		for _, v := range vals {
			vals = append(vals, v|1<<b)
		}
	}
	slices.Sort(vals)
	return vals
}

func literalString(v *cddl.Value) string {
	if v.Kind == cddl.ValueBytes {
		return string(v.Bytes)
	}
	return v.Text
}

// dedent removes the common leading white space of the lines of s (.det).
func dedent(s string) string {
	lines := strings.Split(s, "\n")
	common := -1
	for _, ln := range lines {
		if strings.TrimSpace(ln) == "" {
			continue
		}
		n := len(ln) - len(strings.TrimLeft(ln, " \t"))
		if common < 0 || n < common {
			common = n
		}
	}
	for i, ln := range lines {
		if len(ln) >= common && common > 0 {
			lines[i] = ln[common:]
		}
	}
	return strings.Join(lines, "\n")
}

// resolveKind is the kind of s after following references.
func (l *lowerer) resolveKind(s *Shape) Kind {
	for i := 0; s.Kind == KRef && i < 50; i++ {
		d := l.res.Defs[s.Ref]
		if d == nil || d.IsGroup || len(d.Type.Choices) != 1 {
			return KRef
		}
		s = l.lowerType1(d.Type.Choices[0], nil)
	}
	return s.Kind
}

// rangeBounds reads a literal integer range `a..b` or `a...b`.
func (l *lowerer) rangeBounds(t *cddl.Type2, e env) []int64 {
	if t.Kind != cddl.T2Paren || len(t.Inner.Choices) != 1 {
		if t.Kind == cddl.T2Name {
			d := l.res.Defs[t.Name]
			if d != nil && !d.IsGroup && len(d.Type.Choices) == 1 {
				return l.rangeBounds(&cddl.Type2{Kind: cddl.T2Paren, Inner: d.Type}, e)
			}
		}
		return nil
	}
	c := t.Inner.Choices[0]
	if c.Op != ".." && c.Op != "..." {
		return nil
	}
	lo, hi := l.literalOf(c.Left, e), l.literalOf(c.Right, e)
	if lo == nil || hi == nil || lo.Kind != cddl.ValueInt || hi.Kind != cddl.ValueInt || !lo.Int.IsInt64() || !hi.Int.IsInt64() {
		return nil
	}
	h := hi.Int.Int64()
	if c.Op == "..." {
		h--
	}
	return []int64{lo.Int.Int64(), h}
}

func (l *lowerer) lowerRange(t *cddl.Type1, e env) *Shape {
	lo, hi := l.literalOf(t.Left, e), l.literalOf(t.Right, e)
	if lo == nil || hi == nil || (lo.Kind != cddl.ValueInt && lo.Kind != cddl.ValueFloat) || (hi.Kind != cddl.ValueInt && hi.Kind != cddl.ValueFloat) {
		l.warn(t.Pos, "a range whose bounds are not literal numbers matches nothing")
		return prim(KNever)
	}
	if lo.Kind != hi.Kind {
		l.warn(t.Pos, "a range from an integer to a float (or back) matches nothing")
		return prim(KNever)
	}
	k := KInt
	if lo.Kind == cddl.ValueFloat {
		k = KFloat
	}
	s := prim(k)
	s.Min, s.Max, s.MaxExclusive = lo, hi, t.Op == "..."
	return s
}

// memberAlt is one alternative of a flattened map group.
type memberAlt struct {
	fields  []*Field
	rest    *Shape
	restKey *Shape
}

// maxAlternatives bounds the alternatives a map's group choices multiply into.
const maxAlternatives = 512

func (l *lowerer) lowerMap(g *cddl.Group, e env, pos cddl.Pos) *Shape {
	if l.splicing == nil {
		l.splicing = map[string]bool{}
	}
	alts := l.flattenMap(g, e, false)
	structs := make([]*Shape, 0, len(alts))
	for _, a := range alts {
		s := prim(KStruct)
		s.Fields, s.Rest, s.RestKey = a.fields, a.rest, a.restKey
		if len(s.Fields) == 0 && s.Rest != nil && s.RestKey != nil && !isTextKey(s.RestKey) {
			mp := prim(KMap)
			mp.Key, mp.Elem = s.RestKey, s.Rest
			structs = append(structs, mp)
			continue
		}
		if len(s.Fields) == 0 && s.Rest != nil {
			// Only computed keys: a plain map (`{ * text => any }`).
			mp := prim(KMap)
			mp.Key, mp.Elem = s.RestKey, s.Rest
			structs = append(structs, mp)
			continue
		}
		structs = append(structs, s)
	}
	if len(structs) == 1 {
		return structs[0]
	}
	u := &Shape{Kind: KUnion, Alts: structs}
	return u
}

func isTextKey(s *Shape) bool { return s == nil || s.Kind == KText || s.Kind == KAny }

// flattenMap turns a map's group into alternatives of member lists,
// splicing named groups and maps (idiom 1 of the package doc).
func (l *lowerer) flattenMap(g *cddl.Group, e env, optional bool) []memberAlt {
	var out []memberAlt
	for _, gc := range g.Choices {
		alts := []memberAlt{{}}
		for _, en := range gc.Entries {
			entryAlts := l.entryMembers(en, e, optional)
			if len(alts)*len(entryAlts) > maxAlternatives {
				l.warn(en.Pos, "group choices multiply into more than %d alternatives; the rest are left out", maxAlternatives)
				entryAlts = entryAlts[:1]
			}
			var next []memberAlt
			for _, a := range alts {
				for _, b := range entryAlts {
					next = append(next, mergeAlt(a, b))
				}
			}
			alts = next
		}
		out = append(out, alts...)
	}
	return out
}

func mergeAlt(a, b memberAlt) memberAlt {
	out := memberAlt{rest: a.rest, restKey: a.restKey}
	out.fields = append(out.fields, a.fields...)
	for _, f := range b.fields {
		dup := false
		for _, g := range out.fields {
			if g.Name == f.Name && g.IntKey == f.IntKey && g.Quoted == f.Quoted {
				dup = true
				break
			}
		}
		if !dup {
			out.fields = append(out.fields, f)
		}
	}
	if b.rest != nil {
		if out.rest == nil {
			out.rest, out.restKey = b.rest, b.restKey
		} else {
			out.rest = mkUnion([]*Shape{out.rest, b.rest})
		}
	}
	return out
}

// spliceTarget returns the group a keyless map entry splices in, with the
// environment to read it in, or nil when the entry is not a splice.
func (l *lowerer) spliceTarget(en *cddl.GroupEntry, e env) (*cddl.Group, env, string) {
	if en.Group != nil {
		return en.Group, e, ""
	}
	if len(en.Type.Choices) != 1 || en.Type.Choices[0].Op != "" {
		return nil, nil, ""
	}
	t2 := en.Type.Choices[0].Left
	if t2.Kind != cddl.T2Name && t2.Kind != cddl.T2Unwrap {
		if t2.Kind == cddl.T2Map {
			return t2.Group, e, ""
		}
		return nil, nil, ""
	}
	d := l.res.Defs[t2.Name]
	if d == nil {
		return nil, nil, ""
	}
	inner := env{}
	for i, p := range d.Params {
		if i < len(t2.Args) {
			inner[p] = l.lowerType1(t2.Args[i], e)
		}
	}
	if d.IsGroup {
		return d.Group, inner, d.Name
	}
	if len(d.Type.Choices) == 1 && d.Type.Choices[0].Op == "" {
		switch left := d.Type.Choices[0].Left; left.Kind {
		case cddl.T2Map:
			return left.Group, inner, d.Name
		case cddl.T2Name:
			// An alias (`RunCommand = RunStart`): splice what it names.
			if l.depth > maxExpand {
				return nil, nil, ""
			}
			l.depth++
			defer func() { l.depth-- }()
			return l.spliceTarget(&cddl.GroupEntry{Pos: en.Pos, Type: d.Type}, inner)
		}
	}
	// A type choice of maps spliced in: each map is an alternative.
	var g cddl.Group
	for _, c := range d.Type.Choices {
		if c.Op != "" || (c.Left.Kind != cddl.T2Map && c.Left.Kind != cddl.T2Name) {
			return nil, nil, ""
		}
		g.Choices = append(g.Choices, &cddl.GroupChoice{Entries: []*cddl.GroupEntry{{Pos: c.Pos, Type: &cddl.Type{Pos: c.Pos, Choices: []*cddl.Type1{c}}}}})
	}
	if t2.Kind == cddl.T2Unwrap || len(g.Choices) > 1 {
		return &g, inner, d.Name
	}
	return nil, nil, ""
}

func (l *lowerer) entryMembers(en *cddl.GroupEntry, e env, optional bool) []memberAlt {
	opt := optional || en.Occur.Optional()
	if en.Key == nil {
		g, inner, name := l.spliceTarget(en, e)
		if g == nil {
			l.warn(en.Pos, "a map entry without a key is left out: only members, maps and groups can be spliced into a map")
			return []memberAlt{{}}
		}
		if name != "" {
			if l.splicing[name] || l.depth > maxExpand {
				l.warn(en.Pos, "%s splices itself into a map; the recursive part is left out", name)
				return []memberAlt{{}}
			}
			l.splicing[name] = true
			defer delete(l.splicing, name)
		}
		l.depth++
		defer func() { l.depth-- }()
		if en.Occur != nil && en.Occur.Min == 0 && en.Occur.Max == 1 && len(g.Choices) == 1 && len(g.Choices[0].Entries) > 1 {
			// An optional group: the members it requires go together.
			alts := l.flattenMap(g, inner, optional)
			l.optGroups++
			for _, a := range alts {
				for _, f := range a.fields {
					if !f.Optional && f.OptGroup == 0 {
						f.Optional, f.OptGroup = true, l.optGroups
					}
				}
			}
			return alts
		}
		return l.flattenMap(g, inner, opt)
	}
	val := l.lowerType(en.Type, e)
	f := &Field{Doc: en.Doc, Shape: val, Optional: opt, Pos: en.Pos, NoCut: !en.Key.Cut}
	switch en.Key.Kind {
	case cddl.KeyBareword:
		f.Name = en.Key.Name
	case cddl.KeyValue:
		f.Name, f.IntKey = valueKeyName(en.Key.Value)
		f.Quoted = !f.IntKey
	case cddl.KeyType:
		if en.Key.Type.Op == "" {
			if lit := l.literalOf(en.Key.Type.Left, e); lit != nil && en.Key.Type.Left.Kind == cddl.T2Value {
				f.Name, f.IntKey = valueKeyName(lit)
				f.Quoted = !f.IntKey
				break
			}
		}
		key := l.lowerType1(en.Key.Type, e)
		if en.Occur == nil || en.Occur.Max == 1 {
			l.warn(en.Pos, "a computed key that must occur is read as optional extra members")
		}
		return []memberAlt{{rest: val, restKey: key}}
	}
	if en.Occur != nil && en.Occur.Max != 1 && en.Occur.Max != 0 {
		f.Optional = en.Occur.Min == 0 || optional
	}
	return []memberAlt{{fields: []*Field{f}}}
}

func valueKeyName(v *cddl.Value) (string, bool) {
	switch v.Kind {
	case cddl.ValueText:
		return v.Text, false
	case cddl.ValueInt:
		return v.Int.String(), true
	}
	return v.Raw, false
}

// arrItem is one entry of a flattened array group.
type arrItem struct {
	name, doc string
	shape     *Shape
	min, max  int64
}

func (l *lowerer) lowerArray(g *cddl.Group, e env, pos cddl.Pos) *Shape {
	var alts []*Shape
	for _, gc := range g.Choices {
		items := l.flattenArray(gc, e, 1)
		alts = append(alts, l.arrayShape(items, pos))
	}
	return mkUnion(alts)
}

func (l *lowerer) flattenArray(gc *cddl.GroupChoice, e env, mult int64) []arrItem {
	var out []arrItem
	for _, en := range gc.Entries {
		min, max := int64(1), int64(1)
		if en.Occur != nil {
			min, max = en.Occur.Min, en.Occur.Max
		}
		if en.Key == nil && min == 1 && max == 1 && l.depth < maxExpand {
			// `~name` of an array rule inside an array: its entries, in
			// place (RFC 8610 section 3.7).
			if g, inner := l.unwrappedArray(en, e); g != nil && len(g.Choices) == 1 {
				l.depth++
				out = append(out, l.flattenArray(g.Choices[0], inner, mult)...)
				l.depth--
				continue
			}
		}
		if en.Key == nil {
			if g, inner, name := l.spliceTarget(en, e); g != nil && (en.Group != nil || l.isGroupName(name)) {
				if len(g.Choices) == 1 && min == 1 && max == 1 && l.depth < maxExpand {
					l.depth++
					out = append(out, l.flattenArray(g.Choices[0], inner, mult)...)
					l.depth--
					continue
				}
				if len(g.Choices) == 1 && len(g.Choices[0].Entries) == 1 && l.depth < maxExpand {
					l.depth++
					sub := l.flattenArray(g.Choices[0], inner, mult)
					l.depth--
					if len(sub) == 1 {
						out = append(out, arrItem{name: sub[0].name, doc: en.Doc, shape: sub[0].shape, min: min * sub[0].min, max: mulMax(max, sub[0].max)})
						continue
					}
				}
				// A repeated or alternative group inside an array: its
				// entries are accepted in any order.
				var shapes []*Shape
				for _, c := range g.Choices {
					for _, it := range l.flattenArray(c, inner, mult) {
						shapes = append(shapes, it.shape)
					}
				}
				l.warn(en.Pos, "a repeated or alternative group inside an array is read as a list of its entries' types")
				out = append(out, arrItem{doc: en.Doc, shape: mkUnion(shapes), min: 0, max: -1})
				continue
			}
		}
		it := arrItem{doc: en.Doc, shape: l.lowerType(en.Type, e), min: min, max: max}
		if en.Key != nil && en.Key.Kind == cddl.KeyBareword {
			it.name = en.Key.Name
		} else if en.Key != nil && en.Key.Kind == cddl.KeyValue && en.Key.Value.Kind == cddl.ValueText {
			it.name = en.Key.Value.Text
		}
		out = append(out, it)
	}
	return out
}

// unwrappedArray returns the group of the array rule that entry en
// unwraps (`~basic-header`), with the rule's generic arguments bound, or
// nil when en is anything else.
func (l *lowerer) unwrappedArray(en *cddl.GroupEntry, e env) (*cddl.Group, env) {
	if en.Type == nil || len(en.Type.Choices) != 1 || en.Type.Choices[0].Op != "" {
		return nil, nil
	}
	t2 := en.Type.Choices[0].Left
	if t2.Kind != cddl.T2Unwrap {
		return nil, nil
	}
	d := l.res.Defs[t2.Name]
	if d == nil || d.IsGroup || len(d.Type.Choices) != 1 || d.Type.Choices[0].Op != "" || d.Type.Choices[0].Left.Kind != cddl.T2Array {
		return nil, nil
	}
	inner := env{}
	for i, p := range d.Params {
		if i < len(t2.Args) {
			inner[p] = l.lowerType1(t2.Args[i], e)
		}
	}
	return d.Type.Choices[0].Left.Group, inner
}

func mulMax(a, b int64) int64 {
	if a < 0 || b < 0 {
		return -1
	}
	return a * b
}

func (l *lowerer) isGroupName(name string) bool {
	d := l.res.Defs[name]
	return d != nil && d.IsGroup
}

func (l *lowerer) arrayShape(items []arrItem, pos cddl.Pos) *Shape {
	if len(items) == 1 && items[0].max != 1 {
		a := prim(KArray)
		a.Elem, a.MinItems, a.MaxItems = items[0].shape, items[0].min, items[0].max
		return a
	}
	t := prim(KTuple)
	for i, it := range items {
		switch {
		case it.min == 1 && it.max == 1, it.min == 0 && it.max == 1:
			if it.min == 0 {
				// Optional positions must come last to be expressible.
				for _, later := range items[i+1:] {
					if later.min > 0 {
						l.warn(pos, "an optional array entry before a required one is read as a list of its entries' types")
						return listOf(items)
					}
				}
			}
			t.Items = append(t.Items, &Item{Name: it.name, Doc: it.doc, Shape: it.shape, Optional: it.min == 0})
		case i == len(items)-1:
			t.Rest, t.MinItems, t.MaxItems = it.shape, it.min, it.max
		default:
			if it.min == it.max && it.min > 1 && it.min <= 16 {
				for k := int64(0); k < it.min; k++ {
					t.Items = append(t.Items, &Item{Name: it.name, Doc: it.doc, Shape: it.shape})
				}
				continue
			}
			l.warn(pos, "a repeated entry before the end of an array is read as a list of its entries' types")
			return listOf(items)
		}
	}
	if len(t.Items) == 0 && t.Rest == nil {
		a := prim(KArray)
		a.Elem, a.MaxItems = prim(KNever), 0
		return a
	}
	return t
}

func listOf(items []arrItem) *Shape {
	shapes := make([]*Shape, len(items))
	for i, it := range items {
		shapes[i] = it.shape
	}
	a := prim(KArray)
	a.Elem = mkUnion(shapes)
	return a
}

// hoist gives every anonymous struct, union of structs and enumeration found
// inside a declaration a declaration of its own, named after its parent and
// its place, so that all targets can refer to it by name.
func (m *Model) hoist() {
	taken := map[string]bool{}
	for _, d := range m.Decls {
		taken[PascalName(d.Name)] = true
	}
	var out []*Decl
	hoisted := map[*Shape]*Shape{}
	var visit func(parent string, s *Shape, hint string, root bool) *Shape
	newDecl := func(parent, hint string, s *Shape) *Shape {
		if ref, ok := hoisted[s]; ok {
			return ref
		}
		name := PascalName(parent) + PascalName(hint)
		base := name
		for i := 2; taken[name]; i++ {
			name = fmt.Sprintf("%s%d", base, i)
		}
		taken[name] = true
		d := &Decl{Name: name, Shape: s, Synthetic: true, Parent: parent}
		m.byName[name] = d
		out = append(out, d)
		ref := &Shape{Kind: KRef, Ref: name}
		hoisted[s] = ref
		visit(name, s, "", true)
		return ref
	}
	visit = func(parent string, s *Shape, hint string, root bool) *Shape {
		if s == nil {
			return nil
		}
		if !root && (s.Kind == KStruct || s.Kind == KTuple || s.IsTextEnum() || (s.Kind == KUnion && hasStruct(s))) {
			return newDecl(parent, hint, s)
		}
		switch s.Kind {
		case KStruct:
			for _, f := range s.Fields {
				f.Shape = visit(parent, f.Shape, f.Name, false)
			}
			s.Rest = visit(parent, s.Rest, "Value", false)
		case KMap:
			s.Elem = visit(parent, s.Elem, "Value", false)
		case KArray:
			s.Elem = visit(parent, s.Elem, hint+"Item", false)
		case KTuple:
			for i, it := range s.Items {
				h := it.Name
				if h == "" {
					h = fmt.Sprintf("%s%d", hint+"Item", i)
				}
				it.Shape = visit(parent, it.Shape, h, false)
			}
			s.Rest = visit(parent, s.Rest, hint+"Rest", false)
		case KUnion:
			names := m.variantNames(s)
			for i, a := range s.Alts {
				s.Alts[i] = visit(parent, a, hint+names[i], false)
			}
		}
		return s
	}
	for _, d := range m.Decls {
		visit(d.Name, d.Shape, "", true)
	}
	// Each hoisted declaration follows the one it came from.
	children := map[string][]*Decl{}
	for _, d := range out {
		children[d.Parent] = append(children[d.Parent], d)
	}
	ordered := make([]*Decl, 0, len(m.Decls)+len(out))
	var place func(d *Decl)
	place = func(d *Decl) {
		ordered = append(ordered, d)
		for _, c := range children[d.Name] {
			place(c)
		}
	}
	for _, d := range m.Decls {
		place(d)
	}
	m.Decls = ordered
}

// variantNames names the alternatives of union s for the declarations
// hoisted out of them, from what selects each rather than its position, so
// that names stay when the schema reorders or adds alternatives: the value
// of the member that tells them apart (`method: "log.entryAdded"` gives
// LogEntryAdded), else the required member only that alternative has,
// else a text literal member only it has that value of; an alternative
// with none of these gets its position.
func (m *Model) variantNames(s *Shape) []string {
	names := make([]string, len(s.Alts))
	if hasStruct(s) {
		if disc, values := m.Discriminator(s); disc != "" && len(values) == len(s.Alts) {
			return values
		}
		if markers := m.Markers(s); markers != nil && len(markers) == len(s.Alts) {
			return markers
		}
	}
	used := map[string]bool{}
	for i, a := range s.Alts {
		if a.Kind != KStruct {
			continue
		}
	fields:
		for _, f := range a.Fields {
			v, ok := a.textLiteralField(f.Name)
			if !ok {
				continue
			}
			for j, b := range s.Alts {
				if j != i && b.Kind == KStruct {
					if w, ok := b.textLiteralField(f.Name); ok && w == v {
						continue fields
					}
				}
			}
			if !used[v] {
				names[i] = v
				used[v] = true
				break
			}
		}
	}
	for i := range names {
		if names[i] == "" {
			names[i] = strconv.Itoa(i + 1)
		}
	}
	return names
}

func hasStruct(s *Shape) bool {
	for _, a := range s.Alts {
		if a.Kind == KStruct || a.Kind == KMap {
			return true
		}
	}
	return false
}

package golang

import (
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"

	"github.com/agentstream/agentstream/codegen/cddl"
	"github.com/agentstream/agentstream/codegen/model"
)

// This file writes what a strict decode checks (cddlrt.DecodeStrictJSON):
// each map type's Members (required, known, open) and every generated
// named type's Validate.

// form is how decl() writes a declaration in Go: "struct", "enum" (of
// text or integers), "sum" (a union told apart by a member, sumOf),
// "kind" (a union told apart by the kind of value, writeKindSum), "any" (a
// choice of maps nothing tells apart), "tuple", or "alias".
func (gg *goGen) form(d *model.Decl) string {
	if f, ok := gg.forms[d.Name]; ok {
		return f
	}
	gg.Mute++
	defer func() { gg.Mute-- }()
	s := d.Shape
	f := "alias"
	switch {
	case s.Kind == model.KStruct:
		f = "struct"
	case s.Kind == model.KUnion && (s.IsTextEnum() || isIntEnum(s)):
		f = "enum"
	case s.Kind == model.KUnion && hasStructLeaves(gg.M, s):
		f = "any"
		if _, _, _, ok := gg.sumOf(s); ok {
			f = "sum"
		} else if _, _, _, ok := gg.kindVariants(d, gg.Ident(d.Name)); ok {
			f = "kind"
		}
	case s.Kind == model.KUnion && !gg.oneGoType(d, s):
		if _, _, _, ok := gg.kindVariants(d, gg.Ident(d.Name)); ok {
			f = "kind"
		}
	case s.Kind == model.KTuple && tupleExact(s):
		f = "tuple"
	}
	gg.forms[d.Name] = f
	return f
}

// sumOf tells how union s (with struct leaves) is a sum type: by member
// disc with each leaf's value, by which marker member (values, disc "")
// is present, or in two levels (leaves are then s's own alternatives).
func (gg *goGen) sumOf(s *model.Shape) (disc string, values []string, leaves []*model.Shape, ok bool) {
	if disc, values := gg.M.Discriminator(s); disc != "" {
		return disc, values, gg.M.Leaves(s), true
	}
	if markers := gg.M.Markers(s); markers != nil {
		return "", markers, gg.M.Leaves(s), true
	}
	// Two levels: a member tells the alternatives apart, and an
	// alternative that is itself a union decodes its own variants.
	if disc, values := gg.M.NestedDiscriminator(s); disc != "" {
		return disc, values, s.Alts, true
	}
	return "", nil, nil, false
}

// validates reports whether the Go type of declaration name has Validate.
func (gg *goGen) validates(name string) bool {
	d := gg.M.Decl(name)
	if d == nil {
		return false
	}
	switch gg.form(d) {
	case "struct", "enum", "sum", "kind":
		return true
	}
	return false
}

// membersDecl writes the Members of struct d for strict decoding.
func (gg *goGen) membersDecl(d *model.Decl, id string, s *model.Shape) {
	gg.use(impRT)
	var req, known, nullable, unchecked []string
	for _, f := range s.Fields {
		w := strconv.Quote(gg.WireName(f))
		known = append(known, w)
		if !f.Optional {
			req = append(req, w)
		}
		if gg.M.AdmitsNull(f.Shape) {
			nullable = append(nullable, w)
		}
		if gg.unchecked(d, f.Shape, map[string]bool{}) {
			unchecked = append(unchecked, w)
		}
	}
	lname := lowerFirst(id) + "Members"
	together := ""
	if groups := s.OptGroups(); len(groups) > 0 {
		var gs []string
		for _, grp := range groups {
			var names []string
			for _, f := range grp {
				names = append(names, strconv.Quote(gg.WireName(f)))
			}
			gs = append(gs, "{"+strings.Join(names, ", ")+"}")
		}
		together = ", Together: [][]string{" + strings.Join(gs, ", ") + "}"
	}
	gg.q("")
	if len(nullable) > 0 {
		together += ", Nullable: []string{" + strings.Join(nullable, ", ") + "}"
	}
	if len(unchecked) > 0 {
		together += ", Unchecked: []string{" + strings.Join(unchecked, ", ") + "}"
	}
	gg.q("var %s = cddlrt.Members{Rule: %q, Required: []string{%s}, Known: []string{%s}, Open: %v%s}", lname, d.Name,
		strings.Join(req, ", "), strings.Join(known, ", "), s.Rest != nil, together)
	gg.q("")
	gg.q("// CDDLMembers describes %s's members for strict decoding (cddlrt.DecodeStrictJSON).", id)
	gg.q("func (%s) CDDLMembers() *cddlrt.Members {", id)
	gg.q("return &%s", lname)
	gg.q("}")
	gg.flushQ()
}

// unchecked reports whether the Go type of shape s (of a member of d)
// cannot hold what s allows and refuses, short of a generated type that
// checks itself (a struct or a union told apart by a member): a choice
// typed any, anywhere inside s, through arrays, maps, aliases and the
// variants of unions told apart by kind. Strict decoding leaves such a
// member to the JSON Schema (cddlrt.Members.Unchecked).
func (gg *goGen) unchecked(d *model.Decl, s *model.Shape, seen map[string]bool) bool {
	switch s.Kind {
	case model.KAny:
		return false
	case model.KNever, model.KNull, model.KUndefined, model.KTuple:
		return true
	case model.KArray, model.KMap:
		return gg.unchecked(d, s.Elem, seen)
	case model.KRef:
		rd := gg.M.Decl(s.Ref)
		if rd == nil || seen[s.Ref] {
			return false
		}
		seen[s.Ref] = true
		switch gg.form(rd) {
		case "struct", "sum", "enum":
			return false // checked by its own Members and Validate
		case "any":
			return true
		case "kind":
			for _, a := range rd.Shape.Alts {
				if a.Kind != model.KNull && gg.unchecked(rd, a, seen) {
					return true
				}
			}
			return false
		}
		return gg.unchecked(rd, rd.Shape, seen)
	case model.KUnion:
		if inner, ok := s.Nullable(); ok {
			return gg.unchecked(d, inner, seen)
		}
		gg.Mute++
		t := gg.goType(d, s)
		gg.Mute--
		if t == "any" {
			for _, a := range s.Alts {
				if a.Kind != model.KAny {
					return true
				}
			}
			return false
		}
		for _, a := range s.Alts {
			if gg.unchecked(d, a, seen) {
				return true
			}
		}
	}
	return false
}

// validateStruct writes struct d's Validate.
func (gg *goGen) validateStruct(d *model.Decl, id string, fs []goField) {
	var body []string
	for _, gf := range fs {
		if gf.literal != "" {
			continue
		}
		expr := "s." + gf.name
		ptr := strings.HasPrefix(gf.typ, "*")
		lines := gg.checks(d, d.Name, gf.f.Shape, expr, ptr, strconv.Quote(gg.WireName(gf.f)), 0)
		if len(lines) == 0 {
			continue
		}
		// An optional member's absence (a nil pointer, slice or map)
		// is not checked.
		if ptr || (gf.f.Optional && (strings.HasPrefix(gf.typ, "[]") || strings.HasPrefix(gf.typ, "map["))) {
			body = append(body, fmt.Sprintf("if %s != nil {", expr))
			body = append(body, lines...)
			body = append(body, "}")
		} else {
			body = append(body, lines...)
		}
	}
	gg.q("")
	gg.q("// Validate checks what the schema requires of the values of %s", id)
	gg.q("// that decoding does not: ranges, sizes, patterns, enumerations,")
	gg.q("// array lengths, and the same of its members. (cddlrt.DecodeStrictJSON")
	gg.q("// also checks that required members are present.)")
	gg.q("func (s %s) Validate() error {", id)
	if len(body) == 0 {
		gg.q("_ = s")
	}
	for _, l := range body {
		gg.q("%s", l)
	}
	gg.q("return nil")
	gg.q("}")
	gg.flushQ()
}

// validateUnion writes union d's Validate: a variant must be set (or null
// be allowed, or an unknown variant kept), and is validated.
func (gg *goGen) validateUnion(d *model.Decl, id string, nullable, open bool) {
	gg.use(impRT)
	gg.q("")
	gg.q("// Validate checks that %s holds a variant, and validates it.", id)
	gg.q("func (u %s) Validate() error {", id)
	gg.q("if u.Value == nil {")
	switch {
	case nullable:
		gg.q("return nil // null")
	case open:
		gg.q("if u.Unknown != nil {")
		gg.q("return nil")
		gg.q("}")
		gg.q("return cddlrt.Invalid(\"\", %q, \"no variant is set\")", d.Name)
	default:
		gg.q("return cddlrt.Invalid(\"\", %q, \"no variant is set\")", d.Name)
	}
	gg.q("}")
	gg.q("if v, ok := u.Value.(interface{ Validate() error }); ok {")
	gg.q("return v.Validate()")
	gg.q("}")
	gg.q("return nil")
	gg.q("}")
	gg.flushQ()
}

// validateEnum writes an enumeration's Validate.
func (gg *goGen) validateEnum(d *model.Decl, id string, values []string) {
	gg.use(impRT)
	gg.q("")
	gg.q("// Validate reports a value that is not one of %s's.", id)
	gg.q("func (v %s) Validate() error {", id)
	gg.q("if !v.Valid() {")
	gg.q("return cddlrt.Invalid(\"\", %q, %q, v)", d.Name, "value must be one of "+strings.Join(values, ", ")+", not %v")
	gg.q("}")
	gg.q("return nil")
	gg.q("}")
	gg.flushQ()
}

// checks returns the Go statements that check the value expr (of shape s,
// a pointer when ptr, non-nil where the statements run) at JSON path
// pathExpr (a Go string expression), for rule.
func (gg *goGen) checks(d *model.Decl, rule string, s *model.Shape, expr string, ptr bool, pathExpr string, depth int) []string {
	if depth > 8 {
		return nil
	}
	val := expr
	if ptr {
		val = "(*" + expr + ")"
	}
	fail := func(format string, args ...string) string {
		a := ""
		for _, x := range args {
			a += ", " + x
		}
		return fmt.Sprintf("return cddlrt.Invalid(%s, %q, %q%s)", pathExpr, rule, format, a)
	}
	var out []string
	switch s.Kind {
	case model.KRef:
		if gg.validates(s.Ref) {
			return []string{fmt.Sprintf("if err := %s.Validate(); err != nil {", expr), fmt.Sprintf("return cddlrt.At(%s, err)", pathExpr), "}"}
		}
		rd := gg.M.Decl(s.Ref)
		if rd == nil || gg.form(rd) != "alias" {
			return nil
		}
		return gg.checks(d, rd.Name, rd.Shape, expr, ptr, pathExpr, depth+1)
	case model.KInt, model.KFloat:
		goT := gg.goType(d, s)
		if lo := boundFor(goT, s.Min, true, s.MinExclusive); lo != "" {
			op, word := "<", ">="
			if s.MinExclusive {
				op, word = "<=", ">"
			}
			out = append(out, fmt.Sprintf("if %s %s %s {", val, op, lo), fail("must be "+word+" "+lo+" but found %v", val), "}")
		}
		if hi := boundFor(goT, s.Max, false, s.MaxExclusive); hi != "" {
			op, word := ">", "<="
			if s.MaxExclusive {
				op, word = ">=", "<"
			}
			out = append(out, fmt.Sprintf("if %s %s %s {", val, op, hi), fail("must be "+word+" "+hi+" but found %v", val), "}")
		}
	case model.KText, model.KBytes:
		if s.MinLen != nil && *s.MinLen > 0 {
			n := strconv.FormatInt(*s.MinLen, 10)
			out = append(out, fmt.Sprintf("if len(%s) < %s {", val, n), fail("must be at least "+n+" bytes long, not %d", "len("+val+")"), "}")
		}
		if s.MaxLen != nil {
			n := strconv.FormatInt(*s.MaxLen, 10)
			out = append(out, fmt.Sprintf("if len(%s) > %s {", val, n), fail("must be at most "+n+" bytes long, not %d", "len("+val+")"), "}")
		}
		if s.Kind == model.KText && s.Pattern != "" {
			if re := gg.patternVar(d, s.Pattern); re != "" {
				out = append(out, fmt.Sprintf("if !%s.MatchString(%s) {", re, val), fail("does not match pattern '"+anchored(s.Pattern)+"'"), "}")
			}
		}
	case model.KLiteral:
		switch {
		case s.LitBool != nil:
			out = append(out, fmt.Sprintf("if %s != %v {", val, *s.LitBool), fail("must be "+strconv.FormatBool(*s.LitBool)), "}")
		case s.Lit != nil && (s.Lit.Kind == cddl.ValueInt || s.Lit.Kind == cddl.ValueFloat || s.Lit.Kind == cddl.ValueText):
			lit := s.Lit.JSON()
			out = append(out, fmt.Sprintf("if %s != %s {", val, lit), fail("must be "+lit+", not %v", val), "}")
		}
	case model.KArray:
		if s.MinItems > 0 {
			n := strconv.FormatInt(s.MinItems, 10)
			out = append(out, fmt.Sprintf("if len(%s) < %s {", val, n), fail("must have at least "+n+" items, not %d", "len("+val+")"), "}")
		}
		if s.MaxItems >= 0 {
			n := strconv.FormatInt(s.MaxItems, 10)
			out = append(out, fmt.Sprintf("if len(%s) > %s {", val, n), fail("must have at most "+n+" items, not %d", "len("+val+")"), "}")
		}
		elemT := gg.elemType(d, s.Elem)
		v := fmt.Sprintf("e%d", depth)
		i := fmt.Sprintf("i%d", depth)
		inner := gg.checks(d, rule, s.Elem, v, strings.HasPrefix(elemT, "*"), fmt.Sprintf("cddlrt.Index(%s, %s)", pathExpr, i), depth+1)
		if len(inner) > 0 {
			out = append(out, fmt.Sprintf("for %s, %s := range %s {", i, v, strings.Trim(val, "()")))
			if strings.HasPrefix(elemT, "*") {
				out = append(out, fmt.Sprintf("if %s == nil {", v), "continue", "}")
			}
			out = append(out, inner...)
			out = append(out, "}")
		}
	case model.KMap:
		elemT := gg.elemType(d, s.Elem)
		v := fmt.Sprintf("e%d", depth)
		k := fmt.Sprintf("k%d", depth)
		keyPath := fmt.Sprintf("cddlrt.Join(%s, fmt.Sprint(%s))", pathExpr, k)
		inner := gg.checks(d, rule, s.Elem, v, strings.HasPrefix(elemT, "*"), keyPath, depth+1)
		if len(inner) > 0 {
			gg.use("fmt")
			out = append(out, fmt.Sprintf("for %s, %s := range %s {", k, v, strings.Trim(val, "()")))
			if strings.HasPrefix(elemT, "*") {
				out = append(out, fmt.Sprintf("if %s == nil {", v), "continue", "}")
			}
			out = append(out, inner...)
			out = append(out, "}")
		}
	case model.KUnion:
		if p, ok := s.TextChoicePattern(); ok {
			inner := strings.TrimSuffix(strings.TrimPrefix(p, "^(?:"), ")$")
			if re := gg.patternVar(d, inner); re != "" {
				out = append(out, fmt.Sprintf("if !%s.MatchString(string(%s)) {", re, val), fail("does not match pattern '"+p+"'"), "}")
			}
			return out
		}
		if inner, ok := s.Nullable(); ok {
			t := gg.goType(d, inner)
			lines := gg.checks(d, rule, inner, expr, ptr || !nilable(t), pathExpr, depth+1)
			if len(lines) > 0 && !ptr && nilable(t) {
				return lines
			}
			if len(lines) > 0 && !ptr {
				return append(append([]string{fmt.Sprintf("if %s != nil {", expr)}, lines...), "}")
			}
			return lines
		}
	}
	return out
}

// boundFor spells bound v as a constant of Go type goT, or "" when the
// type's own range already enforces it (a uint64 is never below 0).
func boundFor(goT string, v *cddl.Value, lower, exclusive bool) string {
	if v == nil {
		return ""
	}
	switch goT {
	case "float64":
		if v.Kind == cddl.ValueInt {
			return v.Int.String()
		}
		return strconv.FormatFloat(v.Float, 'g', -1, 64)
	case "uint64", "int64":
		if v.Kind != cddl.ValueInt {
			return "" // a float bound on an integer: left to the JSON Schema
		}
		lo, hi := big.NewInt(0), new(big.Int).SetUint64(^uint64(0))
		if goT == "int64" {
			lo, hi = big.NewInt(-1<<63), big.NewInt(1<<63-1)
		}
		if c := v.Int.Cmp(lo); c < 0 || (lower && c == 0 && !exclusive) {
			return ""
		}
		if c := v.Int.Cmp(hi); c > 0 || (!lower && c == 0 && !exclusive) {
			return ""
		}
		return v.Int.String()
	}
	return ""
}

func anchored(p string) string { return "^(?:" + p + ")$" }

// patternVar returns the package variable holding pattern p compiled, or
// "" (with a warning) when Go's regexp cannot compile it.
func (gg *goGen) patternVar(d *model.Decl, p string) string {
	if name, ok := gg.patterns[p]; ok {
		return name
	}
	if _, err := regexp.Compile(anchored(p)); err != nil {
		gg.Warn(d, "the pattern %q is not checked by Validate (Go's regexp: %v)", p, err)
		gg.patterns[p] = ""
		return ""
	}
	name := fmt.Sprintf("pattern%d", len(gg.patternOrder))
	gg.patterns[p] = name
	gg.patternOrder = append(gg.patternOrder, p)
	return name
}

package model

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/agentstream/agentstream/codegen/cddl"
)

// Kind is the kind of a [Shape].
type Kind int

// The kinds of shapes.
const (
	KAny       Kind = iota // any value
	KNever                 // no value (an empty socket)
	KNull                  // null (CBOR nil)
	KUndefined             // CBOR undefined
	KBool                  // true or false
	KInt                   // an integer, possibly bounded
	KFloat                 // a number, possibly bounded
	KText                  // a text string
	KBytes                 // a byte string
	KLiteral               // one literal value (Lit, or LitBool)
	KRef                   // a named declaration (Ref)
	KStruct                // a map with named members (Fields) and possibly others (Rest)
	KMap                   // a map from keys (Key) to values (Elem) with no named members
	KArray                 // a list of Elem
	KTuple                 // a fixed sequence (Items), possibly followed by more of Rest
	KUnion                 // one of Alts
)

// Shape is the language-neutral form of a CDDL type that the generators
// work from.
type Shape struct {
	Kind Kind
	Ref  string // KRef: the declaration's CDDL name

	Lit     *cddl.Value // KLiteral (number or text)
	LitBool *bool       // KLiteral true or false

	// Numeric bounds of KInt and KFloat, as integers or floats.
	Min, Max                   *cddl.Value
	MinExclusive, MaxExclusive bool

	// KText and KBytes.
	Pattern        string // .regexp (XSD-style, anchored)
	MinLen, MaxLen *int64 // .size; nil when unbounded
	Format         string // a well-known format: date-time, uri, ...

	Default *cddl.Value // .default

	Fields  []*Field // KStruct
	Rest    *Shape   // KStruct: the type of members other than Fields (nil: closed)
	RestKey *Shape   // KStruct, KMap: the key type of other members

	Key  *Shape // KMap
	Elem *Shape // KMap: value type; KArray: element type

	MinItems, MaxItems int64 // KArray, and KTuple's Rest; -1 when unbounded

	Items []*Item // KTuple

	Alts []*Shape // KUnion

	Note string // what this shape approximates, when it is not exact
}

// Field is a named member of a struct.
type Field struct {
	Name     string // the member name as written in the schema
	IntKey   bool   // the key is an integer (Name holds its decimal form)
	Quoted   bool   // the key is a text literal ("name":), written on the wire exactly
	Doc      string
	Shape    *Shape
	Optional bool
	// NoCut is set for a `key => value` member without a cut (`^`): a value
	// that does not match may still be accepted by the map's other members
	// (RFC 8610 section 3.5.4).
	NoCut bool
	Pos   cddl.Pos
	// OptGroup, when not 0, numbers the optional group (`? (b: int, c:
	// text)`) the member belongs to: its members are all present or all
	// absent. Such members are Optional; targets that cannot say "together"
	// treat them one by one.
	OptGroup int
}

// Item is one position of a tuple.
type Item struct {
	Name     string // the entry's key, if the schema names it
	Doc      string
	Shape    *Shape
	Optional bool
}

// Decl is a named declaration: one per schema rule without generic
// parameters, plus the types hoisted out of them (Synthetic).
type Decl struct {
	Name      string // CDDL name, or for a hoisted type Parent + member name
	Doc       string
	Pos       cddl.Pos
	Shape     *Shape
	Synthetic bool // hoisted from an anonymous type inside another declaration
	Parent    string
}

// Warning is a construct a generator could not express exactly.
type Warning struct {
	Pos  cddl.Pos
	Rule string
	Msg  string
}

func (w Warning) String() string {
	return fmt.Sprintf("%d:%d: %s: %s", w.Pos.Line, w.Pos.Col, w.Rule, w.Msg)
}

// Model is a schema lowered to shapes.
type Model struct {
	File     string
	Decls    []*Decl
	Warnings []Warning
	byName   map[string]*Decl
}

// Decl returns the declaration named name, or nil.
func (m *Model) Decl(name string) *Decl { return m.byName[name] }

// Resolve follows references until it reaches a shape that is not a
// reference (nil for a dangling one).
func (m *Model) Resolve(s *Shape) *Shape {
	for i := 0; s != nil && s.Kind == KRef && i < 100; i++ {
		d := m.byName[s.Ref]
		if d == nil {
			return nil
		}
		s = d.Shape
	}
	return s
}

// Leaves returns the alternatives of a union with every alternative that is
// a reference to another union replaced by that union's leaves: the concrete
// variants a value of the union can be.
func (m *Model) Leaves(u *Shape) []*Shape {
	var out []*Shape
	seen := map[string]bool{}
	var walk func(s *Shape, depth int)
	walk = func(s *Shape, depth int) {
		for _, a := range s.Alts {
			if a.Kind == KRef && depth < 20 {
				if r := m.Resolve(a); r != nil && r.Kind == KUnion {
					if !seen[a.Ref] {
						seen[a.Ref] = true
						walk(r, depth+1)
					}
					continue
				}
			}
			out = append(out, a)
		}
	}
	walk(u, 0)
	return out
}

// Discriminator returns the member that tells the variants of union u apart:
// a member every leaf variant is a struct with, required, whose value is a
// distinct text literal in each. It returns "" when there is none, and the
// member's value for each leaf otherwise.
func (m *Model) Discriminator(u *Shape) (string, []string) {
	leaves := m.Leaves(u)
	if len(leaves) < 2 {
		return "", nil
	}
	first := m.Resolve(leaves[0])
	if first == nil || first.Kind != KStruct {
		return "", nil
	}
candidates:
	for _, f := range first.Fields {
		if f.Optional || f.IntKey {
			continue
		}
		values := make([]string, 0, len(leaves))
		seen := map[string]bool{}
		for _, leaf := range leaves {
			st := m.Resolve(leaf)
			if st == nil || st.Kind != KStruct {
				return "", nil
			}
			v, ok := st.textLiteralField(f.Name)
			if !ok || seen[v] {
				continue candidates
			}
			seen[v] = true
			values = append(values, v)
		}
		return f.Name, values
	}
	return "", nil
}

// Markers returns, for each leaf variant of union u, a required member that
// no other variant has: what tells the variants apart when no member holds
// a distinct literal (`{responses: ...}` versus `{interruptId: ...}`). It
// returns nil when some variant has no such member.
func (m *Model) Markers(u *Shape) []string {
	leaves := m.Leaves(u)
	if len(leaves) < 2 {
		return nil
	}
	structs := make([]*Shape, len(leaves))
	for i, l := range leaves {
		st := m.Resolve(l)
		if st == nil || st.Kind != KStruct {
			return nil
		}
		structs[i] = st
	}
	markers := make([]string, len(leaves))
	for i, st := range structs {
	fields:
		for _, f := range st.Fields {
			if f.Optional || f.IntKey {
				continue
			}
			for j, other := range structs {
				if j == i {
					continue
				}
				for _, g := range other.Fields {
					if g.Name == f.Name {
						continue fields
					}
				}
			}
			markers[i] = f.Name
			break
		}
		if markers[i] == "" {
			return nil
		}
	}
	return markers
}

func (s *Shape) textLiteralField(name string) (string, bool) {
	for _, f := range s.Fields {
		if f.Name == name && !f.Optional && f.Shape.Kind == KLiteral && f.Shape.Lit != nil && f.Shape.Lit.Kind == cddl.ValueText {
			return f.Shape.Lit.Text, true
		}
	}
	return "", false
}

// IsTextEnum reports whether s is a union of text literals only.
func (s *Shape) IsTextEnum() bool {
	if s.Kind != KUnion || len(s.Alts) < 2 {
		return false
	}
	for _, a := range s.Alts {
		if a.Kind != KLiteral || a.Lit == nil || a.Lit.Kind != cddl.ValueText {
			return false
		}
	}
	return true
}

// Nullable splits a union of null and exactly one other shape into that
// shape; ok is false for anything else.
func (s *Shape) Nullable() (inner *Shape, ok bool) {
	if s.Kind != KUnion || len(s.Alts) != 2 {
		return nil, false
	}
	switch {
	case s.Alts[0].Kind == KNull:
		return s.Alts[1], true
	case s.Alts[1].Kind == KNull:
		return s.Alts[0], true
	}
	return nil, false
}

// AdmitsNull reports whether null is a value of shape s: null itself,
// any, or a choice one of whose alternatives admits it, through named
// rules.
func (m *Model) AdmitsNull(s *Shape) bool {
	seen := map[string]bool{}
	var admits func(s *Shape) bool
	admits = func(s *Shape) bool {
		switch s.Kind {
		case KNull, KAny:
			return true
		case KRef:
			d := m.byName[s.Ref]
			if d == nil || seen[s.Ref] {
				return false
			}
			seen[s.Ref] = true
			return admits(d.Shape)
		case KUnion:
			for _, a := range s.Alts {
				if admits(a) {
					return true
				}
			}
		}
		return false
	}
	return admits(s)
}

// NestedDiscriminator tells apart the alternatives of union u in two
// levels, where [Model.Discriminator] finds no member that tells all the
// leaf variants apart: a member whose value is a distinct text literal in
// each alternative, where an alternative is a struct with that literal or
// a named union every variant of which has the same literal and which
// tells its own variants apart (by a member, or by which member is
// present). `Message = Resp / Ev` with `Resp = {type: "success", ...}` and
// `Ev = {type: "event", ( M1 // M2 )}` dispatches on "type", then Ev on
// "method". It returns the member and each alternative's value, or "".
func (m *Model) NestedDiscriminator(u *Shape) (string, []string) {
	if len(u.Alts) < 2 {
		return "", nil
	}
	// Each alternative's candidate members: the text literal it has for
	// each, when every leaf below it agrees.
	lits := make([]map[string]string, len(u.Alts))
	nested := false
	for i, a := range u.Alts {
		r := m.Resolve(a)
		switch {
		case r != nil && r.Kind == KStruct:
			lits[i] = map[string]string{}
			for _, f := range r.Fields {
				if v, ok := r.textLiteralField(f.Name); ok {
					lits[i][f.Name] = v
				}
			}
		case r != nil && r.Kind == KUnion && a.Kind == KRef:
			if d, _ := m.Discriminator(r); d == "" && m.Markers(r) == nil {
				if d, _ := m.NestedDiscriminator(r); d == "" {
					return "", nil
				}
			}
			nested = true
			var common map[string]string
			for _, l := range m.Leaves(r) {
				st := m.Resolve(l)
				if st == nil || st.Kind != KStruct {
					return "", nil
				}
				here := map[string]string{}
				for _, f := range st.Fields {
					if v, ok := st.textLiteralField(f.Name); ok {
						here[f.Name] = v
					}
				}
				if common == nil {
					common = here
					continue
				}
				for k, v := range common {
					if here[k] != v {
						delete(common, k)
					}
				}
			}
			lits[i] = common
		default:
			return "", nil
		}
	}
	if !nested {
		return "", nil
	}
	// The first member (in the first alternative's order) that is a
	// distinct literal in every alternative.
	first := m.Resolve(u.Alts[0])
	var names []string
	if first.Kind == KStruct {
		for _, f := range first.Fields {
			names = append(names, f.Name)
		}
	} else {
		for k := range lits[0] {
			names = append(names, k)
		}
		sort.Strings(names)
	}
candidates:
	for _, name := range names {
		seen := map[string]bool{}
		values := make([]string, len(u.Alts))
		for i := range u.Alts {
			v, ok := lits[i][name]
			if !ok || seen[v] {
				continue candidates
			}
			seen[v] = true
			values[i] = v
		}
		return name, values
	}
	return "", nil
}

// OptGroups returns the optional groups of struct s, in order: for each,
// its members (see Field.OptGroup).
func (s *Shape) OptGroups() [][]*Field {
	var out [][]*Field
	index := map[int]int{}
	for _, f := range s.Fields {
		if f.OptGroup == 0 {
			continue
		}
		i, ok := index[f.OptGroup]
		if !ok {
			i = len(out)
			index[f.OptGroup] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], f)
	}
	return out
}

// TextChoicePattern turns a choice of text literals and patterns (`"values"
// / "custom" / text .regexp "custom:.+"`) into one anchored pattern: the
// same set of strings, checked at a fraction of the cost of an anyOf, whose
// failed alternatives each build an error.
func (s *Shape) TextChoicePattern() (string, bool) {
	var parts []string
	patterns := 0
	for _, a := range s.Alts {
		switch {
		case a.Kind == KLiteral && a.Lit != nil && a.Lit.Kind == cddl.ValueText:
			parts = append(parts, regexp.QuoteMeta(a.Lit.Text))
		case a.Kind == KText && a.Pattern != "" && a.MinLen == nil && a.MaxLen == nil && a.Format == "" && a.Default == nil:
			parts = append(parts, "(?:"+a.Pattern+")")
			patterns++
		default:
			return "", false
		}
	}
	if patterns == 0 {
		return "", false
	}
	return "^(?:" + strings.Join(parts, "|") + ")$", true
}

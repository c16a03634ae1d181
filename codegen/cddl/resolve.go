package cddl

import (
	"fmt"
	"math/big"
	"strings"
)

// Def is a resolved rule: every `=`, `/=` and `//=` for one name merged.
type Def struct {
	Name    string
	Pos     Pos // where it is first defined
	Params  []string
	Doc     string
	IsGroup bool   // a group rule (its body is Group); otherwise a type rule (Type)
	Type    *Type  // type rules: all type alternatives
	Group   *Group // group rules: all group alternatives
	Prelude bool   // from the standard prelude, not redefined by the schema
	rhs     string // the first definition's right-hand side, normalised
}

// IsSocket reports whether the name is a socket (`$name` or `$$name`), which
// may be left undefined.
func (d *Def) IsSocket() bool { return strings.HasPrefix(d.Name, "$") }

// Resolved is a schema with its names bound.
type Resolved struct {
	Schema *Schema
	Defs   map[string]*Def
	// Order lists the schema's own rules (not the prelude's) in the order
	// of their first definition.
	Order []string
}

// Lookup returns the definition of name, or nil.
func (r *Resolved) Lookup(name string) *Def { return r.Defs[name] }

// Resolve binds the names of a parsed schema against its own rules and the
// standard prelude: it merges `/=` and `//=` alternatives and socket plugs,
// decides which rules are groups, and reports every undefined name, wrong
// number of generic arguments and duplicate rule with its position.
// Recursive rules are allowed. An undefined socket is an empty choice.
func Resolve(s *Schema) (*Resolved, error) {
	res := &Resolved{Schema: s, Defs: map[string]*Def{}}
	var errs ErrorList
	errorf := func(pos Pos, format string, args ...any) {
		errs = append(errs, &Error{File: s.File, Pos: pos, Msg: fmt.Sprintf(format, args...)})
	}
	for _, r := range parsePrelude().Rules {
		res.Defs[r.Name] = newDef(r)
		res.Defs[r.Name].Prelude = true
	}
	for _, r := range s.Rules {
		d, ok := res.Defs[r.Name]
		if !ok || d.Prelude {
			if r.Assign == AssignDefine || !ok {
				res.Defs[r.Name] = newDef(r)
				res.Order = append(res.Order, r.Name)
				continue
			}
			// `/=` on a prelude name extends a copy of it.
			cp := *d
			cp.Prelude = false
			d = &cp
			res.Defs[r.Name] = d
			res.Order = append(res.Order, r.Name)
		}
		if d.Doc == "" {
			d.Doc = r.Doc
		}
		switch r.Assign {
		case AssignDefine:
			if r.rhs == d.rhs && len(r.Params) == len(d.Params) {
				continue // an identical repetition, as in schemas pasted from several sections
			}
			errorf(r.Pos, "rule %s is defined twice (first at %s); extend it with '/=' or '//='", r.Name, d.Pos)
		case AssignTypeChoice:
			if d.IsGroup {
				errorf(r.Pos, "'/=' adds type alternatives, but %s is a group rule (defined at %s)", r.Name, d.Pos)
				continue
			}
			d.Type = &Type{Pos: d.Type.Pos, Choices: append(append([]*Type1{}, d.Type.Choices...), r.Type.Choices...)}
		case AssignGroupChoice:
			if !d.IsGroup {
				if !isPlainType(d) {
					errorf(r.Pos, "'//=' adds group alternatives, but %s is a type rule (defined at %s)", r.Name, d.Pos)
					continue
				}
				d.IsGroup = true
				d.Group = &Group{Pos: d.Type.Pos, Choices: []*GroupChoice{{Pos: d.Type.Pos, Entries: []*GroupEntry{{Pos: d.Type.Pos, Type: plainName(d.Type)}}}}}
				d.Type = nil
			}
			d.Group = &Group{Pos: d.Group.Pos, Choices: append(append([]*GroupChoice{}, d.Group.Choices...), entryChoices(r.Entry)...)}
		}
	}
	res.classify()
	for _, name := range res.Order {
		res.checkDef(res.Defs[name], errorf)
	}
	return res, errs.err()
}

func newDef(r *Rule) *Def {
	d := &Def{Name: r.Name, Pos: r.Pos, Params: r.Params, Doc: r.Doc, rhs: r.rhs}
	switch {
	case r.Assign == AssignGroupChoice || r.Type == nil || strings.HasPrefix(r.Name, "$$"):
		d.IsGroup = true
		d.Group = &Group{Pos: r.Entry.Pos, Choices: entryChoices(r.Entry)}
	default:
		d.Type = r.Type
	}
	return d
}

// entryChoices turns a rule's right-hand side into group choices: a
// parenthesised group gives its own choices, anything else one choice with
// one entry.
func entryChoices(e *GroupEntry) []*GroupChoice {
	if e.Group != nil && e.Occur == nil && e.Key == nil {
		return e.Group.Choices
	}
	return []*GroupChoice{{Pos: e.Pos, Entries: []*GroupEntry{e}}}
}

// isPlainType reports whether a type rule is a single name, which may stand
// for a group.
func isPlainType(d *Def) bool {
	return d.Type != nil && plainName(d.Type) != nil
}

// plainName returns the name a type consists of, seen through parentheses
// (`Y`, `( Y )`, `((Y))`), or nil when it is anything else.
func plainName(t *Type) *Type {
	for i := 0; i < 100; i++ {
		if len(t.Choices) != 1 || t.Choices[0].Op != "" {
			return nil
		}
		switch left := t.Choices[0].Left; left.Kind {
		case T2Name:
			return t
		case T2Paren:
			t = left.Inner
		default:
			return nil
		}
	}
	return nil
}

// classify turns `a = b` and `a = ( b )`, where b is a group rule, into a
// group rule too: the parentheses of `X = ( Y )` wrap a group, and the
// members of Y are spliced wherever X is.
func (res *Resolved) classify() {
	for changed := true; changed; {
		changed = false
		for _, name := range res.Order {
			d := res.Defs[name]
			if d.IsGroup || !isPlainType(d) {
				continue
			}
			name := plainName(d.Type)
			target := res.Defs[name.Choices[0].Left.Name]
			if target != nil && target.IsGroup && target != d {
				d.IsGroup = true
				d.Group = &Group{Pos: d.Type.Pos, Choices: []*GroupChoice{{Pos: d.Type.Pos, Entries: []*GroupEntry{{Pos: d.Type.Pos, Type: name}}}}}
				d.Type = nil
				changed = true
			}
		}
	}
}

// checkDef reports undefined names and generic argument counts in d.
func (res *Resolved) checkDef(d *Def, errorf func(Pos, string, ...any)) {
	params := map[string]bool{}
	for _, p := range d.Params {
		params[p] = true
	}
	var checkType func(*Type)
	var checkType1 func(*Type1)
	var checkGroup func(*Group)
	checkName := func(pos Pos, name string, args []*Type1) {
		for _, a := range args {
			checkType1(a)
		}
		if params[name] {
			if len(args) > 0 {
				errorf(pos, "generic parameter %s takes no arguments", name)
			}
			return
		}
		target := res.Defs[name]
		if target == nil {
			if strings.HasPrefix(name, "$") {
				return // an unplugged socket: an empty choice
			}
			errorf(pos, "undefined name %s", name)
			return
		}
		if len(args) != len(target.Params) {
			errorf(pos, "%s takes %d generic argument(s), got %d", name, len(target.Params), len(args))
		}
	}
	checkType2 := func(t *Type2) {
		switch t.Kind {
		case T2Name, T2Unwrap, T2EnumName:
			checkName(t.Pos, t.Name, t.Args)
		case T2Paren, T2Tag:
			checkType(t.Inner)
		case T2Map, T2Array, T2EnumGroup:
			checkGroup(t.Group)
		}
		if t.MinorType != nil {
			checkType(t.MinorType)
		}
	}
	checkType1 = func(t *Type1) {
		checkType2(t.Left)
		if t.Right != nil {
			checkType2(t.Right)
		}
		if (t.Op == ".." || t.Op == "...") && t.Left.Kind == T2Value && t.Right != nil && t.Right.Kind == T2Value {
			if empty, ok := emptyRange(t.Left.Value, t.Right.Value, t.Op == "..."); ok && empty {
				why := "its lower bound is above its upper bound"
				if t.Op == "..." {
					why = "its lower bound is not below its upper bound, which '...' excludes"
				}
				errorf(t.Pos, "the range %s%s%s holds no value: %s", t.Left.Value, t.Op, t.Right.Value, why)
			}
		}
	}
	checkType = func(t *Type) {
		for _, c := range t.Choices {
			checkType1(c)
		}
	}
	checkGroup = func(g *Group) {
		for _, gc := range g.Choices {
			for _, e := range gc.Entries {
				if e.Key != nil && e.Key.Kind == KeyType {
					checkType1(e.Key.Type)
				}
				if e.Type != nil {
					checkType(e.Type)
				}
				if e.Group != nil {
					checkGroup(e.Group)
				}
			}
		}
	}
	if d.IsGroup {
		checkGroup(d.Group)
	} else {
		checkType(d.Type)
	}
}

// emptyRange reports whether the range lo..hi (lo...hi when exclusive)
// holds no number; ok is false when the bounds are not both numbers.
func emptyRange(lo, hi *Value, exclusive bool) (empty, ok bool) {
	num := func(v *Value) (*big.Float, bool) {
		switch v.Kind {
		case ValueInt:
			return new(big.Float).SetInt(v.Int), true
		case ValueFloat:
			return big.NewFloat(v.Float), true
		}
		return nil, false
	}
	a, okA := num(lo)
	b, okB := num(hi)
	if !okA || !okB {
		return false, false
	}
	c := a.Cmp(b)
	return c > 0 || (exclusive && c == 0), true
}

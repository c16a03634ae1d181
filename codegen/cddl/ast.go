package cddl

import (
	"encoding/base64"
	"fmt"
	"math/big"
	"strconv"
)

// Pos is a position in a CDDL source: 1-based line and column (in bytes),
// and the 0-based byte offset.
type Pos struct {
	Line, Col, Offset int
}

func (p Pos) String() string { return fmt.Sprintf("%d:%d", p.Line, p.Col) }

// Schema is a parsed CDDL file: its rules in source order.
type Schema struct {
	File  string
	Rules []*Rule
}

// AssignKind is how a rule is assigned.
type AssignKind int

const (
	// AssignDefine is `=`.
	AssignDefine AssignKind = iota
	// AssignTypeChoice is `/=`: adds type alternatives to an existing rule.
	AssignTypeChoice
	// AssignGroupChoice is `//=`: adds group alternatives to an existing rule.
	AssignGroupChoice
)

func (a AssignKind) String() string {
	switch a {
	case AssignTypeChoice:
		return "/="
	case AssignGroupChoice:
		return "//="
	default:
		return "="
	}
}

// Rule is one `name = ...` definition.
//
// The parser cannot always tell a type rule from a group rule: `a = b` is
// either, depending on what `b` is. It records the right-hand side as a group
// entry ([Rule.Entry]); [Rule.Type] is set as well when that entry is a plain
// type (no member key, no occurrence, not a parenthesised group), and the
// resolver decides.
type Rule struct {
	Pos    Pos
	Name   string
	Params []string // generic parameters, in order
	Assign AssignKind
	Entry  *GroupEntry // the right-hand side as a group entry
	Type   *Type       // the right-hand side as a type, when it is one
	Doc    string
	rhs    string // the right-hand side's tokens, for comparing redefinitions
}

// Type is a type choice: `t1 / t2 / ...` (one element when there is no choice).
type Type struct {
	Pos     Pos
	Choices []*Type1
}

// Type1 is a type with an optional range or control operator:
// `left`, `left .. right`, `left ... right` or `left .ctl right`.
type Type1 struct {
	Pos   Pos
	Left  *Type2
	Op    string // "", "..", "...", or a control operator with its dot, like ".size"
	Right *Type2
}

// Type2Kind tells which form a [Type2] has.
type Type2Kind int

const (
	// T2Value is a literal value.
	T2Value Type2Kind = iota
	// T2Name is a type or group name, possibly with generic arguments.
	T2Name
	// T2Paren is `( type )`.
	T2Paren
	// T2Map is `{ group }`.
	T2Map
	// T2Array is `[ group ]`.
	T2Array
	// T2Unwrap is `~ name`.
	T2Unwrap
	// T2EnumGroup is `&( group )`.
	T2EnumGroup
	// T2EnumName is `& name`.
	T2EnumName
	// T2Tag is `#6.n(type)` (Tag nil when the number is absent).
	T2Tag
	// T2Major is `#n` or `#n.m`.
	T2Major
	// T2Any is `#`.
	T2Any
)

// Type2 is a primary type expression.
type Type2 struct {
	Pos   Pos
	Kind  Type2Kind
	Value *Value   // T2Value
	Name  string   // T2Name, T2Unwrap, T2EnumName
	Args  []*Type1 // generic arguments of Name
	Inner *Type    // T2Paren, T2Tag
	Group *Group   // T2Map, T2Array, T2EnumGroup
	Tag   *big.Int // T2Tag: the tag number, nil when absent
	Major int      // T2Major: major type 0..7
	Minor *big.Int // T2Major: additional information, nil when absent
	// MinorType is the computed tag number or additional information of
	// `#6.<type>(...)` or `#n.<type>` (RFC 9682).
	MinorType *Type
}

// Group is a group choice: `entries // entries // ...`.
type Group struct {
	Pos     Pos
	Choices []*GroupChoice
}

// GroupChoice is one alternative of a [Group]: a sequence of entries.
type GroupChoice struct {
	Pos     Pos
	Entries []*GroupEntry
}

// GroupEntry is one member of a group: `[occur] [key] type` or
// `[occur] ( group )`.
type GroupEntry struct {
	Pos   Pos
	Occur *Occurrence // nil: exactly once
	Key   *MemberKey  // nil: no key
	Type  *Type       // set unless Group is
	Group *Group      // a parenthesised group
	Doc   string
}

// Occurrence is `?`, `*`, `+` or `n*m`. Max is -1 when unbounded.
type Occurrence struct {
	Pos      Pos
	Min, Max int64
}

// Optional reports whether the entry may be absent.
func (o *Occurrence) Optional() bool { return o != nil && o.Min == 0 }

// KeyKind tells the form of a [MemberKey].
type KeyKind int

const (
	// KeyBareword is `name:`.
	KeyBareword KeyKind = iota
	// KeyValue is `"text":` or `1:`.
	KeyValue
	// KeyType is `type =>` (or `type ^ =>`).
	KeyType
)

// MemberKey is the key of a map member.
type MemberKey struct {
	Pos   Pos
	Kind  KeyKind
	Name  string // KeyBareword
	Value *Value // KeyValue
	Type  *Type1 // KeyType
	Cut   bool   // `^ =>` or any `:` key
}

// ValueKind tells which literal a [Value] holds.
type ValueKind int

const (
	// ValueInt is an integer literal (any size).
	ValueInt ValueKind = iota
	// ValueFloat is a floating-point literal.
	ValueFloat
	// ValueText is a text string.
	ValueText
	// ValueBytes is a byte string (h'', b64'' or '').
	ValueBytes
	// ValueBool is the prelude's true or false (Bool), and ValueNull its
	// null (or nil); they appear only as a [Shape]'s Default, never in
	// the syntax tree.
	ValueBool
	ValueNull
)

// Value is a literal.
type Value struct {
	Pos   Pos
	Kind  ValueKind
	Int   *big.Int
	Float float64
	Text  string // ValueText: the decoded text
	Bytes []byte // ValueBytes: the decoded bytes
	Bool  bool   // ValueBool
	Raw   string // the literal as written
}

// String returns the literal as written in the source.
func (v *Value) String() string { return v.Raw }

// JSON returns the value as JSON text (a byte string as base64url text,
// as the JSON Schema and the bindings carry it).
func (v *Value) JSON() string {
	switch v.Kind {
	case ValueInt:
		return v.Int.String()
	case ValueFloat:
		return strconv.FormatFloat(v.Float, 'g', -1, 64)
	case ValueText:
		return strconv.Quote(v.Text)
	case ValueBool:
		return strconv.FormatBool(v.Bool)
	case ValueNull:
		return "null"
	default:
		return strconv.Quote(base64.RawURLEncoding.EncodeToString(v.Bytes))
	}
}

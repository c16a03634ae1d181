package cddlrt

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/fxamacker/cbor/v2"
)

// ValidationError is a value the schema does not allow: where it is (a
// JSON path: `params.channels[1]`, "" for the value itself), the CDDL rule
// it breaks, and how.
type ValidationError struct {
	Path string
	Rule string
	Msg  string
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.Rule != "" {
		b.WriteString(" (rule ")
		b.WriteString(e.Rule)
		b.WriteString(")")
	}
	return b.String()
}

// Invalid returns a ValidationError.
func Invalid(path, rule, format string, args ...any) error {
	return &ValidationError{Path: path, Rule: rule, Msg: fmt.Sprintf(format, args...)}
}

// Join appends a member name to a path.
func Join(path, member string) string {
	if path == "" {
		return member
	}
	return path + "." + member
}

// Index appends an array index to a path.
func Index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// At puts err, found in the value at path, in its place: the path of a
// ValidationError is prefixed with path; another error becomes one.
func At(path string, err error) error {
	if err == nil {
		return nil
	}
	var ve *ValidationError
	if errors.As(err, &ve) {
		out := *ve
		switch {
		case out.Path == "":
			out.Path = path
		case strings.HasPrefix(out.Path, "["):
			out.Path = path + out.Path
		default:
			out.Path = Join(path, out.Path)
		}
		return &out
	}
	return &ValidationError{Path: path, Msg: err.Error()}
}

// Members describes the members of a generated map type, for strict
// decoding: the CDDL rule, the members it requires and those it knows (by
// their names on the wire), and whether it admits others.
type Members struct {
	Rule     string
	Required []string
	Known    []string
	Open     bool
	// Together lists the optional groups (`? (lat: float, lon: float)`):
	// the members of each are all present or all absent.
	Together [][]string
	// Nullable lists the members whose rule admits null: null for any
	// other member is refused (a plain decode takes it as the zero value).
	Nullable []string
	// Unchecked lists the members whose Go type cannot hold what their rule
	// allows and refuses (a choice typed any, such as `text / Point`): a
	// strict decode of a value with one of them present fails with
	// [ErrUnchecked], for the caller to check that value another way
	// (the generated JSON Schema).
	Unchecked []string
}

// ErrUnchecked is what a strict decode fails with when the value holds a
// member the generated types cannot check ([Members].Unchecked). The value
// may be valid: check it with the JSON Schema.
var ErrUnchecked = errors.New("cddlrt: a member the generated types cannot check")

// nullAdmitter is implemented by generated unions one of whose variants is
// null.
type nullAdmitter interface{ CDDLAdmitsNull() bool }

// membered is implemented by generated map types.
type membered interface{ CDDLMembers() *Members }

// union is implemented by generated unions: it picks the variant an
// encoded value is, without decoding it.
type union interface {
	CDDLVariant(data []byte, isCBOR bool) (any, error)
}

// validator is implemented by generated types.
type validator interface{ Validate() error }

// DecodeStrictJSON decodes data into v (a pointer to a generated type) and
// checks what the schema requires that a plain decode does not: required
// members are present (a plain decode gives an absent member its zero
// value), closed maps have no other members, null only where the rule
// admits it, a union's value is one of its variants (a union the
// generator made open, keeping unknown variants for readers, is closed
// here, as in the JSON Schema), and v's Validate (ranges, sizes, patterns,
// enumerations, array lengths). Every error is a *ValidationError naming
// the JSON path and the rule, except that a value holding a member the
// generated types cannot check fails with an error wrapping
// [ErrUnchecked].
//
// Null is told apart this way: for a member of a generated map, by the
// rule ([Members].Nullable); for an array element or a map value, by its
// Go type (a pointer or any admits null, as does a generated union with a
// null variant); for the value itself, the same.
func DecodeStrictJSON(data []byte, v any) error { return decodeStrict(jsonCodec, data, v) }

// DecodeStrictCBOR is [DecodeStrictJSON] for CBOR.
func DecodeStrictCBOR(data []byte, v any) error { return decodeStrict(cborCodec, data, v) }

func decodeStrict(c codec, data []byte, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("cddlrt: DecodeStrict needs a non-nil pointer, got %T", v)
	}
	// The common case first: the value decodes, and the walk only checks
	// members. When it does not decode, a second walk that decodes piece
	// by piece finds where.
	if err := c.unmarshal(data, v); err != nil {
		w := walker{c: c, locate: true}
		if werr := w.check(data, rv.Type().Elem(), "", 0, admitsNull(rv.Type().Elem())); werr != nil {
			return werr
		}
		return decodeError(err)
	}
	w := walker{c: c}
	if err := w.check(data, rv.Type().Elem(), "", 0, admitsNull(rv.Type().Elem())); err != nil {
		return err
	}
	if val, ok := v.(validator); ok {
		return val.Validate()
	}
	return nil
}

// decodeError gives a decoding error its path where the decoder told it.
func decodeError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return &ValidationError{Path: te.Field, Msg: fmt.Sprintf("expected %s, but got %s", te.Type, te.Value)}
	}
	var ce *cbor.UnmarshalTypeError
	if errors.As(err, &ce) {
		return &ValidationError{Msg: ce.Error()}
	}
	var ve *ValidationError
	if errors.As(err, &ve) {
		return ve
	}
	return &ValidationError{Msg: err.Error()}
}

const maxCheckDepth = 64

// walker walks an encoded value with the Go type it decodes into. With
// locate, it also decodes each piece that decodes itself, so that an error
// is reported where it is.
type walker struct {
	c      codec
	locate bool
}

// check walks the encoded value raw with the Go type t it decodes into,
// checking the members of every generated map type on the way. A union is
// decoded to learn its variant, whose type the walk goes on with. nullOK
// tells whether the value may be null.
func (w walker) check(raw []byte, t reflect.Type, path string, depth int, nullOK bool) error {
	c := w.c
	if depth > maxCheckDepth {
		return Invalid(path, "", "nested deeper than %d levels", maxCheckDepth)
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if isNull(c, raw) {
		if nullOK {
			return nil
		}
		return Invalid(path, "", "null is not allowed here")
	}
	switch t.Kind() {
	case reflect.Struct:
		if u, ok := reflect.Zero(t).Interface().(union); ok {
			v, err := u.CDDLVariant(raw, !c.json)
			if err != nil {
				return At(path, decodeError(err))
			}
			if v == nil {
				// An unknown variant, which an open union keeps for
				// readers: the schema allows none.
				return Invalid(path, "", "matches none of the variants of %s", t.Name())
			}
			return w.check(raw, reflect.TypeOf(v), path, depth+1, false)
		}
		if t.NumField() > 0 && t.Field(0).Name == "Value" && t.Field(0).Type.Kind() == reflect.Interface {
			// A union of another kind: decode it to find its variant.
			pv := reflect.New(t)
			if err := c.unmarshal(raw, pv.Interface()); err != nil {
				return At(path, decodeError(err))
			}
			variant := pv.Elem().Field(0)
			if variant.IsNil() {
				return Invalid(path, "", "matches none of the variants of %s", t.Name())
			}
			return w.check(raw, variant.Elem().Type(), path, depth+1, false)
		}
		if m, ok := reflect.Zero(t).Interface().(membered); ok {
			if err := w.checkStruct(raw, t, m.CDDLMembers(), path, depth); err != nil {
				return err
			}
		}
		return w.decodeAt(raw, t, path)
	case reflect.Slice:
		nullOK := admitsNull(t.Elem())
		if t.Elem().Kind() == reflect.Uint8 || (!w.locate && nullOK && !walkable(t.Elem()) && !container(t.Elem())) {
			return w.decodeAt(raw, t, path) // nothing to check element by element
		}
		items, ok := elements(c, raw)
		if !ok {
			return nil // not an array: the decode says so
		}
		for i, it := range items {
			if err := w.checkValue(it, t.Elem(), Index(path, i), depth+1, nullOK); err != nil {
				return err
			}
		}
	case reflect.Map:
		nullOK := admitsNull(t.Elem())
		keys, vals := []string{}, map[string][]byte{}
		if c.each(raw, func(k string, v []byte) error { keys = append(keys, k); vals[k] = v; return nil }) != nil {
			return nil
		}
		sort.Strings(keys)
		for _, k := range keys {
			if err := w.checkValue(vals[k], t.Elem(), Join(path, k), depth+1, nullOK); err != nil {
				return err
			}
		}
	default:
		return w.decodeAt(raw, t, path)
	}
	return nil
}

// checkValue checks an element of an array or a value of a map: walked
// when it may hold generated types, else decoded on its own so that a
// wrong type is reported at its index or key.
func (w walker) checkValue(raw []byte, t reflect.Type, path string, depth int, nullOK bool) error {
	if walkable(t) || container(t) {
		return w.check(raw, t, path, depth, nullOK)
	}
	if !nullOK && isNull(w.c, raw) {
		return Invalid(path, "", "null is not allowed here")
	}
	if !w.locate {
		return nil
	}
	if err := w.c.unmarshal(raw, reflect.New(t).Interface()); err != nil {
		return At(path, decodeError(err))
	}
	return nil
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	cborUnmarshaler = reflect.TypeFor[cbor.Unmarshaler]()
)

// decodes reports whether values of t decode themselves (a generated type
// with its own decoder: an enumeration, a map with fixed members).
func decodes(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return p.Implements(jsonUnmarshaler) || p.Implements(cborUnmarshaler)
}

// decodeAt decodes raw into a new value of t when t decodes itself, so
// that what its decoder refuses is reported where it is.
func (w walker) decodeAt(raw []byte, t reflect.Type, path string) error {
	if !w.locate || !decodes(t) {
		return nil
	}
	if err := w.c.unmarshal(raw, reflect.New(t).Interface()); err != nil {
		return At(path, decodeError(err))
	}
	return nil
}

func (w walker) checkStruct(raw []byte, t reflect.Type, m *Members, path string, depth int) error {
	c := w.c
	var present fieldList
	if c.each(raw, func(k string, v []byte) error { present = append(present, field{k, v}); return nil }) != nil {
		return nil // not a map: the decode says so
	}
	var missing []string
	for _, r := range m.Required {
		if _, ok := present.get(r); !ok {
			missing = append(missing, "'"+r+"'")
		}
	}
	if len(missing) > 0 {
		return Invalid(path, m.Rule, "missing members: %s", strings.Join(missing, ", "))
	}
	for _, grp := range m.Together {
		n := 0
		for _, k := range grp {
			if _, ok := present.get(k); ok {
				n++
			}
		}
		if n > 0 && n < len(grp) {
			return Invalid(path, m.Rule, "members '%s' go together: all or none", strings.Join(grp, "', '"))
		}
	}
	for _, k := range m.Unchecked {
		if _, ok := present.get(k); ok {
			return fmt.Errorf("%s: %w", Join(path, k), ErrUnchecked)
		}
	}
	if m.Open {
		// A plain decode (encoding/json) matches member names without
		// regard to case, so an unknown member spelled like a known one
		// would be decoded into it, unchecked: refuse it.
		for _, f := range present {
			k := f.key
			if slices.Contains(m.Known, k) {
				continue
			}
			for _, n := range m.Known {
				if strings.EqualFold(k, n) {
					return Invalid(Join(path, k), m.Rule, "member names are case-sensitive: '%s' is not '%s'", k, n)
				}
			}
		}
	}
	if !m.Open {
		var extra []string
		for _, f := range present {
			k := f.key
			known := false
			for _, n := range m.Known {
				if n == k {
					known = true
					break
				}
			}
			if !known {
				extra = append(extra, "'"+k+"'")
			}
		}
		if len(extra) > 0 {
			sort.Strings(extra)
			return Invalid(path, m.Rule, "members not allowed: %s", strings.Join(extra, ", "))
		}
	}
	for _, k := range m.Known {
		if v, ok := present.get(k); ok && isNull(c, v) && !slices.Contains(m.Nullable, k) {
			return Invalid(Join(path, k), m.Rule, "null is not allowed here")
		}
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "" || name == "-" || !(walkable(f.Type) || container(f.Type)) {
			continue
		}
		if v, ok := present.get(name); ok && !isNull(c, v) {
			if err := w.check(v, f.Type, Join(path, name), depth+1, true); err != nil {
				return err
			}
		}
	}
	return nil
}

// field is one member of an object as read: its name (aliasing the input)
// and raw value.
type field struct {
	key string
	raw []byte
}

// fieldList holds an object's members in order: the objects a decoder
// checks are small, where a slice searched in order costs less than a
// map built per object. A name seen twice keeps its last value, as a
// decode does.
type fieldList []field

func (l fieldList) get(k string) ([]byte, bool) {
	for i := len(l) - 1; i >= 0; i-- {
		if l[i].key == k {
			return l[i].raw, true
		}
	}
	return nil, false
}

// admitsNull reports whether a value of Go type t, as an array element, a
// map value or a whole value, may be null: a pointer or an interface, or
// a generated union with a null variant.
func admitsNull(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Interface:
		return true
	}
	if n, ok := reflect.Zero(t).Interface().(nullAdmitter); ok {
		return n.CDDLAdmitsNull()
	}
	return false
}

// container reports whether t is an array or a map (not a byte string),
// whose elements are checked one by one.
func container(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return (t.Kind() == reflect.Slice && t.Elem().Kind() != reflect.Uint8) || t.Kind() == reflect.Map
}

// walkable reports whether values of t may hold generated map types or
// unions (scalars need no walk).
func walkable(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Interface:
		return true
	case reflect.Slice, reflect.Array, reflect.Map:
		return walkable(t.Elem())
	}
	return decodes(t)
}

func isNull(c codec, raw []byte) bool {
	if c.json {
		return JSONKind(raw) == KindNull
	}
	return CBORKind(raw) == KindNull
}

func elements(c codec, raw []byte) ([][]byte, bool) {
	if c.json {
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return nil, false
		}
		out := make([][]byte, len(items))
		for i, it := range items {
			out[i] = it
		}
		return out, true
	}
	var items []cbor.RawMessage
	if cbor.Unmarshal(raw, &items) != nil {
		return nil, false
	}
	out := make([][]byte, len(items))
	for i, it := range items {
		out[i] = it
	}
	return out, true
}

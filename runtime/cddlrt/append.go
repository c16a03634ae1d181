package cddlrt

import (
	"encoding/json"
	"sort"
	"strconv"
	"unicode/utf8"
)

// The append-style JSON encoders that cddlgen writes for the types of a
// fast union (cddlgen --go-fast) call these. Each writes what
// encoding/json would write for the same value, byte for byte, so that
// an appended value and a marshalled one are the same JSON.

// Appender is a generated type that appends its own JSON (cddlgen
// --go-fast writes AppendJSON for the types a fast union reaches).
type Appender interface {
	AppendJSON(b []byte) ([]byte, error)
}

// JSONAppender is a value of an `any` member that writes its own JSON:
// AppendValue calls AppendJSON instead of encoding/json, whose reflection
// is most of what encoding a small value costs. AppendJSON must append
// exactly one compact, valid JSON value, the one json.Marshal would make
// of the value (that is not checked).
type JSONAppender interface {
	AppendJSON(b []byte) []byte
}

// AppendString appends s as a JSON string, escaped exactly as
// encoding/json escapes it. Plain ASCII is copied as is; anything else
// goes through encoding/json, so escaping (HTML characters, invalid UTF-8,
// U+2028) is exactly its.
func AppendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' || c >= utf8.RuneSelf {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// AppendStrings appends ss as a JSON array of strings (null when nil, as
// encoding/json writes a nil slice).
func AppendStrings(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendString(b, s)
	}
	return append(b, ']')
}

// AppendUint appends n as a JSON number.
func AppendUint(b []byte, n uint64) []byte { return strconv.AppendUint(b, n, 10) }

// AppendInt appends n as a JSON number.
func AppendInt(b []byte, n int64) []byte { return strconv.AppendInt(b, n, 10) }

// AppendBool appends v as JSON true or false.
func AppendBool(b []byte, v bool) []byte { return strconv.AppendBool(b, v) }

// AppendValue appends v's JSON: its own when it is an [Appender] or a
// [JSONAppender], encoding/json's otherwise.
func AppendValue(b []byte, v any) ([]byte, error) {
	switch a := v.(type) {
	case Appender:
		return a.AppendJSON(b)
	case JSONAppender:
		return a.AppendJSON(b), nil
	case string:
		return AppendString(b, a), nil
	case nil:
		return append(b, "null"...), nil
	}
	d, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, d...), nil
}

// AppendExtra appends the members of extra, in key order, each with a
// leading comma (the generated encoders write every member so, and turn
// the first comma into the object's opening brace: see CloseObject).
func AppendExtra(b []byte, extra map[string]any) ([]byte, error) {
	if len(extra) == 0 {
		return b, nil
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var err error
	for _, k := range keys {
		b = append(b, ',')
		b = AppendString(b, k)
		b = append(b, ':')
		if b, err = AppendValue(b, extra[k]); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// CloseObject ends a JSON object whose members were appended from start
// on, each with a leading comma: the first comma becomes the opening
// brace, and an object with no member is written {}.
func CloseObject(b []byte, start int) []byte {
	if len(b) == start {
		return append(b, "{}"...)
	}
	b[start] = '{'
	return append(b, '}')
}

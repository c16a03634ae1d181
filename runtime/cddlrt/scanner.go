package cddlrt

import (
	"bytes"
	"math"
	"unicode/utf8"
	"unsafe"
)

// Scanner reads JSON in the exact layout the generated append-style
// encoders write (compact, members in schema order, a comma before every
// member but an object's first), for the generated routing decoders
// (cddlgen --go-fast). Each method consumes what it reads and reports
// false, consuming nothing, when the input does not continue as it
// expects; the generated decoder then falls back to encoding/json. It
// does not validate what it skips.
type Scanner struct {
	// B is the input.
	B []byte
	// I is the offset of the next byte to read.
	I int
}

// Lit consumes s if the input continues with it.
func (p *Scanner) Lit(s string) bool {
	if len(p.B)-p.I < len(s) || string(p.B[p.I:p.I+len(s)]) != s {
		return false
	}
	p.I += len(s)
	return true
}

// Has reports whether the input continues with s, without consuming it.
func (p *Scanner) Has(s string) bool {
	return len(p.B)-p.I >= len(s) && string(p.B[p.I:p.I+len(s)]) == s
}

// Member consumes the key of member name ("name":), preceded by a comma
// unless *first, which it then sets false. name must need no escaping.
func (p *Scanner) Member(name string, first *bool) bool {
	i := p.I
	if !*first {
		if i >= len(p.B) || p.B[i] != ',' {
			return false
		}
		i++
	}
	n := len(name)
	if len(p.B)-i < n+3 || p.B[i] != '"' || string(p.B[i+1:i+1+n]) != name || p.B[i+1+n] != '"' || p.B[i+2+n] != ':' {
		return false
	}
	p.I = i + n + 3
	*first = false
	return true
}

// Peek reports whether the key of member name comes next, as Member
// would consume it, without consuming it.
func (p *Scanner) Peek(name string, first bool) bool {
	q := *p
	return q.Member(name, &first)
}

// Str consumes a JSON string with no escape in it. The string it returns
// shares the input's memory, so reading allocates for none of the
// strings: the input must not be modified while the string is used.
func (p *Scanner) Str() (string, bool) {
	if p.I >= len(p.B) || p.B[p.I] != '"' {
		return "", false
	}
	start := p.I + 1
	end := bytes.IndexByte(p.B[start:], '"')
	if end < 0 {
		return "", false
	}
	s := p.B[start : start+end]
	ascii := true
	for _, c := range s {
		if c == '\\' || c < 0x20 {
			return "", false
		}
		ascii = ascii && c < utf8.RuneSelf
	}
	if !ascii && !utf8.Valid(s) {
		return "", false // encoding/json reads invalid bytes as U+FFFD
	}
	p.I = start + end + 1
	if len(s) == 0 {
		return "", true
	}
	return unsafe.String(&s[0], len(s)), true
}

// Strs consumes a JSON array of strings, each read as Str reads it, or
// null (nil).
func (p *Scanner) Strs() ([]string, bool) {
	if p.Lit("null") {
		return nil, true
	}
	save := p.I
	if !p.Lit("[") {
		return nil, false
	}
	out := []string{}
	for !p.Lit("]") {
		if len(out) > 0 && !p.Lit(",") {
			p.I = save
			return nil, false
		}
		s, ok := p.Str()
		if !ok {
			p.I = save
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// Uint consumes an unsigned integer: digits, no leading zero but for 0
// itself, within 64 bits.
func (p *Scanner) Uint() (uint64, bool) {
	j := p.I
	var n uint64
	for j < len(p.B) && j-p.I < 19 && isDigit(p.B[j]) { // 19 digits cannot overflow
		n = n*10 + uint64(p.B[j]-'0')
		j++
	}
	if j < len(p.B) && isDigit(p.B[j]) { // a 20th digit may
		d := uint64(p.B[j] - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, false
		}
		n = n*10 + d
		j++
		if j < len(p.B) && isDigit(p.B[j]) {
			return 0, false
		}
	}
	if j == p.I || p.B[p.I] == '0' && j-p.I > 1 {
		return 0, false // no digit, or a leading zero (not JSON)
	}
	if j < len(p.B) && (p.B[j] == '.' || p.B[j] == 'e' || p.B[j] == 'E') {
		return 0, false // a fraction or an exponent: not an integer as written
	}
	p.I = j
	return n, true
}

// Int consumes a signed integer within 64 bits.
func (p *Scanner) Int() (int64, bool) {
	save := p.I
	neg := p.Lit("-")
	n, ok := p.Uint()
	switch {
	case !ok:
	case !neg && n <= math.MaxInt64:
		return int64(n), true
	case neg && n <= 1<<63:
		return int64(-n), true // -(1<<63) wraps to itself
	}
	p.I = save
	return 0, false
}

// Bool consumes true or false.
func (p *Scanner) Bool() (bool, bool) {
	switch {
	case p.Lit("true"):
		return true, true
	case p.Lit("false"):
		return false, true
	}
	return false, false
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

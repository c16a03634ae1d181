package cddlrt

import (
	"encoding/json"
	"errors"
	"unicode/utf8"
	"unsafe"
)

// errScan reports JSON the member scanner cannot read.
var errScan = errors.New("cddlrt: malformed JSON object")

// EachMember calls fn with the key and raw value of every member of the
// JSON object in data, in order, reading it once without decoding the
// values; keys read as encoding/json reads them, but matched by the caller
// exactly. The key aliases data: fn must copy it (strings.Clone) to keep
// it past its call. It returns fn's error, or an error for anything but a
// well-formed object.
func EachMember(data []byte, fn func(key string, raw []byte) error) error {
	return eachMember(data, fn)
}

// eachMember calls fn with the key and raw value of every member of the
// JSON object in data, in order, without decoding the values: reading one
// member or listing unknown ones costs one pass and no allocation for the
// members themselves. It returns errScan for anything but a well-formed
// object (it checks structure, not every detail of numbers and escapes,
// which the decoders that follow check).
func eachMember(data []byte, fn func(key string, raw []byte) error) error {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return errScan
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return trailing(data, i+1)
	}
	for {
		if i >= len(data) || data[i] != '"' {
			return errScan
		}
		end, escaped := scanString(data, i)
		if end < 0 {
			return errScan
		}
		// The name aliases data (no copy): fn must copy what it keeps.
		key := unsafe.String(unsafe.SliceData(data[i+1:end-1]), end-1-(i+1))
		if escaped || !utf8.ValidString(key) {
			// As encoding/json reads it (escapes decoded, bad UTF-8 replaced).
			if err := json.Unmarshal(data[i:end], &key); err != nil {
				return errScan
			}
		}
		i = skipSpace(data, end)
		if i >= len(data) || data[i] != ':' {
			return errScan
		}
		i = skipSpace(data, i+1)
		vend := skipValue(data, i, 0)
		if vend < 0 {
			return errScan
		}
		if err := fn(key, data[i:vend]); err != nil {
			return err
		}
		i = skipSpace(data, vend)
		if i >= len(data) {
			return errScan
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return trailing(data, i+1)
		default:
			return errScan
		}
	}
}

func trailing(data []byte, i int) error {
	if skipSpace(data, i) != len(data) {
		return errScan
	}
	return nil
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// scanString returns the index after the string starting at data[i] (a
// quote), and whether it has escapes; -1 when it is unterminated.
func scanString(data []byte, i int) (int, bool) {
	escaped := false
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			return j + 1, escaped
		}
	}
	return -1, false
}

// maxScanDepth bounds nesting, like encoding/json's own limit.
const maxScanDepth = 10000

// skipValue returns the index after the JSON value starting at data[i],
// or -1.
func skipValue(data []byte, i, depth int) int {
	if i >= len(data) || depth > maxScanDepth {
		return -1
	}
	switch c := data[i]; {
	case c == '"':
		end, _ := scanString(data, i)
		return end
	case c == '{' || c == '[':
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		i = skipSpace(data, i+1)
		if i < len(data) && data[i] == closer {
			return i + 1
		}
		for {
			if c == '{' {
				if i >= len(data) || data[i] != '"' {
					return -1
				}
				end, _ := scanString(data, i)
				if end < 0 {
					return -1
				}
				i = skipSpace(data, end)
				if i >= len(data) || data[i] != ':' {
					return -1
				}
				i = skipSpace(data, i+1)
			}
			i = skipValue(data, i, depth+1)
			if i < 0 {
				return -1
			}
			i = skipSpace(data, i)
			if i >= len(data) {
				return -1
			}
			if data[i] == closer {
				return i + 1
			}
			if data[i] != ',' {
				return -1
			}
			i = skipSpace(data, i+1)
		}
	default:
		// A number, true, false or null: up to the next delimiter.
		j := i
		for j < len(data) {
			switch data[j] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				if j == i {
					return -1
				}
				return j
			}
			j++
		}
		if j == i {
			return -1
		}
		return j
	}
}

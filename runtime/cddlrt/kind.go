package cddlrt

import "fmt"

// Kind is the kind of an encoded value, which tells apart the variants of
// a union whose alternatives are of different kinds (`int / text`,
// `text / {...} / [...]`).
type Kind uint8

// The kinds of values. JSON has no byte strings (they travel as text), and
// tells an integer from a float by its spelling.
const (
	KindInvalid Kind = iota
	KindNull
	KindBool
	KindInt
	KindFloat
	KindText
	KindBytes
	KindArray
	KindMap
)

var kindNames = [...]string{"invalid", "null", "bool", "int", "float", "text", "bytes", "array", "map"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// JSONKind returns the kind of a JSON value from its first bytes (and, for
// a number, its spelling): it does not check the rest.
func JSONKind(data []byte) Kind {
	i := skipSpace(data, 0)
	if i >= len(data) {
		return KindInvalid
	}
	switch c := data[i]; {
	case c == 'n':
		return KindNull
	case c == 't' || c == 'f':
		return KindBool
	case c == '"':
		return KindText
	case c == '[':
		return KindArray
	case c == '{':
		return KindMap
	case c == '-' || (c >= '0' && c <= '9'):
		for _, d := range data[i:] {
			switch d {
			case '.', 'e', 'E':
				return KindFloat
			case ' ', '\t', '\r', '\n', ',', ']', '}':
				return KindInt
			}
		}
		return KindInt
	}
	return KindInvalid
}

// CBORKind returns the kind of a CBOR value from its initial byte (tags
// are looked through).
func CBORKind(data []byte) Kind {
	for i := 0; i < len(data); {
		major, info := data[i]>>5, data[i]&0x1f
		switch major {
		case 0, 1:
			return KindInt
		case 2:
			return KindBytes
		case 3:
			return KindText
		case 4:
			return KindArray
		case 5:
			return KindMap
		case 6: // a tag: the kind of what it tags
			switch {
			case info < 24:
				i++
			case info <= 27:
				i += 1 + 1<<(info-24)
			default:
				return KindInvalid
			}
			continue
		default:
			switch info {
			case 20, 21:
				return KindBool
			case 22, 23:
				return KindNull
			case 25, 26, 27:
				return KindFloat
			}
			return KindInvalid
		}
	}
	return KindInvalid
}

// WrongKind is the error of a union told apart by kind that has no
// variant of the kind received.
func WrongKind(union string, k Kind) error {
	return fmt.Errorf("%s: no variant is a %s value", union, k)
}

// Package termsafe makes text from the network safe to print on a
// terminal: nothing in it can move the cursor, clear the screen, set the
// window title or the clipboard (ESC, CSI and OSC sequences), reorder what
// is shown (bidirectional overrides), or forge a line of its own.
package termsafe

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Continuation starts every line after the first of a value that holds
// newlines, so that no line of a value can pass for a line of the
// program's own.
const Continuation = "\n             | "

// String returns s with every control character escaped: C0 controls
// (tab kept) and DEL as \xNN, C1 controls (U+0080-U+009F) and the
// bidirectional controls (U+061C, U+200E, U+200F, U+202A-U+202E,
// U+2066-U+2069) as \uNNNN, bytes that are not UTF-8 as \xNN; a newline
// becomes Continuation.
func String(s string) string {
	if safe(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(Continuation)
		case r == '\r':
			b.WriteString(`\r`)
		case unsafe(r):
			if r < 0x80 {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// JSON returns a JSON text with every raw control character escaped the
// JSON way (\u00XX): valid JSON stays valid and means the same, since
// these characters may only appear inside strings, where the escape
// stands for the character itself. Bytes that are not UTF-8 become
// U+FFFD's escape.
func JSON(b []byte) []byte {
	if safe(string(b)) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			out = append(out, `\ufffd`...)
		case r == '\t':
			out = append(out, `\t`...) // raw tabs are not valid in JSON strings either
		case r == '\n' || unsafe(r) || r == '\r':
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, b[i:i+n]...)
		}
		i += n
	}
	return out
}

// safe reports whether s needs no escaping: the common case, checked
// without allocating.
func safe(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f || c >= 0x80 {
			if c == '\t' {
				continue
			}
			if c >= 0x80 {
				return safeUTF8(s[i:])
			}
			return false
		}
	}
	return true
}

func safeUTF8(s string) bool {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n == 1 {
				return false
			}
		}
		if r == '\n' || r == '\r' || unsafe(r) {
			return false
		}
	}
	return true
}

// unsafe reports whether r is a control character a terminal acts on
// (other than tab, newline and carriage return, handled by the callers).
func unsafe(r rune) bool {
	switch {
	case r < 0x20 && r != '\t' && r != '\n' && r != '\r':
		return true
	case r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

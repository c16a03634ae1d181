package cddl

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"
)

type tokKind int

const (
	tEOF tokKind = iota
	tIdent
	tValue // text, bytes or number literal; see token.val
	tAssign
	tTypeAlt  // /=
	tGroupAlt // //=
	tSlash
	tDSlash
	tLParen
	tRParen
	tLBrace
	tRBrace
	tLBrack
	tRBrack
	tLAngle
	tRAngle
	tComma
	tColon
	tArrow // =>
	tCaret
	tQuest
	tStar
	tPlus
	tTilde
	tAmp
	tHash     // # with optional major and minor, see token.major/minor
	tRange    // ..
	tRangeEx  // ...
	tCtl      // .name
	tNegative // a lone '-' that does not start a number (an error)
)

var tokNames = map[tokKind]string{
	tEOF: "end of file", tIdent: "name", tValue: "literal", tAssign: "'='",
	tTypeAlt: "'/='", tGroupAlt: "'//='", tSlash: "'/'", tDSlash: "'//'",
	tLParen: "'('", tRParen: "')'", tLBrace: "'{'", tRBrace: "'}'",
	tLBrack: "'['", tRBrack: "']'", tLAngle: "'<'", tRAngle: "'>'",
	tComma: "','", tColon: "':'", tArrow: "'=>'", tCaret: "'^'",
	tQuest: "'?'", tStar: "'*'", tPlus: "'+'", tTilde: "'~'", tAmp: "'&'",
	tHash: "'#'", tRange: "'..'", tRangeEx: "'...'", tCtl: "control operator",
	tNegative: "'-'",
}

func (k tokKind) String() string { return tokNames[k] }

type token struct {
	kind     tokKind
	pos      Pos
	text     string // the source text of the token
	val      *Value // tValue
	major    int    // tHash: -1 for a bare '#'
	minor    *big.Int
	minorTyp bool   // tHash: `#n.<type>` follows (RFC 9682); the parser reads the type
	doc      string // the comment block directly above this token
	trailing string // a comment after this token on the same line
}

// lexer turns CDDL source into tokens. It collects every token up front so
// the parser can look ahead and backtrack freely.
type lexer struct {
	src  string
	file string
	off  int
	line int
	col  int
	errs ErrorList
}

type pendingComment struct {
	line       int
	text       string
	standalone bool // nothing but white space before it on its line
}

func lex(file string, src []byte) ([]token, ErrorList) {
	lx := &lexer{src: string(src), file: file, line: 1, col: 1}
	toks := make([]token, 0, len(src)/6+16) // about one token per six bytes of CDDL
	prevLine := 0
	for {
		comments := lx.skipSpace(prevLine)
		// A comment on the same line as the previous token trails it.
		var docBlock []pendingComment
		for _, c := range comments {
			if !c.standalone {
				if len(toks) > 0 && toks[len(toks)-1].trailing == "" && c.line == prevLine {
					toks[len(toks)-1].trailing = c.text
				}
				docBlock = nil
				continue
			}
			if len(docBlock) > 0 && docBlock[len(docBlock)-1].line != c.line-1 {
				docBlock = nil
			}
			docBlock = append(docBlock, c)
		}
		tok := lx.next()
		if len(docBlock) > 0 && docBlock[len(docBlock)-1].line == tok.pos.Line-1 {
			tok.doc = joinDoc(docBlock)
		}
		toks = append(toks, tok)
		if tok.kind == tEOF {
			return toks, lx.errs
		}
		prevLine = lx.line // the line the token ends on
	}
}

// joinDoc turns a comment block into documentation text: the leading ';' and
// one space are removed, and decorative rule lines (only '=', '-', '*', '#')
// are dropped.
func joinDoc(block []pendingComment) string {
	var lines []string
	for _, c := range block {
		t := strings.TrimRight(c.text, " \t\r")
		if t != "" && strings.Trim(t, "=-*#~_ ") == "" {
			continue
		}
		lines = append(lines, t)
	}
	for len(lines) > 0 && lines[0] == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return strings.Join(lines, "\n")
}

func (lx *lexer) pos() Pos { return Pos{Line: lx.line, Col: lx.col, Offset: lx.off} }

func (lx *lexer) errorf(p Pos, format string, args ...any) {
	if len(lx.errs) < 50 {
		lx.errs = append(lx.errs, &Error{File: lx.file, Pos: p, Msg: fmt.Sprintf(format, args...)})
	}
}

func (lx *lexer) peek(n int) byte {
	if lx.off+n < len(lx.src) {
		return lx.src[lx.off+n]
	}
	return 0
}

func (lx *lexer) advance(n int) {
	for i := 0; i < n && lx.off < len(lx.src); i++ {
		if lx.src[lx.off] == '\n' {
			lx.line++
			lx.col = 1
		} else {
			lx.col++
		}
		lx.off++
	}
}

// skipSpace skips white space and comments, returning the comments.
func (lx *lexer) skipSpace(prevLine int) []pendingComment {
	var out []pendingComment
	lineHasToken := prevLine == lx.line
	for lx.off < len(lx.src) {
		c := lx.src[lx.off]
		switch c {
		case ' ', '\t', '\r':
			lx.advance(1)
		case '\n':
			lx.advance(1)
			lineHasToken = false
		case ';':
			start := lx.off + 1
			end := strings.IndexByte(lx.src[start:], '\n')
			if end < 0 {
				end = len(lx.src)
			} else {
				end += start
			}
			text := lx.src[start:end]
			text = strings.TrimPrefix(text, " ")
			out = append(out, pendingComment{line: lx.line, text: text, standalone: !lineHasToken})
			lx.advance(end - lx.off)
		default:
			if c >= 0x80 {
				r, _ := utf8.DecodeRuneInString(lx.src[lx.off:])
				if r == '\u00a0' || r == '\ufeff' { // no-break space, byte order mark
					lx.advance(utf8.RuneLen(r))
					continue
				}
			}
			return out
		}
	}
	return out
}

func isAlpha(c byte) bool  { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isEAlpha(c byte) bool { return isAlpha(c) || c == '@' || c == '_' || c == '$' }
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
func isHex(c byte) bool    { return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func (lx *lexer) next() token {
	p := lx.pos()
	if lx.off >= len(lx.src) {
		return token{kind: tEOF, pos: p}
	}
	c := lx.src[lx.off]
	simple := func(k tokKind, n int) token {
		t := token{kind: k, pos: p, text: lx.src[lx.off : lx.off+n]}
		lx.advance(n)
		return t
	}
	switch {
	case c == 'h' && lx.peek(1) == '\'':
		return lx.bytesLit(p, 1, "h")
	case c == 'b' && lx.peek(1) == '6' && lx.peek(2) == '4' && lx.peek(3) == '\'':
		return lx.bytesLit(p, 3, "b64")
	case isEAlpha(c):
		return lx.ident(p)
	case isDigit(c):
		return lx.number(p)
	case c == '-':
		if isDigit(lx.peek(1)) {
			return lx.number(p)
		}
		return simple(tNegative, 1)
	case c == '"':
		return lx.text(p)
	case c == '\'':
		return lx.bytesLit(p, 0, "")
	}
	switch c {
	case '=':
		if lx.peek(1) == '>' {
			return simple(tArrow, 2)
		}
		return simple(tAssign, 1)
	case '/':
		if lx.peek(1) == '/' {
			if lx.peek(2) == '=' {
				return simple(tGroupAlt, 3)
			}
			return simple(tDSlash, 2)
		}
		if lx.peek(1) == '=' {
			return simple(tTypeAlt, 2)
		}
		return simple(tSlash, 1)
	case '(':
		return simple(tLParen, 1)
	case ')':
		return simple(tRParen, 1)
	case '{':
		return simple(tLBrace, 1)
	case '}':
		return simple(tRBrace, 1)
	case '[':
		return simple(tLBrack, 1)
	case ']':
		return simple(tRBrack, 1)
	case '<':
		return simple(tLAngle, 1)
	case '>':
		return simple(tRAngle, 1)
	case ',':
		return simple(tComma, 1)
	case ':':
		return simple(tColon, 1)
	case '^':
		return simple(tCaret, 1)
	case '?':
		return simple(tQuest, 1)
	case '*':
		return simple(tStar, 1)
	case '+':
		return simple(tPlus, 1)
	case '~':
		return simple(tTilde, 1)
	case '&':
		return simple(tAmp, 1)
	case '#':
		return lx.hash(p)
	case '.':
		if lx.peek(1) == '.' {
			if lx.peek(2) == '.' {
				return simple(tRangeEx, 3)
			}
			return simple(tRange, 2)
		}
		if isEAlpha(lx.peek(1)) {
			lx.advance(1)
			id := lx.ident(p)
			id.kind = tCtl
			id.text = "." + id.text
			return id
		}
	}
	r, size := utf8.DecodeRuneInString(lx.src[lx.off:])
	lx.errorf(p, "unexpected character %q", r)
	lx.advance(size)
	return lx.next()
}

func (lx *lexer) ident(p Pos) token {
	start := lx.off
	i := lx.off + 1
	for i < len(lx.src) {
		c := lx.src[i]
		if isEAlpha(c) || isDigit(c) {
			i++
			continue
		}
		if c == '-' || c == '.' {
			j := i
			for j < len(lx.src) && (lx.src[j] == '-' || lx.src[j] == '.') {
				j++
			}
			if j < len(lx.src) && (isEAlpha(lx.src[j]) || isDigit(lx.src[j])) {
				i = j
				continue
			}
		}
		break
	}
	lx.advance(i - start)
	return token{kind: tIdent, pos: p, text: lx.src[start:i]}
}

// number lexes an integer or float: decimal, 0x hex, 0b binary, hex floats.
func (lx *lexer) number(p Pos) token {
	start := lx.off
	i := lx.off
	if lx.src[i] == '-' {
		i++
	}
	isFloat := false
	if lx.src[i] == '0' && i+1 < len(lx.src) && (lx.src[i+1] == 'x' || lx.src[i+1] == 'X') {
		i += 2
		for i < len(lx.src) && isHex(lx.src[i]) {
			i++
		}
		if i < len(lx.src) && lx.src[i] == '.' && i+1 < len(lx.src) && isHex(lx.src[i+1]) {
			isFloat = true
			i++
			for i < len(lx.src) && isHex(lx.src[i]) {
				i++
			}
		}
		if i < len(lx.src) && (lx.src[i] == 'p' || lx.src[i] == 'P') {
			isFloat = true
			i = lx.exponent(i + 1)
		}
	} else if lx.src[i] == '0' && i+1 < len(lx.src) && (lx.src[i+1] == 'b' || lx.src[i+1] == 'B') {
		i += 2
		for i < len(lx.src) && (lx.src[i] == '0' || lx.src[i] == '1') {
			i++
		}
	} else {
		for i < len(lx.src) && isDigit(lx.src[i]) {
			i++
		}
		if i+1 < len(lx.src) && lx.src[i] == '.' && isDigit(lx.src[i+1]) {
			isFloat = true
			i++
			for i < len(lx.src) && isDigit(lx.src[i]) {
				i++
			}
		}
		if i < len(lx.src) && (lx.src[i] == 'e' || lx.src[i] == 'E') {
			j := i + 1
			if j < len(lx.src) && (lx.src[j] == '+' || lx.src[j] == '-') {
				j++
			}
			if j < len(lx.src) && isDigit(lx.src[j]) {
				isFloat = true
				i = lx.exponent(i + 1)
			}
		}
	}
	raw := lx.src[start:i]
	lx.advance(i - start)
	v := &Value{Pos: p, Raw: raw}
	if isFloat {
		v.Kind = ValueFloat
		f, err := strconv.ParseFloat(raw, 64)
		if err != nil && !strings.Contains(err.Error(), "range") {
			lx.errorf(p, "invalid number %q", raw)
		}
		v.Float = f
	} else {
		v.Kind = ValueInt
		n, ok := new(big.Int).SetString(raw, 0)
		if !ok {
			lx.errorf(p, "invalid number %q", raw)
			n = new(big.Int)
		}
		v.Int = n
	}
	return token{kind: tValue, pos: p, text: raw, val: v}
}

func (lx *lexer) exponent(i int) int {
	if i < len(lx.src) && (lx.src[i] == '+' || lx.src[i] == '-') {
		i++
	}
	for i < len(lx.src) && isDigit(lx.src[i]) {
		i++
	}
	return i
}

// text lexes a "..." string, decoding the escapes of RFC 8610 and RFC 9682
// (\" \\ \/ \b \f \n \r \t \uXXXX \u{X...}).
func (lx *lexer) text(p Pos) token {
	start := lx.off
	i := lx.off + 1
	var b strings.Builder
	for {
		if i >= len(lx.src) || lx.src[i] == '\n' {
			lx.errorf(p, "unterminated text string")
			lx.advance(i - start)
			return token{kind: tValue, pos: p, text: lx.src[start:i], val: &Value{Pos: p, Kind: ValueText, Text: b.String(), Raw: lx.src[start:i]}}
		}
		c := lx.src[i]
		if c == '"' {
			i++
			break
		}
		if c == '\\' {
			n, ok := decodeEscape(lx.src, i, &b)
			if !ok {
				lx.errorf(Pos{Line: p.Line, Col: p.Col + (i - start), Offset: i}, "invalid escape in text string")
			}
			i = n
			continue
		}
		b.WriteByte(c)
		i++
	}
	raw := lx.src[start:i]
	lx.advance(i - start)
	return token{kind: tValue, pos: p, text: raw, val: &Value{Pos: p, Kind: ValueText, Text: b.String(), Raw: raw}}
}

// decodeEscape decodes the escape at src[i] ('\\') into b and returns the
// index after it.
func decodeEscape(src string, i int, b *strings.Builder) (int, bool) {
	if i+1 >= len(src) {
		return i + 1, false
	}
	switch e := src[i+1]; e {
	case 'b':
		b.WriteByte('\b')
	case 'f':
		b.WriteByte('\f')
	case 'n':
		b.WriteByte('\n')
	case 'r':
		b.WriteByte('\r')
	case 't':
		b.WriteByte('\t')
	case 'u':
		j := i + 2
		if j < len(src) && src[j] == '{' {
			end := strings.IndexByte(src[j:], '}')
			if end < 0 {
				return j, false
			}
			n, err := strconv.ParseUint(src[j+1:j+end], 16, 32)
			if err != nil || n > utf8.MaxRune {
				return j + end + 1, false
			}
			b.WriteRune(rune(n))
			return j + end + 1, true
		}
		if j+4 > len(src) {
			return len(src), false
		}
		n, err := strconv.ParseUint(src[j:j+4], 16, 32)
		if err != nil {
			return j + 4, false
		}
		r := rune(n)
		j += 4
		if r >= 0xd800 && r < 0xdc00 && j+6 <= len(src) && src[j] == '\\' && src[j+1] == 'u' {
			if lo, err := strconv.ParseUint(src[j+2:j+6], 16, 32); err == nil && lo >= 0xdc00 && lo < 0xe000 {
				r = 0x10000 + (r-0xd800)<<10 + (rune(lo) - 0xdc00)
				j += 6
			}
		}
		b.WriteRune(r)
		return j, true
	default:
		r, size := utf8.DecodeRuneInString(src[i+1:])
		b.WriteRune(r)
		return i + 1 + size, true
	}
	return i + 2, true
}

// bytesLit lexes h'..', b64'..' or '..' starting at the current offset,
// with qualLen bytes of qualifier before the quote.
func (lx *lexer) bytesLit(p Pos, qualLen int, qual string) token {
	start := lx.off
	i := lx.off + qualLen + 1
	var b strings.Builder
	closed := false
	for i < len(lx.src) {
		c := lx.src[i]
		if c == '\'' {
			closed = true
			i++
			break
		}
		if c == '\\' {
			n, _ := decodeEscape(lx.src, i, &b)
			i = n
			continue
		}
		b.WriteByte(c)
		i++
	}
	raw := lx.src[start:i]
	lx.advance(i - start)
	if !closed {
		lx.errorf(p, "unterminated byte string")
	}
	v := &Value{Pos: p, Kind: ValueBytes, Raw: raw}
	body := b.String()
	switch qual {
	case "h":
		clean := stripHexComments(body)
		d, err := hex.DecodeString(clean)
		if err != nil {
			lx.errorf(p, "invalid hex byte string: %v", err)
		}
		v.Bytes = d
	case "b64":
		clean := strings.Map(func(r rune) rune {
			if r == ' ' || r == '\t' || r == '\n' || r == '\r' {
				return -1
			}
			return r
		}, body)
		d, err := decodeBase64(clean)
		if err != nil {
			lx.errorf(p, "invalid base64 byte string")
		}
		v.Bytes = d
	default:
		v.Bytes = []byte(body)
	}
	return token{kind: tValue, pos: p, text: raw, val: v}
}

// stripHexComments removes white space and '#' comments (to end of line)
// from the body of an h” literal (RFC 9682 section 2.1).
func stripHexComments(s string) string {
	var b strings.Builder
	inComment := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inComment:
			if c == '\n' {
				inComment = false
			}
		case c == '#':
			inComment = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func decodeBase64(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if d, err := enc.DecodeString(s); err == nil {
			return d, nil
		}
	}
	return nil, fmt.Errorf("not base64")
}

// hash lexes '#', '#n' or '#n.m' (no white space inside).
func (lx *lexer) hash(p Pos) token {
	start := lx.off
	lx.advance(1)
	t := token{kind: tHash, pos: p, major: -1}
	if isDigit(lx.peek(0)) {
		t.major = int(lx.peek(0) - '0')
		lx.advance(1)
		if lx.peek(0) == '.' && lx.peek(1) == '<' {
			lx.advance(1)
			t.minorTyp = true
		} else if lx.peek(0) == '.' && isDigit(lx.peek(1)) {
			lx.advance(1)
			s := lx.off
			for isHex(lx.peek(0)) || lx.peek(0) == 'x' || lx.peek(0) == 'b' {
				lx.advance(1)
			}
			n, ok := new(big.Int).SetString(lx.src[s:lx.off], 0)
			if !ok {
				lx.errorf(p, "invalid number after '#%d.'", t.major)
				n = new(big.Int)
			}
			t.minor = n
		}
	}
	t.text = lx.src[start:lx.off]
	return t
}

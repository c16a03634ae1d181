package cddl

import (
	"fmt"
	"strings"
)

// maxDepth bounds nesting so hostile input cannot exhaust the stack.
const maxDepth = 500

// Parse parses CDDL source. file names the source in positions and errors.
// On error it returns the rules it could parse and an [ErrorList] with every
// problem found; it never panics on any input.
func Parse(file string, src []byte) (*Schema, error) {
	toks, errs := lex(file, src)
	p := &parser{toks: toks, file: file, errs: errs}
	s := &Schema{File: file}
	for p.cur().kind != tEOF {
		r, err := p.rule()
		if err != nil {
			p.errs = append(p.errs, err)
			p.recover()
			continue
		}
		s.Rules = append(s.Rules, r)
	}
	if len(s.Rules) == 0 && len(p.errs) == 0 {
		p.errs = append(p.errs, &Error{File: file, Pos: p.cur().pos, Msg: "a CDDL file needs at least one rule"})
	}
	return s, p.errs.err()
}

type parser struct {
	toks  []token
	i     int
	file  string
	errs  ErrorList
	depth int
}

func (p *parser) cur() *token { return &p.toks[p.i] }

func (p *parser) peekKind(n int) tokKind {
	if p.i+n < len(p.toks) {
		return p.toks[p.i+n].kind
	}
	return tEOF
}

func (p *parser) advance() *token {
	t := &p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

// prev is the last token consumed.
func (p *parser) prev() *token {
	if p.i == 0 {
		return &p.toks[0]
	}
	return &p.toks[p.i-1]
}

func (p *parser) errAt(pos Pos, format string, args ...any) *Error {
	return &Error{File: p.file, Pos: pos, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) unexpected(what string) *Error {
	t := p.cur()
	found := t.kind.String()
	if t.kind != tEOF && t.text != "" {
		found = fmt.Sprintf("%q", t.text)
	}
	return p.errAt(t.pos, "expected %s, found %s", what, found)
}

func (p *parser) expect(k tokKind, what string) (*token, *Error) {
	if p.cur().kind != k {
		return nil, p.unexpected(what)
	}
	return p.advance(), nil
}

// recover skips to the start of the next rule after an error.
func (p *parser) recover() {
	p.advance()
	for p.cur().kind != tEOF {
		if p.cur().kind == tIdent && p.cur().pos.Col == 1 {
			return
		}
		if p.cur().kind == tIdent {
			switch p.peekKind(1) {
			case tAssign, tTypeAlt, tGroupAlt:
				return
			}
		}
		p.advance()
	}
}

func (p *parser) enter() *Error {
	p.depth++
	if p.depth > maxDepth {
		return p.errAt(p.cur().pos, "nesting deeper than %d levels", maxDepth)
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

func (p *parser) rule() (*Rule, *Error) {
	p.depth = 0
	if t := p.cur(); t.kind == tValue && t.val != nil && t.val.Kind == ValueText {
		return nil, p.errAt(t.pos, "a rule name must be an identifier, not a text string: write %s, without quotes", t.val.Text)
	}
	name, err := p.expect(tIdent, "a rule name")
	if err != nil {
		return nil, err
	}
	r := &Rule{Pos: name.pos, Name: name.text, Doc: name.doc}
	if p.cur().kind == tLAngle {
		p.advance()
		for {
			id, err := p.expect(tIdent, "a generic parameter name")
			if err != nil {
				return nil, err
			}
			r.Params = append(r.Params, id.text)
			if p.cur().kind == tComma {
				p.advance()
				continue
			}
			if _, err := p.expect(tRAngle, "',' or '>'"); err != nil {
				return nil, err
			}
			break
		}
	}
	switch p.cur().kind {
	case tAssign:
		r.Assign = AssignDefine
	case tTypeAlt:
		r.Assign = AssignTypeChoice
	case tGroupAlt:
		r.Assign = AssignGroupChoice
	default:
		return nil, p.unexpected("'=', '/=' or '//=' after rule name " + name.text)
	}
	assign := p.advance()
	rhsStart := p.i
	e, err := p.groupEntry()
	if err != nil {
		return nil, err
	}
	if p.cur().kind == tDSlash {
		// Lenient: a group choice at the top of a rule without parentheses
		// (`a = b // c`), read as `a = (b // c)`.
		g := &Group{Pos: e.Pos, Choices: []*GroupChoice{{Pos: e.Pos, Entries: []*GroupEntry{e}}}}
		for p.cur().kind == tDSlash {
			p.advance()
			alt, err := p.groupEntry()
			if err != nil {
				return nil, err
			}
			g.Choices = append(g.Choices, &GroupChoice{Pos: alt.Pos, Entries: []*GroupEntry{alt}})
		}
		e = &GroupEntry{Pos: e.Pos, Group: g}
	}
	r.Entry = e
	r.rhs = p.tokenText(rhsStart, p.i)
	if e.Occur == nil && e.Key == nil && e.Type != nil {
		r.Type = e.Type
	}
	if r.Assign == AssignTypeChoice && r.Type == nil {
		return nil, p.errAt(assign.pos, "'/=' adds type alternatives, but a group entry follows")
	}
	if r.Doc == "" {
		r.Doc = p.prev().trailing
	}
	return r, nil
}

// tokenText is the text of tokens [from, to) joined by single spaces: a
// rule's right-hand side with layout and comments normalised away.
func (p *parser) tokenText(from, to int) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		if i > from {
			b.WriteByte(' ')
		}
		b.WriteString(p.toks[i].text)
	}
	return b.String()
}

// occurrence parses an optional occurrence indicator.
func (p *parser) occurrence() (*Occurrence, *Error) {
	t := p.cur()
	switch t.kind {
	case tQuest:
		p.advance()
		return &Occurrence{Pos: t.pos, Min: 0, Max: 1}, nil
	case tPlus:
		p.advance()
		return &Occurrence{Pos: t.pos, Min: 1, Max: -1}, nil
	case tStar:
		p.advance()
		o := &Occurrence{Pos: t.pos, Min: 0, Max: -1}
		return o, p.occurrenceMax(o, t)
	case tValue:
		if t.val.Kind != ValueInt || t.val.Int.Sign() < 0 || p.peekKind(1) != tStar {
			return nil, nil
		}
		star := &p.toks[p.i+1]
		if star.pos.Offset != t.pos.Offset+len(t.text) {
			return nil, nil
		}
		if !t.val.Int.IsInt64() {
			return nil, p.errAt(t.pos, "occurrence bound %s is too large", t.text)
		}
		p.advance()
		p.advance()
		o := &Occurrence{Pos: t.pos, Min: t.val.Int.Int64(), Max: -1}
		return o, p.occurrenceMax(o, star)
	}
	return nil, nil
}

// occurrenceMax reads the upper bound written directly after '*'.
func (p *parser) occurrenceMax(o *Occurrence, star *token) *Error {
	t := p.cur()
	if t.kind != tValue || t.val.Kind != ValueInt || t.pos.Offset != star.pos.Offset+1 || t.val.Int.Sign() < 0 {
		return nil
	}
	// `*1: x` would be a value key, not a bound.
	if p.peekKind(1) == tColon {
		return nil
	}
	if !t.val.Int.IsInt64() {
		return p.errAt(t.pos, "occurrence bound %s is too large", t.text)
	}
	p.advance()
	o.Max = t.val.Int.Int64()
	if o.Max < o.Min {
		return p.errAt(o.Pos, "occurrence %d*%d has its maximum below its minimum", o.Min, o.Max)
	}
	return nil
}

// groupEntry parses `[occur] [memberkey] type` or `[occur] ( group )`.
func (p *parser) groupEntry() (*GroupEntry, *Error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	start := p.cur()
	e := &GroupEntry{Pos: start.pos, Doc: start.doc}
	occ, err := p.occurrence()
	if err != nil {
		return nil, err
	}
	e.Occur = occ
	if occ != nil && e.Doc == "" {
		e.Doc = p.cur().doc
	}
	t := p.cur()
	switch {
	case t.kind == tIdent && p.peekKind(1) == tColon:
		p.advance()
		p.advance()
		e.Key = &MemberKey{Pos: t.pos, Kind: KeyBareword, Name: t.text, Cut: true}
	case t.kind == tValue && p.peekKind(1) == tColon:
		p.advance()
		p.advance()
		e.Key = &MemberKey{Pos: t.pos, Kind: KeyValue, Value: t.val, Cut: true}
	case p.arrowAhead():
		save, saveErrs := p.i, len(p.errs)
		if k, err := p.type1(); err == nil && (p.cur().kind == tCaret || p.cur().kind == tArrow) {
			e.Key = &MemberKey{Pos: t.pos, Kind: KeyType, Type: k}
			if p.cur().kind == tCaret {
				e.Key.Cut = true
				p.advance()
			}
			if _, err := p.expect(tArrow, "'=>' after '^'"); err != nil {
				return nil, err
			}
		} else {
			p.i, p.errs = save, p.errs[:saveErrs]
		}
	}
	if e.Key == nil && p.cur().kind == tLParen {
		// `( ... )` is a parenthesised type when it parses as one and is
		// followed by something a type may be followed by; otherwise a group.
		save, saveErrs := p.i, len(p.errs)
		if ty, err := p.typ(); err == nil && p.endsEntry() {
			e.Type = ty
			return e, nil
		}
		p.i, p.errs = save, p.errs[:saveErrs]
		g, err := p.parenGroup()
		if err != nil {
			return nil, err
		}
		e.Group = g
		return e, nil
	}
	ty, err := p.typ()
	if err != nil {
		return nil, err
	}
	e.Type = ty
	return e, nil
}

// arrowAhead reports whether a `=>` (or `^`) follows before the current
// entry ends, that is, whether the entry can have a `type =>` key. It saves
// parsing every keyless entry twice.
func (p *parser) arrowAhead() bool {
	depth := 0
	for i := p.i; i < len(p.toks); i++ {
		switch p.toks[i].kind {
		case tLParen, tLBrace, tLBrack, tLAngle:
			depth++
		case tRParen, tRBrace, tRBrack, tRAngle:
			depth--
			if depth < 0 {
				return false
			}
		case tArrow, tCaret:
			if depth == 0 {
				return true
			}
		case tComma, tDSlash, tEOF, tAssign, tTypeAlt, tGroupAlt:
			if depth == 0 {
				return false
			}
		case tColon:
			if depth == 0 {
				return false
			}
		}
	}
	return false
}

// endsEntry reports whether the current token may follow a complete entry.
func (p *parser) endsEntry() bool {
	switch p.cur().kind {
	case tComma, tRParen, tRBrace, tRBrack, tDSlash, tEOF:
		return true
	case tIdent:
		return true // the next rule (at top level) or the next entry
	case tValue, tQuest, tStar, tPlus, tLParen, tLBrace, tLBrack, tTilde, tAmp, tHash:
		return true // the next entry of a group without commas
	}
	return false
}

func (p *parser) typ() (*Type, *Error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	t := &Type{Pos: p.cur().pos}
	for {
		t1, err := p.type1()
		if err != nil {
			return nil, err
		}
		t.Choices = append(t.Choices, t1)
		if p.cur().kind != tSlash {
			return t, nil
		}
		p.advance()
	}
}

func (p *parser) type1() (*Type1, *Error) {
	left, err := p.type2()
	if err != nil {
		return nil, err
	}
	t := &Type1{Pos: left.Pos, Left: left}
	// RFC 8610 allows one operator; real schemas chain them
	// (`0.1..2.0 .default 1.0`), read here left to right.
	for {
		switch p.cur().kind {
		case tRange, tRangeEx, tCtl:
		default:
			return t, nil
		}
		if t.Op != "" {
			t = &Type1{Pos: t.Pos, Left: &Type2{Pos: t.Pos, Kind: T2Paren, Inner: &Type{Pos: t.Pos, Choices: []*Type1{t}}}}
		}
		op := p.advance()
		t.Op = op.text
		if c := p.cur(); c.kind == tIdent && c.pos.Line > op.pos.Line {
			switch p.peekKind(1) {
			case tAssign, tTypeAlt, tGroupAlt:
				// `a = text .size` then `b = int`: the next rule is not
				// the operator's argument.
				return nil, p.errAt(op.pos, "%s needs an argument after it, before the rule %s on line %d", op.text, c.text, c.pos.Line)
			}
		}
		right, err := p.type2()
		if err != nil {
			return nil, err
		}
		t.Right = right
	}
}

// optGenericArgs parses `<type1, ...>` when it follows, or returns nil.
func (p *parser) optGenericArgs() ([]*Type1, *Error) {
	if p.cur().kind != tLAngle {
		return nil, nil
	}
	return p.genericArgs()
}

func (p *parser) genericArgs() ([]*Type1, *Error) {
	p.advance() // '<'
	var args []*Type1
	for {
		a, err := p.type1()
		if err != nil {
			return nil, err
		}
		args = append(args, a)
		if p.cur().kind == tComma {
			p.advance()
			continue
		}
		if _, err := p.expect(tRAngle, "',' or '>' in generic arguments"); err != nil {
			return nil, err
		}
		return args, nil
	}
}

func (p *parser) type2() (*Type2, *Error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	t := p.cur()
	n := &Type2{Pos: t.pos}
	switch t.kind {
	case tValue:
		p.advance()
		n.Kind, n.Value = T2Value, t.val
	case tIdent:
		p.advance()
		n.Kind, n.Name = T2Name, t.text
		args, err := p.optGenericArgs()
		if err != nil {
			return nil, err
		}
		n.Args = args
	case tLParen:
		p.advance()
		inner, err := p.typ()
		if err != nil {
			return nil, err
		}
		if _, err := p.expect(tRParen, "')'"); err != nil {
			return nil, err
		}
		n.Kind, n.Inner = T2Paren, inner
	case tLBrace, tLBrack:
		p.advance()
		closer, kind, what := tRBrace, T2Map, "'}'"
		if t.kind == tLBrack {
			closer, kind, what = tRBrack, T2Array, "']'"
		}
		g, err := p.group(closer)
		if err != nil {
			return nil, err
		}
		if _, err := p.expect(closer, what+" to close the "+t.text+" opened at "+t.pos.String()); err != nil {
			return nil, err
		}
		n.Kind, n.Group = kind, g
	case tTilde:
		p.advance()
		id, err := p.expect(tIdent, "a name after '~'")
		if err != nil {
			return nil, err
		}
		n.Kind, n.Name = T2Unwrap, id.text
		if n.Args, err = p.optGenericArgs(); err != nil {
			return nil, err
		}
	case tAmp:
		p.advance()
		if p.cur().kind == tLParen {
			g, err := p.parenGroup()
			if err != nil {
				return nil, err
			}
			n.Kind, n.Group = T2EnumGroup, g
			break
		}
		id, err := p.expect(tIdent, "a group name or '(' after '&'")
		if err != nil {
			return nil, err
		}
		n.Kind, n.Name = T2EnumName, id.text
		if n.Args, err = p.optGenericArgs(); err != nil {
			return nil, err
		}
	case tHash:
		p.advance()
		if t.minorTyp {
			if _, err := p.expect(tLAngle, "'<' after '#"+t.text[1:]+"'"); err != nil {
				return nil, err
			}
			mt, err := p.typ()
			if err != nil {
				return nil, err
			}
			if _, err := p.expect(tRAngle, "'>'"); err != nil {
				return nil, err
			}
			n.MinorType = mt
		}
		switch {
		case t.major < 0:
			n.Kind = T2Any
		case t.major == 6 && p.cur().kind == tLParen && (n.MinorType != nil || p.cur().pos.Offset == t.pos.Offset+len(t.text)):
			p.advance()
			inner, err := p.typ()
			if err != nil {
				return nil, err
			}
			if _, err := p.expect(tRParen, "')' to close the tag"); err != nil {
				return nil, err
			}
			n.Kind, n.Inner, n.Tag = T2Tag, inner, t.minor
		case t.major > 7:
			return nil, p.errAt(t.pos, "major type %d is out of range 0..7", t.major)
		default:
			n.Kind, n.Major, n.Minor = T2Major, t.major, t.minor
		}
	default:
		return nil, p.unexpected("a type")
	}
	return n, nil
}

// parenGroup parses `( group )`.
func (p *parser) parenGroup() (*Group, *Error) {
	open := p.advance()
	g, err := p.group(tRParen)
	if err != nil {
		return nil, err
	}
	if _, err := p.expect(tRParen, "')' to close the group opened at "+open.pos.String()); err != nil {
		return nil, err
	}
	return g, nil
}

// group parses group choices up to (not including) closer.
func (p *parser) group(closer tokKind) (*Group, *Error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	g := &Group{Pos: p.cur().pos}
	for {
		gc := &GroupChoice{Pos: p.cur().pos}
		for p.cur().kind != closer && p.cur().kind != tDSlash {
			if p.cur().kind == tEOF {
				return nil, p.unexpected(closer.String())
			}
			e, err := p.groupEntry()
			if err != nil {
				return nil, err
			}
			last := p.prev()
			if p.cur().kind == tComma {
				last = p.advance()
			}
			if e.Doc == "" {
				e.Doc = last.trailing
				if e.Doc == "" {
					e.Doc = p.prev().trailing
				}
			}
			gc.Entries = append(gc.Entries, e)
		}
		g.Choices = append(g.Choices, gc)
		if p.cur().kind != tDSlash {
			return g, nil
		}
		p.advance()
	}
}

// ParseGroup parses a bare group (entries separated by commas and `//`)
// such as the fragments RFC 8610 shows outside any rule.
func ParseGroup(file string, src []byte) (*Group, error) {
	toks, errs := lex(file, src)
	p := &parser{toks: toks, file: file, errs: errs}
	g, err := p.group(tEOF)
	if err != nil {
		p.errs = append(p.errs, err)
	} else if p.cur().kind != tEOF {
		p.errs = append(p.errs, p.unexpected("end of file"))
	}
	return g, p.errs.err()
}

package model

import (
	"fmt"
	"strings"
	"unicode"
)

// FieldCase is how member names are written on the wire.
type FieldCase int

const (
	// CasePreserve writes member names as the schema spells them.
	CasePreserve FieldCase = iota
	// CaseSnake writes camelCase member names as snake_case
	// (assistantId becomes assistant_id). Only bareword names (`name:`)
	// are re-cased; a quoted name (`"name":`) is written as quoted.
	CaseSnake
	// CaseCamel writes snake_case member names as camelCase
	// (assistant_id becomes assistantId).
	CaseCamel
)

// ParseFieldCase reads "preserve", "snake" or "camel".
func ParseFieldCase(s string) (FieldCase, error) {
	switch s {
	case "", "preserve":
		return CasePreserve, nil
	case "snake":
		return CaseSnake, nil
	case "camel":
		return CaseCamel, nil
	}
	return 0, fmt.Errorf("unknown field case %q (want preserve, snake or camel)", s)
}

func (c FieldCase) String() string {
	return [...]string{"preserve", "snake", "camel"}[c]
}

// Apply rewrites a member name in this case. Only letter case and
// underscores change; other characters (hyphens, dots) are kept.
func (c FieldCase) Apply(name string) string {
	switch c {
	case CaseSnake:
		return toSnake(name)
	case CaseCamel:
		return toCamel(name)
	}
	return name
}

func toSnake(s string) string {
	rs := []rune(s)
	var b strings.Builder
	for i, r := range rs {
		if unicode.IsUpper(r) {
			prevLower := i > 0 && (unicode.IsLower(rs[i-1]) || unicode.IsDigit(rs[i-1]))
			nextLower := i > 0 && i+1 < len(rs) && unicode.IsUpper(rs[i-1]) && unicode.IsLower(rs[i+1])
			if prevLower || nextLower {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(r))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func toCamel(s string) string {
	var b strings.Builder
	up := false
	for i, r := range s {
		if r == '_' && i > 0 {
			up = true
			continue
		}
		if up {
			b.WriteRune(unicode.ToUpper(r))
			up = false
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// initialisms are written in capitals in Go identifiers (Go's style).
var initialisms = map[string]string{
	"id": "ID", "url": "URL", "uri": "URI", "http": "HTTP", "https": "HTTPS",
	"json": "JSON", "api": "API", "uuid": "UUID", "ip": "IP", "ttl": "TTL",
	"cpu": "CPU", "cbor": "CBOR", "html": "HTML", "sql": "SQL", "tls": "TLS",
	"xml": "XML", "ui": "UI", "ai": "AI", "ascii": "ASCII", "utf8": "UTF8", "eof": "EOF",
}

// words splits a name into words at non-alphanumeric characters and at case
// humps: "run.start" gives run, start; "assistantId" gives assistant, Id.
func words(s string) []string {
	var out []string
	var cur []rune
	flush := func() {
		if len(cur) > 0 {
			out = append(out, string(cur))
			cur = nil
		}
	}
	rs := []rune(s)
	for i, r := range rs {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			flush()
			continue
		}
		if unicode.IsUpper(r) && len(cur) > 0 {
			prev := rs[i-1]
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || (i+1 < len(rs) && unicode.IsUpper(prev) && unicode.IsLower(rs[i+1])) {
				flush()
			}
		}
		cur = append(cur, r)
	}
	flush()
	return out
}

// GoName turns a CDDL name into an exported Go identifier, with Go's
// initialisms (assistantId becomes AssistantID).
func GoName(s string) string { return identName(s, true) }

// PascalName turns a CDDL name into a PascalCase identifier without Go's
// initialisms, for TypeScript and Python.
func PascalName(s string) string { return identName(s, false) }

func identName(s string, goInitialisms bool) string {
	var b strings.Builder
	for _, w := range words(s) {
		if up, ok := initialisms[strings.ToLower(w)]; ok && goInitialisms {
			b.WriteString(up)
			continue
		}
		rs := []rune(w)
		rs[0] = unicode.ToUpper(rs[0])
		b.WriteString(string(rs))
	}
	name := b.String()
	if name == "" {
		return "X"
	}
	if unicode.IsDigit([]rune(name)[0]) {
		name = "X" + name
	}
	return name
}

// Dedup returns in without its repeated strings, in the order of their
// first use.
func Dedup(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

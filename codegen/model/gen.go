package model

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/agentstream/agentstream/codegen/cddl"
)

// Lang is a generator target.
type Lang string

// The targets.
const (
	LangGo         Lang = "go"
	LangJSONSchema Lang = "jsonschema"
	LangTS         Lang = "ts"
	LangPython     Lang = "python"
)

// Langs lists every target.
var Langs = []Lang{LangGo, LangJSONSchema, LangTS, LangPython}

// ParseLang reads a target name.
func ParseLang(s string) (Lang, error) {
	for _, l := range Langs {
		if string(l) == s {
			return l, nil
		}
	}
	switch s {
	case "typescript":
		return LangTS, nil
	case "py":
		return LangPython, nil
	case "json-schema", "jsonschema.json":
		return LangJSONSchema, nil
	}
	return "", fmt.Errorf("unknown language %q (want go, jsonschema, ts or python)", s)
}

// Options configure a generator. The zero value generates with member names
// as written and package name "schema".
type Options struct {
	Lang Lang
	// Package is the Go package name (default "schema").
	Package string
	// FieldCase is how member names are written on the wire.
	FieldCase FieldCase
	// Source names the schema in the generated header (default: the
	// model's file name, without directories).
	Source string
	// OpenUnions makes every generated Go union keep a variant it does not
	// know as raw data instead of failing to decode, for schemas whose
	// readers must ignore new variants. Without it only unions whose
	// variants are all extensible maps are open.
	OpenUnions bool
	// InlineLeaves makes the JSON Schema inline references to simple
	// definitions (scalars, enumerations, patterns and lists of them),
	// each titled with its rule's name. Validators such as
	// santhosh-tekuri/jsonschema spend much of their time following
	// references; inlining these nearly halves it.
	InlineLeaves bool
	// Root is the rule the JSON Schema's root refers to: what a document
	// validated against the schema as a whole must be. Empty: the first
	// rule, which RFC 8610 makes the root of a specification.
	Root string
	// GoFast names unions of maps told apart by a member whose Go code
	// gets fast paths (package golang, fast.go): AppendJSON on every type they
	// reach, accessors of the members every variant's nested struct
	// has, a constructor per variant and a routing decoder.
	GoFast []string
	// GoRoutes names, per union of GoFast, the members of its variants
	// (wire paths such as "params.data.name") that its routing decoder
	// reads besides those every variant starts with.
	GoRoutes map[string][]string
	// GoFieldNames names Go fields instead of the member names: a key
	// RULE.member (as the schema spells it) maps to the field's Go name,
	// so that a type can have a method of the member's name (ErrorResponse's
	// member "error" as Code, for its Error method).
	GoFieldNames map[string]string
}

// SourceName is what the generated header names as the schema:
// o.Source, or the model's file name without directories.
func (o Options) SourceName(m *Model) string {
	if o.Source != "" {
		return o.Source
	}
	if m.File == "" {
		return "schema.cddl"
	}
	return filepath.Base(m.File)
}

// Gen is what every generator works with: the model, the options, the
// identifiers it gave the declarations, and the warnings and fallbacks it
// records. A generator package embeds it in its own type.
type Gen struct {
	M   *Model
	Opt Options
	// Mute > 0: warnings are not recorded (a generator trying a form).
	Mute     int
	warnings []Warning
	warned   map[string]bool
	idents   map[string]string // decl name -> identifier in the target
	anyUses  []AnyUse          // Go: where the output falls back to any
}

// NewGen starts a generation of m with opt.
func NewGen(m *Model, opt Options) *Gen {
	return &Gen{M: m, Opt: opt, warned: map[string]bool{}}
}

// Warnings are what the generator could not express exactly.
func (g *Gen) Warnings() []Warning { return g.warnings }

// RecordAnyUse records a rule whose Go output falls back to any.
func (g *Gen) RecordAnyUse(u AnyUse) { g.anyUses = append(g.anyUses, u) }

// AnyUses are the rules recorded by RecordAnyUse, in the order recorded.
func (g *Gen) AnyUses() []AnyUse { return g.anyUses }

// AnyUse is a rule whose Go output holds an any (or []any), with why.
type AnyUse struct {
	Rule    string
	Pos     cddl.Pos
	Reasons []string
}

// AnyInSchema is the reason of an any the schema asks for (`any`, or a
// construct no Go type narrows), as opposed to a fallback of the generator.
const AnyInSchema = "the schema allows any value (any, or a construct no Go type narrows)"

// Warn records a warning about declaration d (once per rule and text,
// none while Mute).
func (g *Gen) Warn(d *Decl, format string, args ...any) {
	if g.Mute > 0 {
		return
	}
	msg := fmt.Sprintf(format, args...)
	rule := d.Name
	if d.Synthetic {
		rule = d.Parent
	}
	key := rule + "\x00" + msg
	if g.warned[key] {
		return
	}
	g.warned[key] = true
	g.warnings = append(g.warnings, Warning{Pos: g.DeclPos(d), Rule: rule, Msg: fmt.Sprintf("%s: %s", g.Opt.Lang, msg)})
}

// DeclPos is where d, or the rule a synthetic d was made for, is.
func (g *Gen) DeclPos(d *Decl) cddl.Pos {
	for d != nil && d.Synthetic {
		d = g.M.byName[d.Parent]
	}
	if d == nil {
		return cddl.Pos{}
	}
	return d.Pos
}

// AssignIdents gives every declaration a unique identifier made by name,
// avoiding the reserved words.
func (g *Gen) AssignIdents(name func(string) string, reserved map[string]bool) {
	g.idents = map[string]string{}
	taken := map[string]bool{}
	for k := range reserved {
		taken[k] = true
	}
	for _, d := range g.M.Decls {
		id := name(d.Name)
		base := id
		for i := 2; taken[id]; i++ {
			id = fmt.Sprintf("%s%d", base, i)
		}
		taken[id] = true
		g.idents[d.Name] = id
	}
}

// Ident is the identifier AssignIdents gave declaration name (name itself
// for one it did not).
func (g *Gen) Ident(name string) string {
	if id, ok := g.idents[name]; ok {
		return id
	}
	return name
}

// WireName is a field's name on the wire: a bareword member name in the
// field case, a quoted or integer one exactly as written.
func (g *Gen) WireName(f *Field) string {
	if f.IntKey || f.Quoted {
		return f.Name
	}
	return g.Opt.FieldCase.Apply(f.Name)
}

// CommentLines splits documentation into lines with trailing space removed.
func CommentLines(doc string) []string {
	if doc == "" {
		return nil
	}
	lines := strings.Split(doc, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	return lines
}

package codegen

import (
	"fmt"
	"path/filepath"
	"sort"
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
	// gets fast paths (gen_go_fast.go): AppendJSON on every type they
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

func (o Options) source(m *Model) string {
	if o.Source != "" {
		return o.Source
	}
	if m.File == "" {
		return "schema.cddl"
	}
	return filepath.Base(m.File)
}

// Generate writes the model in the target language. The output depends only
// on the model and the options. Warnings list what the target could not
// express exactly; an error means the output could not be produced at all.
func Generate(m *Model, opt Options) ([]byte, []Warning, error) {
	g := &genCtx{m: m, opt: opt, warned: map[string]bool{}}
	g.warnings = append(g.warnings, m.Warnings...)
	var out []byte
	var err error
	switch opt.Lang {
	case LangGo:
		out, err = g.goFile()
	case LangJSONSchema:
		out, err = g.jsonSchema()
	case LangTS:
		out, err = g.tsFile()
	case LangPython:
		out, err = g.pyFile()
	default:
		return nil, nil, fmt.Errorf("unknown language %q", opt.Lang)
	}
	return out, g.warnings, err
}

// Compile parses, resolves, lowers and generates in one call.
func Compile(file string, src []byte, opt Options) ([]byte, []Warning, error) {
	s, err := cddl.Parse(file, src)
	if err != nil {
		return nil, nil, err
	}
	res, err := cddl.Resolve(s)
	if err != nil {
		return nil, nil, err
	}
	return Generate(Lower(res), opt)
}

// genCtx is shared by the generators.
type genCtx struct {
	m        *Model
	opt      Options
	warnings []Warning
	warned   map[string]bool
	idents   map[string]string // decl name -> identifier in the target
	anyUses  []AnyUse          // Go: where the output falls back to any
	mute     int               // > 0: warnings are not recorded (a generator trying a form)
}

// AnyUse is a rule whose Go output holds an any (or []any), with why.
type AnyUse struct {
	Rule    string
	Pos     cddl.Pos
	Reasons []string
}

// ExplainAny generates the model's Go output and returns the rules whose
// Go types fall back to any, in schema order, with the reasons, and the
// number of rules (declarations) the model has.
func ExplainAny(m *Model, opt Options) ([]AnyUse, int, error) {
	opt.Lang = LangGo
	g := &genCtx{m: m, opt: opt, warned: map[string]bool{}}
	_, err := g.goFile()
	rules := 0
	for _, d := range m.Decls {
		if !d.Synthetic {
			rules++
		}
	}
	sort.SliceStable(g.anyUses, func(i, j int) bool { return g.anyUses[i].Pos.Offset < g.anyUses[j].Pos.Offset })
	return g.anyUses, rules, err
}

// AnyInSchema is the reason of an any the schema asks for (`any`, or a
// construct no Go type narrows), as opposed to a fallback of the generator.
const AnyInSchema = "the schema allows any value (any, or a construct no Go type narrows)"

func (g *genCtx) warn(d *Decl, format string, args ...any) {
	if g.mute > 0 {
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
	g.warnings = append(g.warnings, Warning{Pos: g.declPos(d), Rule: rule, Msg: fmt.Sprintf("%s: %s", g.opt.Lang, msg)})
}

func (g *genCtx) declPos(d *Decl) cddl.Pos {
	for d != nil && d.Synthetic {
		d = g.m.byName[d.Parent]
	}
	if d == nil {
		return cddl.Pos{}
	}
	return d.Pos
}

// assignIdents gives every declaration a unique identifier made by name,
// avoiding the reserved words.
func (g *genCtx) assignIdents(name func(string) string, reserved map[string]bool) {
	g.idents = map[string]string{}
	taken := map[string]bool{}
	for k := range reserved {
		taken[k] = true
	}
	for _, d := range g.m.Decls {
		id := name(d.Name)
		base := id
		for i := 2; taken[id]; i++ {
			id = fmt.Sprintf("%s%d", base, i)
		}
		taken[id] = true
		g.idents[d.Name] = id
	}
}

func (g *genCtx) ident(name string) string {
	if id, ok := g.idents[name]; ok {
		return id
	}
	return name
}

// wireName is a field's name on the wire: a bareword member name in the
// field case, a quoted or integer one exactly as written.
func (g *genCtx) wireName(f *Field) string {
	if f.IntKey || f.Quoted {
		return f.Name
	}
	return g.opt.FieldCase.Apply(f.Name)
}

// commentLines splits documentation into lines with trailing space removed.
func commentLines(doc string) []string {
	if doc == "" {
		return nil
	}
	lines := strings.Split(doc, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	return lines
}

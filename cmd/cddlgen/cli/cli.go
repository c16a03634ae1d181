// Package cli is the cddlgen command: its flags, the reading of several
// schema files as one specification, --check with a diff, and errors
// shown at their file, line and column. Package codegen does the work;
// cmd/cddlgen runs Main, and the tests that check generated files are
// fresh run it in-process.
package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	gotoken "go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/agentstream/agentstream/codegen"
	"github.com/agentstream/agentstream/codegen/cddl"
)

// Main runs the cddlgen command with its arguments (without the program
// name) and returns its exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	o, err := ParseArgs(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "cddlgen:", err)
		}
		return 2
	}
	return Run(o, stdout, stderr)
}

// ParseArgs reads cddlgen's command line. Usage goes to usage.
func ParseArgs(args []string, usage io.Writer) (Options, error) {
	fs := flag.NewFlagSet("cddlgen", flag.ContinueOnError)
	fs.SetOutput(usage)
	lang := fs.String("lang", "go", "target: go, jsonschema, ts or python")
	out := fs.String("out", "", "output file (default: standard output)")
	pkg := fs.String("package", "schema", "Go package name")
	fieldCase := fs.String("field-case", "preserve", "member names on the wire: preserve, snake or camel")
	check := fs.Bool("check", false, "do not write; exit 1 with a diff if --out differs from the generated output")
	quiet := fs.Bool("quiet", false, "do not print warnings")
	open := fs.Bool("open-unions", false, "Go: keep unknown variants of every union instead of failing")
	inline := fs.Bool("inline-leaves", false, "JSON Schema: inline references to scalars, enumerations and patterns (faster validation)")
	explain := fs.Bool("explain-any", false, "print, instead of the output, the rules whose Go types fall back to any, and why")
	fast := fs.String("go-fast", "", "Go: comma-separated unions (of maps told apart by a member) to write fast paths for: AppendJSON, shared accessors, constructors and a routing decoder")
	var routes goRoutes
	fs.Var(&routes, "go-route", "Go: RULE=path[,path] names members of a --go-fast union's variants (wire paths, params.data.name) that its routing decoder reads besides the ones every variant starts with (repeatable)")
	var fieldNames goFieldNames
	fs.Var(&fieldNames, "go-field", "Go: RULE.member=Name names a member's Go field (repeatable), for a type that needs a method of the member's name")
	root := fs.String("root", "", "JSON Schema: the rule a document must match (default: the first rule, as RFC 8610 has it)")
	fs.Usage = func() {
		fmt.Fprintf(usage, "usage: cddlgen [flags] schema.cddl [more.cddl ...]\n\nSeveral files are one specification, read in order (rules may refer to rules of\nany of them); the first names the output.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return Options{}, err
	}
	if fs.NArg() < 1 {
		fs.Usage()
		return Options{}, errors.New("want a schema file")
	}
	l, err := codegen.ParseLang(*lang)
	if err != nil {
		return Options{}, err
	}
	fc, err := codegen.ParseFieldCase(*fieldCase)
	if err != nil {
		return Options{}, err
	}
	return Options{
		Input: fs.Arg(0), More: fs.Args()[1:], Output: *out, Check: *check, Quiet: *quiet, ExplainAny: *explain,
		Options: codegen.Options{Lang: l, Package: *pkg, FieldCase: fc, OpenUnions: *open, InlineLeaves: *inline, Root: *root, GoFast: splitComma(*fast), GoRoutes: routes.m, GoFieldNames: fieldNames.m},
	}, nil
}

// Options are what the cddlgen command was asked to do.
type Options struct {
	Input string // the schema file
	// More are further schema files, read after Input as one
	// specification (RFC 8610 has no import: several files are one
	// specification by concatenation).
	More   []string
	Output string // the output file; "" writes to stdout
	Check  bool   // compare Output with what would be generated instead of writing
	Quiet  bool   // do not print warnings
	// ExplainAny prints the rules whose Go types fall back to any instead
	// of generating.
	ExplainAny bool
	codegen.Options
}

// Run runs cddlgen and returns its exit status: 0 on success, 1 when the
// schema has errors or --check found a stale file, 2 on a usage or I/O error.
// Errors print as `file:line:col: message` with the source line and a caret.
func Run(o Options, stdout, stderr io.Writer) int {
	files, err := readSources(append([]string{o.Input}, o.More...))
	if err != nil {
		fmt.Fprintln(stderr, "cddlgen:", err)
		return 2
	}
	src := files.joined()
	if o.Source == "" {
		// The file's name, not the path it was given by: the output is
		// the same from whichever directory the generator runs.
		var names []string
		for _, n := range append([]string{o.Input}, o.More...) {
			names = append(names, filepath.Base(n))
		}
		o.Source = strings.Join(names, ", ")
	}
	if o.ExplainAny {
		return explainAny(o, src, stdout, stderr)
	}
	out, warnings, err := codegen.Compile(o.Input, src, o.Options)
	if err != nil {
		fmt.Fprint(stderr, files.formatError(err))
		return 1
	}
	if !o.Quiet {
		for _, w := range warnings {
			name, line := files.locate(w.Pos.Line)
			w.Pos.Line = line
			fmt.Fprintf(stderr, "%s:%s\n", name, w.String())
		}
	}
	if o.Check {
		if o.Output == "" {
			fmt.Fprintln(stderr, "cddlgen: --check needs --out")
			return 2
		}
		cur, err := os.ReadFile(o.Output)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintln(stderr, "cddlgen:", err)
			return 2
		}
		if bytes.Equal(cur, out) {
			return 0
		}
		fmt.Fprintf(stderr, "cddlgen: %s is stale; regenerate it from %s\n", o.Output, o.Input)
		fmt.Fprint(stdout, codegen.Diff(o.Output+" (on disk)", o.Output+" (generated)", cur, out))
		return 1
	}
	if o.Output == "" {
		_, err = stdout.Write(out)
	} else {
		err = os.WriteFile(o.Output, out, 0o644)
	}
	if err != nil {
		fmt.Fprintln(stderr, "cddlgen:", err)
		return 2
	}
	return 0
}

// explainAny prints where the Go output of a schema falls back to any.
func explainAny(o Options, src []byte, stdout, stderr io.Writer) int {
	s, err := cddl.Parse(o.Input, src)
	if err == nil {
		var res *cddl.Resolved
		if res, err = cddl.Resolve(s); err == nil {
			uses, rules, err := codegen.ExplainAny(codegen.Lower(res), o.Options)
			if err != nil {
				fmt.Fprintln(stderr, "cddlgen:", err)
				return 1
			}
			schemaSays := 0
			for _, u := range uses {
				if len(u.Reasons) == 1 && u.Reasons[0] == codegen.AnyInSchema {
					schemaSays++
				}
			}
			fmt.Fprintf(stdout, "%s: %d of %d rules have an any in Go: %d only where the schema says any, %d where a narrower type could exist\n",
				o.Input, len(uses), rules, schemaSays, len(uses)-schemaSays)
			for _, u := range uses {
				fmt.Fprintf(stdout, "  %d:%d %s: %s\n", u.Pos.Line, u.Pos.Col, u.Rule, strings.Join(u.Reasons, "; "))
			}
			return 0
		}
	}
	fmt.Fprint(stderr, cddl.FormatError(err, src))
	return 1
}

// splitComma splits a comma-separated list, dropping empty items.
func splitComma(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// goFieldNames is the --go-field flag: RULE.member=Name, repeatable.
type goFieldNames struct{ m map[string]string }

func (g *goFieldNames) String() string {
	var parts []string
	for k, v := range g.m {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func (g *goFieldNames) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || !strings.Contains(k, ".") || !gotoken.IsIdentifier(v) || !gotoken.IsExported(v) {
		return fmt.Errorf("want RULE.member=GoName, got %q", s)
	}
	if g.m == nil {
		g.m = map[string]string{}
	}
	g.m[k] = v
	return nil
}

// goRoutes is the --go-route flag: RULE=path[,path], repeatable.
type goRoutes struct{ m map[string][]string }

func (g *goRoutes) String() string {
	var parts []string
	for k, v := range g.m {
		parts = append(parts, k+"="+strings.Join(v, ","))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func (g *goRoutes) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	paths := splitComma(v)
	if !ok || k == "" || len(paths) == 0 {
		return fmt.Errorf("want RULE=path[,path], got %q", s)
	}
	if g.m == nil {
		g.m = map[string][]string{}
	}
	g.m[k] = append(g.m[k], paths...)
	return nil
}

// sources are the schema files of one specification, in order.
type sources struct {
	names []string
	srcs  [][]byte
	first []int // the line of the joined text each file starts at (1-based)
}

func readSources(names []string) (*sources, error) {
	f := &sources{names: names}
	line := 1
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			return nil, err
		}
		if len(b) > 0 && b[len(b)-1] != '\n' {
			b = append(b, '\n')
		}
		f.srcs = append(f.srcs, b)
		f.first = append(f.first, line)
		line += bytes.Count(b, []byte("\n"))
	}
	return f, nil
}

// joined is the files' text one after the other.
func (f *sources) joined() []byte {
	if len(f.srcs) == 1 {
		return f.srcs[0]
	}
	return bytes.Join(f.srcs, nil)
}

// locate turns a line of the joined text into a file and its own line.
func (f *sources) locate(line int) (string, int) {
	i := sort.Search(len(f.first), func(i int) bool { return f.first[i] > line }) - 1
	if i < 0 {
		i = 0
	}
	return f.names[i], line - f.first[i] + 1
}

// formatError formats err (found in the joined text) with each error in
// the file and at the line it is in.
func (f *sources) formatError(err error) string {
	list, ok := cddl.AsErrorList(err)
	if !ok {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range list {
		name, line := f.locate(e.Pos.Line)
		local := *e
		local.File, local.Pos.Line = name, line
		i := slices.Index(f.names, name)
		b.WriteString(cddl.FormatError(&local, f.srcs[i]))
	}
	return b.String()
}

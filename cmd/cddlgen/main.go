// Command cddlgen generates Go, JSON Schema, TypeScript or Python from a
// CDDL (RFC 8610) schema. See the package codegen for what it generates.
//
// Usage:
//
//	cddlgen [flags] schema.cddl
//
// With --check it writes nothing and exits 1 when the file named by --out
// differs from what would be generated, printing a diff.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/agentstream/agentstream/codegen"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cddlgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	lang := fs.String("lang", "go", "target: go, jsonschema, ts or python")
	out := fs.String("out", "", "output file (default: standard output)")
	pkg := fs.String("package", "schema", "Go package name")
	fieldCase := fs.String("field-case", "preserve", "member names on the wire: preserve, snake or camel")
	check := fs.Bool("check", false, "do not write; exit 1 with a diff if --out differs from the generated output")
	quiet := fs.Bool("quiet", false, "do not print warnings")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: cddlgen [flags] schema.cddl\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	l, err := codegen.ParseLang(*lang)
	if err != nil {
		fmt.Fprintln(stderr, "cddlgen:", err)
		return 2
	}
	fc, err := codegen.ParseFieldCase(*fieldCase)
	if err != nil {
		fmt.Fprintln(stderr, "cddlgen:", err)
		return 2
	}
	opts := codegen.CLIOptions{
		Input: fs.Arg(0), Output: *out, Check: *check, Quiet: *quiet,
		Options: codegen.Options{Lang: l, Package: *pkg, FieldCase: fc},
	}
	return codegen.RunCLI(opts, stdout, stderr)
}

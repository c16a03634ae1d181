// Command cddlgen generates Go, JSON Schema, TypeScript or Python from a
// CDDL (RFC 8610) schema; see package codegen for what it generates and
// package cli for the command line.
//
// Usage:
//
//	cddlgen [--lang go|jsonschema|ts|python] [--out FILE] [--package NAME]
//	        [--field-case preserve|snake|camel] [--open-unions] [--inline-leaves]
//	        [--root RULE] [--check] [--quiet] schema.cddl [more.cddl ...]
//
// With --check it writes nothing and exits 1, printing a diff, when the
// file named by --out differs from what would be generated.
package main

import (
	"os"

	"github.com/agentstream/agentstream/cmd/cddlgen/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}

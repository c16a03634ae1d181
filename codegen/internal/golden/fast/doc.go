// Package fast is cddlgen's Go output for the golden schema
// codegen/testdata/golden/fast.cddl with --go-fast Event, compiled by the
// test build.
package fast

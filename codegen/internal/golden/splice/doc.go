// Package splice is cddlgen's Go output for the golden schema
// codegen/testdata/golden/splice.cddl, compiled by the test build.
package splice

// Package defaults is cddlgen's Go output for the golden schema
// codegen/testdata/golden/defaults.cddl, compiled by the test build.
package defaults

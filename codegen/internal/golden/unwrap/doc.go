// Package unwrap is cddlgen's Go output for the golden schema
// codegen/testdata/golden/unwrap.cddl, compiled by the test build.
package unwrap

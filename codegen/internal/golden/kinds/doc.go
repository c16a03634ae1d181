// Package kinds is cddlgen's Go output for the golden schema
// codegen/testdata/golden/kinds.cddl (unions told apart by the kind of
// the value), compiled by the test build and exercised by hand-written
// JSON and CBOR round trips.
package kinds

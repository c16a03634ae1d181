// Package nested is cddlgen's Go output for the golden schema
// codegen/testdata/golden/nested.cddl (a union dispatched in two levels:
// "type", then "method"), compiled by the test build and exercised by
// hand-written JSON and CBOR round trips.
package nested

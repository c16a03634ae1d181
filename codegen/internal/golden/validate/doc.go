// Package validate is cddlgen's Go output for the golden schema
// codegen/testdata/golden/validate.cddl (ranges, sizes, patterns, array
// lengths, enumerations, literals), compiled by the test build and
// exercised by strict decodes of hand-written documents.
package validate

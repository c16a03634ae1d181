// Package jsonschema generates a JSON Schema (draft 2020-12) document from
// a [model.Model], used to validate incoming commands; with
// Options.InlineLeaves, references to simple definitions are inlined.
package jsonschema

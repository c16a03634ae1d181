// Package golang generates Go from a [model.Model]: one file of types with
// their JSON and CBOR methods, strict decoding of closed maps, Validate
// methods for the schema's controls, and, for the unions Options.GoFast
// names, fast paths (AppendJSON, shared accessors, constructors and a
// routing decoder). The output is gofmt-ed and imports package
// runtime/cddlrt, never the generator.
package golang

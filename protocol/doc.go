// Package protocol holds the Agent Streaming Protocol as agentstream speaks
// it: protocol.cddl, the source of truth of the wire format; the Go types
// generated from it (protocol_gen.go); and the validation of incoming
// commands against the JSON Schema generated from it (schema.json, with
// simple definitions inlined for speed; bindings/jsonschema has the plain
// one).
//
// # Decoding commands
//
// [DecodeCommand] turns one JSON frame into a typed [ClientCommand] or the
// [ErrorResponse] the server should send back: `invalid_argument` with the
// JSON path and schema rule broken, `unknown_command` for a method the
// server does not know, and `invalid_argument` with a null id for
// malformed JSON. The schema is compiled once, on first use.
//
// # Wire names
//
// Members are camelCase in protocol.cddl and snake_case on the wire
// (assistantId is `assistant_id`), which is what the official SDK and the
// reference server send.
//
// # Regenerating
//
// `go generate ./protocol` regenerates the Go types, the embedded JSON
// Schema and the bindings under bindings/; a test fails when any of them is
// stale.
package protocol

//go:generate go run ../cmd/cddlgen --quiet --lang go --package protocol --field-case snake --open-unions --go-fast ServerEvent --go-route ServerEvent=params.data.name --go-field ErrorResponse.error=Code --out protocol_gen.go protocol.cddl worker.cddl
//go:generate go run ../cmd/cddlgen --quiet --lang jsonschema --field-case snake --inline-leaves --root Message --out schema.json protocol.cddl worker.cddl
//go:generate go run ../cmd/cddlgen --quiet --lang jsonschema --field-case snake --root Message --out ../bindings/jsonschema/protocol.schema.json protocol.cddl worker.cddl
//go:generate go run ../cmd/cddlgen --quiet --lang ts --field-case snake --out ../bindings/ts/protocol.ts protocol.cddl worker.cddl
//go:generate go run ../cmd/cddlgen --quiet --lang jsonschema --field-case snake --root Message --out ../bindings/ts/protocol.schema.json protocol.cddl worker.cddl
//go:generate go run ../cmd/cddlgen --quiet --lang python --field-case snake --out ../bindings/python/agentstream_protocol/protocol.py protocol.cddl worker.cddl

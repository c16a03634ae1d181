// Package minimal serves the minimal token stream (seed 003) on the
// server's core: `POST /minimal/stream` with {"assistant_id", "message"}
// starts a run of the assistant on a thread (a new one unless the body
// names it) and answers with data-only Server-Sent Events, one
// MinimalFrame each, translated from the run's protocol events as
// protocol/minimal.cddl says. The thread stays an ordinary thread: the
// same run can be watched, answered or cancelled through the protocol's
// own wire meanwhile, and a client that drops this stream leaves the run
// going (read it back there).
//
// The frames' Go types (minimal_gen.go) and the JSON Schema the tests
// check every frame against (schema.json) are generated from
// protocol/minimal.cddl; `go generate ./transport/minimal` regenerates
// them and a test fails when they are stale.
package minimal

//go:generate go run ../../cmd/cddlgen --quiet --lang go --package minimal --field-case snake --out minimal_gen.go ../../protocol/minimal.cddl
//go:generate go run ../../cmd/cddlgen --quiet --lang jsonschema --field-case snake --root MinimalFrame --out schema.json ../../protocol/minimal.cddl

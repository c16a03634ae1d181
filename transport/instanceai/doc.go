// Package instanceai serves n8n's Instance AI chat wire (seeds 000 and
// 002) on the server's core: a chat message starts a run of the
// configured assistant on the thread the path names, the thread's events
// stream as Instance AI events (run-start, text-delta, tool-call,
// agent-spawned, confirmation-request, run-finish, ...) with the
// thread's sequence numbers as their ids, a confirmation answers the
// run's interrupt, and the thread's messages and status are rebuilt from
// its events for a page that reloads. The thread stays an ordinary
// thread: the protocol's own wire reads and steers it meanwhile, and a
// run started there shows here.
//
// The frames' Go types (instanceai_gen.go) and the JSON Schema the tests
// check every frame against (schema.json) are generated from
// protocol/instanceai.cddl, which also says how protocol events become
// Instance AI events; `go generate ./transport/instanceai` regenerates
// them and a test fails when they are stale.
package instanceai

//go:generate go run ../../cmd/cddlgen --quiet --lang go --package instanceai --out instanceai_gen.go ../../protocol/instanceai.cddl
//go:generate go run ../../cmd/cddlgen --quiet --lang jsonschema --root IaEvent --out schema.json ../../protocol/instanceai.cddl

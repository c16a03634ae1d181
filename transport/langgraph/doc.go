// Package langgraph serves the LangGraph Platform API's resources on the
// server's core (`serve --profiles langgraph`): threads (create, read,
// patch, delete, search, count, state, history, copy), assistants (search,
// count, read, schemas), runs (wait, create, list, read, join, cancel,
// delete, stateless; command, multitask strategies), the long-term store
// (items, search, namespaces), and the Agent Protocol's agents paths: the
// routes `@langchain/langgraph-sdk`'s classic client calls, on the same
// threads the protocol serves, and run streams (runs.stream, joinStream
// with Last-Event-ID) in every stream mode but events, translated from
// the run's protocol events (stream.go).
//
// The wire's Go types (langgraph_gen.go), its stream frames and states
// among them, and the JSON Schema its tests check them against
// (schema.json) are generated from protocol/langgraph.cddl;
// `go generate ./transport/langgraph` regenerates them and a test fails
// when they are stale.
package langgraph

//go:generate go run ../../cmd/cddlgen --quiet --lang go --package langgraph --out langgraph_gen.go ../../protocol/langgraph.cddl
//go:generate go run ../../cmd/cddlgen --quiet --lang jsonschema --root LgDocument --out schema.json ../../protocol/langgraph.cddl

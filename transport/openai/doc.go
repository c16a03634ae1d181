// Package openai serves the OpenAI-compatible wires on the server's core
// (`serve --profiles openai`): Chat Completions (POST /v1/chat/completions)
// and Responses (POST /v1/responses, GET /v1/responses/{id} with its
// resumable stream, cancel), so that the official openai SDKs, pointed at
// the server with base_url, run an assistant as a "model". A completion
// or a response is a run of a thread: the root agent's text, reasoning and
// tool calls become the wire's deltas, a run that asks for input becomes a
// tool call to answer, and a response's stream is the thread's events
// translated again from the run's start, so that it resumes after any
// sequence_number on any node.
//
// The wire's Go types (openai_gen.go) and the JSON Schemas the tests
// check what is sent against (schema_*.json) are generated from
// protocol/openai.cddl, which also says how protocol events become the
// wire's; `go generate ./transport/openai` regenerates them and a test
// fails when they are stale.
package openai

//go:generate go run ../../cmd/cddlgen --quiet --lang go --package openai --go-fast OaiStreamEvent --out openai_gen.go ../../protocol/openai.cddl
//go:generate go run ../../cmd/cddlgen --quiet --lang jsonschema --root OaiChatChunk --out schema_chunk.json ../../protocol/openai.cddl
//go:generate go run ../../cmd/cddlgen --quiet --lang jsonschema --root OaiStreamEvent --out schema_event.json ../../protocol/openai.cddl
//go:generate go run ../../cmd/cddlgen --quiet --lang jsonschema --root OaiResponse --out schema_response.json ../../protocol/openai.cddl
//go:generate go run ../../cmd/cddlgen --quiet --lang jsonschema --root OaiChatCompletion --out schema_completion.json ../../protocol/openai.cddl
//go:generate go run ../../cmd/cddlgen --quiet --lang jsonschema --root OaiChatRequest --out schema_chat_request.json ../../protocol/openai.cddl
//go:generate go run ../../cmd/cddlgen --quiet --lang jsonschema --root OaiResponsesRequest --out schema_responses_request.json ../../protocol/openai.cddl

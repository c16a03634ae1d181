// Package jobs serves the job stream (seed 001) on the server's core: a
// job is the thread "job:JOB_ID", its NodeStreamEvent.v1 envelopes are
// custom events named node_stream_event whose payload is the envelope as
// its worker sent it (seq left out: the thread's sequence number is the
// envelope's seq), and its end is the root agent's completed or failed
// lifecycle. GET /jobs/{job_id}/stream serves them as the job-stream
// gateway does (snapshot, append, complete, keep-alives, Last-Event-ID);
// producers add envelopes over HTTP (POST /jobs/{job_id}/envelopes) and
// end the job (POST /jobs/{job_id}/complete). protocol/jobs.cddl defines
// the wire; the Go types (jobs_gen.go) and the JSON Schema the tests check
// every frame against (schema.json) are generated from it
// (`go generate ./transport/jobs`; a test fails when they are stale).
package jobs

//go:generate go run ../../cmd/cddlgen --quiet --lang go --package jobs --field-case snake --out jobs_gen.go ../../protocol/jobs.cddl
//go:generate go run ../../cmd/cddlgen --quiet --lang jsonschema --field-case snake --root NodeStreamEvent --out schema.json ../../protocol/jobs.cddl

package transport_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
)

// BenchmarkRefusals is the CPU one refusal of a hostile body costs on each
// route that takes JSON: a body of almost 1 MiB nested as deep as it can
// be, and one holding as many values as it can, each refused before it is
// decoded (the target: under 5 ms each; figures in docs/hardening.md).
// In process, through the whole handler (guards, body read, scan).
func BenchmarkRefusals(b *testing.B) {
	srv := server.New(server.Config{})
	b.Cleanup(func() { _ = srv.Close(b.Context()) })
	h := transport.New(srv, transport.Options{Profiles: []string{transport.ProfileJobs, transport.ProfileInstanceAI, transport.ProfileOpenAI},
		Ingest: transport.IngestOptions{Rate: 1e12, Burst: 1 << 30}, HTTPCommandRate: 1e12, HTTPCommandBurst: 1 << 30})
	const size = 1<<20 - 4096
	deep := strings.Repeat("[", size/2) + strings.Repeat("]", size/2)
	values := "[" + strings.TrimSuffix(strings.Repeat("1,", size/2), ",") + "]"
	routes := []struct{ name, path, prefix, suffix string }{
		{"command", "/threads/t/commands", `{"id": 1, "method": "run.start", "params": {"assistant_id": "echo", "input": `, `}}`},
		{"events", "/threads/t/events", `[{"type":"event","method":"custom","params":{"namespace":[],"data":{"name":"x","payload":`, `}}}]`},
		{"job envelopes", "/jobs/j/envelopes", `[{"ts":1,"node_id":"v","node_type":"x","payload_version":"y","payload":`, `}]`},
		{"openai chat", "/v1/chat/completions", `{"model": "echo", "messages": [{"role": "user", "content": "x"}], "metadata": `, `}`},
		{"openai responses", "/v1/responses", `{"model": "echo", "input": "x", "metadata": `, `}`},
		{"instance-ai chat", "/instance-ai/chat/t", `{"message": "x", "extra": `, `}`},
	}
	for _, rt := range routes {
		for _, kind := range []struct{ name, body string }{{"deep", deep}, {"values", values}} {
			body := rt.prefix + kind.body + rt.suffix
			b.Run(rt.name+"/"+kind.name, func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					req := httptest.NewRequest("POST", rt.path, strings.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					w := httptest.NewRecorder()
					h.ServeHTTP(w, req)
					if w.Code < 400 || w.Code >= 500 {
						b.Fatalf("%s: %d %s", rt.path, w.Code, w.Body.String())
					}
				}
			})
		}
	}
}

package transport_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/agentstream/agentstream/assistants"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/agentstream/agentstream/transport/sse"
)

// Mounting the wire transports in a program's own HTTP server, next to
// its other routes, and streaming a run over SSE.
func Example() {
	srv := server.New(server.Config{})
	assistants.Register(srv)
	streams := transport.New(srv, transport.Options{SSE: sse.Options{Heartbeat: time.Minute}})

	mux := http.NewServeMux()
	mux.Handle("/threads/", streams) // the protocol's routes
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hi") })
	hs := httptest.NewServer(mux) // http.Server{Handler: mux} in a real program
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = streams.Shutdown(ctx) // ends the streams; then the HTTP server, then the runs
		hs.Close()
		_ = srv.Close(ctx)
	}()

	// Open the stream first, then start the run.
	resp, err := http.Post(hs.URL+"/threads/t1/stream", "application/json", strings.NewReader(`{"channels": ["lifecycle"]}`))
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	start, err := http.Post(hs.URL+"/threads/t1/commands", "application/json", strings.NewReader(
		`{"id": 1, "method": "run.start", "params": {"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "hi"}]}}}`))
	if err != nil {
		panic(err)
	}
	start.Body.Close()

	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var e struct {
			Method string
			Params struct {
				Namespace []string
				Data      struct{ Event string }
			}
		}
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			panic(err)
		}
		fmt.Println(e.Method, e.Params.Namespace, e.Params.Data.Event)
		if len(e.Params.Namespace) == 0 && e.Params.Data.Event == "completed" {
			break
		}
	}
	// Output:
	// lifecycle [] started
	// lifecycle [] running
	// lifecycle [] completed
}

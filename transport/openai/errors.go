package openai

import (
	"encoding/json"
	"net/http"

	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/transport/internal/httpjson"
)

// errorShape gives the errors of the transport's checks in front of the
// routes (authentication, authorization, rate limits, stream slots), which
// speak the protocol's ErrorResponse, OpenAI's shape, so that an SDK reads
// their message; the routes' own errors have it already.
func errorShape(next http.Handler) http.Handler { return httpjson.ErrorShape(next, reshape) }

// reshape writes a held-back error: OpenAI's as it is, the protocol's as
// OpenAI's error object.
func reshape(w http.ResponseWriter, status int, b []byte) {
	var own struct {
		Error json.RawMessage `json:"error"`
	}
	var e protocol.ErrorResponse
	switch {
	case json.Unmarshal(b, &own) == nil && len(own.Error) > 0 && own.Error[0] == '{':
	case json.Unmarshal(b, &e) == nil && e.Message != "":
		w.Header().Del("Content-Length")
		fail(w, status, "", "%s", e.Message)
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

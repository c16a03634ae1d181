// Package httpjson writes the JSON responses of the HTTP routes (the
// commands' answers, the state, the errors), for the transport and its
// SSE handler alike.
package httpjson

import (
	"encoding/json"
	"net/http"

	"github.com/agentstream/agentstream/protocol"
)

// Write writes v as a JSON response with status; a v that does not encode
// becomes a 500 unknown_error.
func Write(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(protocol.NewError(nil, protocol.ErrorCodeUnknownError, "%v", err))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

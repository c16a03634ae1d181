package langgraph

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/agentstream/agentstream/transport/internal/httpjson"
)

// errorShape gives the errors of the transport's checks in front of the
// routes (authentication, same-site rules, rate limits), which speak the
// protocol's ErrorResponse, the Platform's shape ({"detail": message}),
// so that its SDK reads their message; the routes' own errors have it.
func errorShape(next http.Handler) http.Handler { return httpjson.ErrorShape(next, reshape) }

// reshape writes a held-back error as {"detail": ...} unless it is so.
func reshape(w http.ResponseWriter, status int, body []byte) {
	var e struct {
		Detail  *string `json:"detail"`
		Message string  `json:"message"`
	}
	if json.Unmarshal(body, &e) != nil || e.Detail == nil {
		msg := e.Message
		if msg == "" {
			msg = strings.TrimSpace(string(body))
		}
		body, _ = json.Marshal(LgError{Detail: msg})
		body = append(body, '\n')
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

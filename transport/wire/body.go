package wire

import (
	"net/http"

	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport/internal/httpjson"
)

// ValidThread answers 400 invalid_argument for an id that names no valid
// thread (field names where the request gave it).
func ValidThread(w http.ResponseWriter, field, thread string) bool {
	if err := server.ValidThreadID(thread); err != nil {
		httpjson.Write(w, http.StatusBadRequest, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "%s: %v", field, err))
		return false
	}
	return true
}

// ReadBody reads the request's body, at most max bytes within
// BodyTimeout; what names it in errors. It answers the request itself
// when it cannot (413 past max, 408 past the timeout, 400 otherwise) and
// counts the refusal (Observer.Refused: body_size, body_timeout).
func (c *Context) ReadBody(w http.ResponseWriter, r *http.Request, max int64, what string) ([]byte, bool) {
	body, status, refusal, errResp := httpjson.ReadBody(w, r, max, c.BodyTimeout, what)
	if errResp != nil {
		if refusal != "" && c.Observer != nil {
			c.Observer.Refused(refusal)
		}
		httpjson.Write(w, status, errResp)
		return nil, false
	}
	return body, true
}

// readBatch is a Context's ReadBatch without a transport's producer
// limits: DefaultMaxBatchBytes and DefaultMaxBatchItems.
func (c *Context) readBatch(w http.ResponseWriter, r *http.Request, what string) ([][]byte, bool) {
	body, ok := c.ReadBody(w, r, DefaultMaxBatchBytes, what)
	if !ok {
		return nil, false
	}
	items, errResp := protocol.SplitBatch(body, r.Header.Get("Content-Type") == "application/x-ndjson", DefaultMaxBatchItems)
	if errResp != nil {
		httpjson.Write(w, http.StatusBadRequest, errResp)
		return nil, false
	}
	return items, true
}

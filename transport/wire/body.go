package wire

import (
	"errors"
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
// BodyTimeout, nested and holding values within Decode; what names it in
// errors. It answers the request itself when it cannot (413 past max, 408
// past the timeout, 400 otherwise) and counts the refusal
// (Observer.Refused: body_size, body_timeout, body_depth, body_values).
func (c *Context) ReadBody(w http.ResponseWriter, r *http.Request, max int64, what string) ([]byte, bool) {
	return c.ReadBodyWithin(w, r, max, what, c.Decode)
}

// ReadBodyWithin is ReadBody with limits of the caller's (a wire whose
// bodies are larger than commands, such as OpenAI's chats).
func (c *Context) ReadBodyWithin(w http.ResponseWriter, r *http.Request, max int64, what string, limits protocol.DecodeLimits) ([]byte, bool) {
	body, status, refusal, errResp := httpjson.ReadBody(w, r, max, c.BodyTimeout, what)
	if errResp != nil {
		if refusal != "" && c.Observer != nil {
			c.Observer.Refused(refusal)
		}
		httpjson.Write(w, status, errResp)
		return nil, false
	}
	if !c.WithinLimits(w, body, what, limits) {
		return nil, false
	}
	return body, true
}

// WithinLimits answers 400 invalid_argument (and counts body_depth or
// body_values) for a JSON text past limits; what names it.
func (c *Context) WithinLimits(w http.ResponseWriter, body []byte, what string, limits protocol.DecodeLimits) bool {
	err := limits.Check(body)
	if err == nil {
		return true
	}
	var le *protocol.LimitError
	if errors.As(err, &le) && c.Observer != nil {
		c.Observer.Refused("body_" + le.Limit)
	}
	httpjson.Write(w, http.StatusBadRequest, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "%s: %v", what, err))
	return false
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

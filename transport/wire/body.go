package wire

import (
	"net/http"
	"time"

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

// readBatch is a Context's ReadBatch without a transport's producer
// limits: DefaultMaxBatchBytes and DefaultMaxBatchItems.
func readBatch(w http.ResponseWriter, r *http.Request, timeout time.Duration, what string) ([][]byte, bool) {
	body, status, _, errResp := httpjson.ReadBody(w, r, DefaultMaxBatchBytes, timeout, what)
	if errResp != nil {
		httpjson.Write(w, status, errResp)
		return nil, false
	}
	items, errResp := protocol.SplitBatch(body, r.Header.Get("Content-Type") == "application/x-ndjson", DefaultMaxBatchItems)
	if errResp != nil {
		httpjson.Write(w, http.StatusBadRequest, errResp)
		return nil, false
	}
	return items, true
}

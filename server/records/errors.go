package records

import (
	"errors"

	"github.com/agentstream/agentstream/protocol"
)

// Error is an error of the core that says how it is answered: its
// protocol error code, and a reason for the few refusals a plain HTTP
// answer tells apart from others of their code (a conflict with the state
// of a thread, run or writer; a size past its limit; a capability the
// engine lacks). The core's sentinel errors are Errors, and the errors
// that wrap them (fmt.Errorf("%w: ...")) carry them: CodeOf reads them,
// and the transport's httpjson.Status turns code and reason into an HTTP
// status, the one table every wire uses.
type Error struct {
	msg    string
	Code   protocol.ErrorCode
	Reason string
}

func (e *Error) Error() string { return e.msg }

// ReasonThreadBusy is the reason member ("reason", a protocol extension)
// of the error a command gets when the thread's active run refuses it
// (multitask_strategy reject, a fork): an HTTP wire answers it 409.
const ReasonThreadBusy = "thread_busy"

// Reasons an Error gives, besides ReasonThreadBusy.
const (
	// ReasonConflict: the state of a thread, run or writer refuses the
	// request as it stands (a thread that exists, a run that ended,
	// another node writing the thread): retrying the same request does not
	// help (HTTP 409).
	ReasonConflict = "conflict"
	// ReasonTooLarge: what the request would leave is larger than its
	// limit (HTTP 413).
	ReasonTooLarge = "too_large"
	// ReasonNotServed: the engine does not keep what the request needs
	// (HTTP 501).
	ReasonNotServed = "not_served"
	// ReasonNotFound: what the request names (a worker) is not there, and
	// its code is not a no_such_* one (HTTP 404).
	ReasonNotFound = "not_found"
)

// ErrTooManyThreads refuses a thread past the most a server (or a store)
// keeps.
var ErrTooManyThreads = coded(protocol.ErrorCodeResourceExhausted, "", "server: too many threads")

// NewError returns an Error with the code, reason (or "") and message:
// how a resource package (server/threads, server/items) defines its
// sentinel errors in the one table.
func NewError(code protocol.ErrorCode, reason, msg string) *Error { return coded(code, reason, msg) }

func coded(code protocol.ErrorCode, reason, msg string) *Error {
	return &Error{msg: msg, Code: code, Reason: reason}
}

// CodeOf is the protocol error code of err and its reason, if any: those
// of the core Error it wraps, of a protocol ErrorResponse (its "reason"
// extension), or unknown_error for any other error.
func CodeOf(err error) (protocol.ErrorCode, string) {
	var e *Error
	if errors.As(err, &e) {
		return e.Code, e.Reason
	}
	var r *protocol.ErrorResponse
	if errors.As(err, &r) {
		reason, _ := r.Extra["reason"].(string)
		return r.Code, reason
	}
	return protocol.ErrorCodeUnknownError, ""
}

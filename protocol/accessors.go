package protocol

import "errors"

// Hand-written accessors on generated types, where reading a common value
// otherwise takes a type switch (d.Delta.Value.(*TextDelta).Text).

// Text is the text a text delta adds ("" for other deltas).
func (d ContentBlockDelta) Text() string {
	if t, ok := d.Value.(*TextDelta); ok {
		return t.Text
	}
	return ""
}

// Reasoning is the reasoning a reasoning delta adds ("" for others).
func (d ContentBlockDelta) Reasoning() string {
	if r, ok := d.Value.(*ReasoningDelta); ok {
		return r.Reasoning
	}
	return ""
}

// Error makes an ErrorResponse an error: commands that fail return it
// (server.Server.Do), and errors.As finds it in what wraps it.
func (e *ErrorResponse) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Message
}

// CodeOf returns the protocol error code of err: the ErrorResponse's in
// it, or unknown_error for any other error (nil for none).
func CodeOf(err error) ErrorCode {
	if err == nil {
		return ""
	}
	return ErrorResponseOf(nil, err).Code
}

// ErrorResponseOf returns the ErrorResponse in err, or else (an error
// that is not a protocol error) an unknown_error response with id and
// err's text; nil for a nil err. Transports write what it returns.
func ErrorResponseOf(id *uint64, err error) *ErrorResponse {
	if err == nil {
		return nil
	}
	var e *ErrorResponse
	if errors.As(err, &e) {
		return e
	}
	return NewError(id, ErrorCodeUnknownError, "%v", err)
}

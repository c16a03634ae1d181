// Package httpjson writes the JSON responses of the HTTP routes (the
// commands' answers, the state, the errors) and reads their bodies under
// one set of limits, for the transport and its SSE handler alike.
package httpjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
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

// ReadBody reads a request's body, of at most max bytes, within timeout
// (the connection's read deadline is cleared again once it is read). On a
// failure it returns the status and error to answer, and the refusal to
// count: 413 "body_size" for a body over max, 408 "body_timeout" for one
// not sent in time, 400 "" for any other failure; the connection is then
// closed after the answer, since what is left of the body is not read.
func ReadBody(w http.ResponseWriter, r *http.Request, max int64, timeout time.Duration, what string) ([]byte, int, string, *protocol.ErrorResponse) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(timeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err == nil {
		_ = rc.SetReadDeadline(time.Time{})
		return body, 0, "", nil
	}
	w.Header().Set("Connection", "close")
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &mbe):
		return nil, http.StatusRequestEntityTooLarge, "body_size", protocol.NewError(nil, protocol.ErrorCodeResourceExhausted, "%s: the body is larger than %d bytes", what, max)
	case errors.As(err, &ne) && ne.Timeout():
		return nil, http.StatusRequestTimeout, "body_timeout", protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "%s: the body was not sent within %v", what, timeout)
	}
	return nil, http.StatusBadRequest, "", protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "reading the %s: %v", what, err)
}

// StatusOf is the HTTP status of an error code: the one table every
// route that answers a refusal over plain HTTP uses.
func StatusOf(code protocol.ErrorCode) int {
	switch code {
	case protocol.ErrorCodeInvalidArgument, protocol.ErrorCodeUnknownCommand, protocol.ErrorCodeNotSupported:
		return http.StatusBadRequest
	case protocol.ErrorCodeUnauthenticated:
		return http.StatusUnauthorized
	case protocol.ErrorCodePermissionDenied:
		return http.StatusForbidden
	case protocol.ErrorCodeNoSuchThread, protocol.ErrorCodeNoSuchRun, protocol.ErrorCodeNoSuchSubscription,
		protocol.ErrorCodeNoSuchNamespace, protocol.ErrorCodeNoSuchInterrupt, protocol.ErrorCodeNoSuchCheckpoint:
		return http.StatusNotFound
	case protocol.ErrorCodeRateLimited, protocol.ErrorCodeResourceExhausted:
		return http.StatusTooManyRequests
	case protocol.ErrorCodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError // unknown_error, and any code newer than this table
}

// Status is the HTTP status of an error code and the reason an error of
// the core gives (server.CodeOf): the few reasons a plain HTTP answer
// tells apart from the rest of their code, then StatusOf. It is the one
// table from the core's errors to statuses; a wire whose reference
// answers otherwise (the LangGraph Platform's 422s) overrides it for the
// errors it names, and says so.
func Status(code protocol.ErrorCode, reason string) int {
	switch reason {
	case server.ReasonThreadBusy, server.ReasonConflict:
		return http.StatusConflict
	case server.ReasonTooLarge:
		return http.StatusRequestEntityTooLarge
	case server.ReasonNotServed:
		return http.StatusNotImplemented
	case server.ReasonNotFound:
		return http.StatusNotFound
	}
	return StatusOf(code)
}

// Refusal is err, an error of the core, as an ErrorResponse without an id
// and its HTTP status (Status of its code and reason). An error that
// carries no code is a store's failure: unavailable, 503, worth a retry.
func Refusal(err error) (int, *protocol.ErrorResponse) {
	code, reason := server.CodeOf(err)
	var e *protocol.ErrorResponse
	if errors.As(err, &e) {
		c := *e
		c.ID = nil
		return Status(code, reason), &c
	}
	if code == protocol.ErrorCodeUnknownError {
		code = protocol.ErrorCodeUnavailable
	}
	return Status(code, reason), protocol.NewError(nil, code, "%v", err)
}

// WriteRefusal answers err, an error of the core, as Refusal says.
func WriteRefusal(w http.ResponseWriter, err error) {
	status, e := Refusal(err)
	Write(w, status, e)
}

// CommandError is err (from server.Session.Do) as an ErrorResponse
// without an id, and its HTTP status for the other wires, which start
// runs over plain HTTP: Status of its code and reason (409 for the
// server's refusal of a second run on a busy thread, multitask strategy
// reject); an error that is no ErrorResponse is unknown_error (500). The
// protocol's own command route answers by the code alone (StatusOf: 400
// for a busy thread), as the protocol's codes say.
func CommandError(err error) (int, *protocol.ErrorResponse) {
	var e *protocol.ErrorResponse
	if !errors.As(err, &e) {
		return http.StatusInternalServerError, protocol.NewError(nil, protocol.ErrorCodeUnknownError, "%v", err)
	}
	return Refusal(e)
}

// ErrorShape wraps next so that the body of an error answer (a status of
// 400 or more) it writes is held back and handed to reshape once next
// returns, to be written in a wire's own error shape (OpenAI's error
// object, the LangGraph Platform's {"detail": ...}): the transport's
// checks in front of a wire's routes speak the protocol's ErrorResponse.
// Other answers, streams included, go through as they are written.
func ErrorShape(next http.Handler, reshape func(w http.ResponseWriter, status int, body []byte)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &shapeWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		if sw.status != 0 {
			reshape(w, sw.status, sw.body.Bytes())
		}
	})
}

// maxErrorBody bounds an error's body held back; more is dropped.
const maxErrorBody = 64 << 10

// shapeWriter holds back the body of an error answer (ErrorShape).
type shapeWriter struct {
	http.ResponseWriter
	wrote  bool // the head went through as it was
	status int  // an error's, held back
	body   bytes.Buffer
}

func (s *shapeWriter) WriteHeader(code int) {
	if s.wrote || s.status != 0 {
		return
	}
	if code >= 400 {
		s.status = code
		return
	}
	s.wrote = true
	s.ResponseWriter.WriteHeader(code)
}

func (s *shapeWriter) Write(b []byte) (int, error) {
	if !s.wrote && s.status == 0 {
		s.WriteHeader(http.StatusOK)
	}
	if s.status != 0 {
		if s.body.Len()+len(b) > maxErrorBody {
			return len(b), nil
		}
		return s.body.Write(b)
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (flushes, the
// SSE handler's takeover, deadlines).
func (s *shapeWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Flush passes a flush through (a held-back error is written at the end).
func (s *shapeWriter) Flush() {
	if s.status == 0 {
		if f, ok := s.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
	}
}

package openai

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/agentstream/agentstream/protocol"
)

// errorShape gives the errors of the transport's checks in front of the
// routes (authentication, authorization, rate limits, stream slots), which
// speak the protocol's ErrorResponse, OpenAI's shape, so that an SDK reads
// their message; the routes' own errors have it already.
func errorShape(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &shapeWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		sw.finish()
	})
}

// shapeWriter holds back the body of an error answer to reshape it.
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
		if s.body.Len()+len(b) > maxBody {
			return len(b), nil // an error's body is small; more is dropped
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

func (s *shapeWriter) finish() {
	if s.status == 0 {
		return
	}
	b := s.body.Bytes()
	var own struct {
		Error json.RawMessage `json:"error"`
	}
	var e protocol.ErrorResponse
	switch {
	case json.Unmarshal(b, &own) == nil && len(own.Error) > 0 && own.Error[0] == '{':
	case json.Unmarshal(b, &e) == nil && e.Message != "":
		s.ResponseWriter.Header().Del("Content-Length")
		fail(s.ResponseWriter, s.status, "", "%s", e.Message)
		return
	}
	s.ResponseWriter.WriteHeader(s.status)
	_, _ = s.ResponseWriter.Write(b)
}

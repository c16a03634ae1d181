package langgraph

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
)

// errorShape gives the errors of the transport's checks in front of the
// routes (authentication, same-site rules, rate limits), which speak the
// protocol's ErrorResponse, the Platform's shape ({"detail": message}),
// so that its SDK reads their message; the routes' own errors have it.
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
		if s.body.Len()+len(b) > 64<<10 {
			return len(b), nil // an error's body is small; more is dropped
		}
		return s.body.Write(b)
	}
	return s.ResponseWriter.Write(b)
}

// finish writes a held-back error, as {"detail": ...} unless it is so.
func (s *shapeWriter) finish() {
	if s.status == 0 {
		return
	}
	body := s.body.Bytes()
	var e struct {
		Detail  *string `json:"detail"`
		Message string  `json:"message"`
	}
	if json.Unmarshal(body, &e) != nil || e.Detail == nil {
		msg := e.Message
		if msg == "" {
			msg = string(bytes.TrimSpace(body))
		}
		body, _ = json.Marshal(LgError{Detail: msg})
		body = append(body, '\n')
	}
	h := s.ResponseWriter.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	s.ResponseWriter.WriteHeader(s.status)
	_, _ = s.ResponseWriter.Write(body)
}

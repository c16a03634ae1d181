package langgraph

import (
	"net/http"
)

// keeping serves a write route with f and holds its answer, if 2xx,
// until the catalog kept what it changed (threads.Catalog.Keep: on the
// disk engine, a synced commit): an answer that acknowledges a write
// means it outlives a crash. One the engine could not keep in time is
// answered 503 instead, naming why (the write was made, and may be kept).
func (h *Handler) keeping(f http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		kw := &keepWriter{ResponseWriter: w, r: r, h: h}
		f(kw, r)
	}
}

// keepWriter is a response whose 2xx status waits for the catalog's Keep
// before it goes out; a Keep that fails answers 503 and drops what the
// handler writes after.
type keepWriter struct {
	http.ResponseWriter
	r       *http.Request
	h       *Handler
	decided bool // the status went out (or was replaced)
	refused bool // Keep failed: the handler's answer is dropped
}

func (k *keepWriter) WriteHeader(code int) {
	if k.decided {
		return
	}
	k.decided = true
	if code >= 200 && code < 300 {
		if err := k.h.catalog.Keep(k.r.Context()); err != nil {
			k.refused = true
			for name := range k.Header() {
				k.Header().Del(name)
			}
			fail(k.ResponseWriter, http.StatusServiceUnavailable, "the write was made but is not kept on disk yet (%v); read it back, or send it again", err)
			return
		}
	}
	k.ResponseWriter.WriteHeader(code)
}

func (k *keepWriter) Write(b []byte) (int, error) {
	if !k.decided {
		k.WriteHeader(http.StatusOK)
	}
	if k.refused {
		return len(b), nil
	}
	return k.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (k *keepWriter) Unwrap() http.ResponseWriter { return k.ResponseWriter }

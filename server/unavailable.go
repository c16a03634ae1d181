package server

import (
	"fmt"
	"github.com/agentstream/agentstream/protocol"
)

// ErrUnavailable is wrapped by the error of a server whose engine cannot
// reach its store (EngineHost.SetUnavailable): streams end with it, and commands and
// new subscriptions are refused with it until the store is back.
var ErrUnavailable = coded(protocol.ErrorCodeUnavailable, "", "server: unavailable")

type unavailableErr struct{ err error }

// setUnavailable says the engine's store (Redis) cannot be reached (err)
// or is back (nil). When it goes, every open stream ends with an error
// wrapping ErrUnavailable (its transport tells the client, which
// reconnects), and commands and subscriptions are refused with it (the
// unavailable error code) until it is back; nothing needs a restart.
func (s *Server) setUnavailable(err error) {
	if err == nil {
		s.down.Store(nil)
		return
	}
	wrapped := fmt.Errorf("%w: %v", ErrUnavailable, err)
	if !s.down.CompareAndSwap(nil, &unavailableErr{wrapped}) {
		return // already down: the streams have ended
	}
	s.mu.Lock()
	threads := s.threadList()
	s.mu.Unlock()
	for _, t := range threads {
		t.mu.Lock()
		sessions := t.sessionList()
		t.mu.Unlock()
		for _, ss := range sessions {
			ss.end(wrapped)
		}
	}
}

// Unavailable returns the error the engine reported (EngineHost.SetUnavailable),
// or nil.
func (s *Server) Unavailable() error {
	if u := s.down.Load(); u != nil {
		return u.err
	}
	return nil
}

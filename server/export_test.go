package server

// Internals the external tests (package server_test) reach.

// BufferedEvents is how many events thread id holds for replay.
func BufferedEvents(s *Server, id string) int { return s.bufferedEvents(id) }

// QueuedBytes is what the server counts as queued to open sessions.
func QueuedBytes(s *Server) int64 { return s.queued.Load() }

package server

// Internals the external tests (package server_test) reach.

// BufferedEvents is how many events thread id holds for replay.
func BufferedEvents(s *Server, id string) int { return s.bufferedEvents(id) }

package server

import (
	"context"
)

// threadExists reports whether the thread has state or history, or a run
// or events on this node.
func (s *Server) threadExists(ctx context.Context, id string) (bool, error) {
	if t, _ := s.thread(id, false); t != nil {
		// Held with something in it: a run, or events. (Held empty, by a
		// subscription alone, it exists only once something is written:
		// a thread just deleted is not made again by a late subscriber.)
		t.mu.Lock()
		busy := t.run != nil || len(t.queued) > 0 || t.acked > 0
		t.mu.Unlock()
		if busy {
			return true, nil
		}
	}
	ok, err := s.st.State.Exists(ctx, id)
	if err != nil {
		return false, storeError(err)
	}
	if ok {
		return true, nil
	}
	return s.hasHistory(ctx, id)
}

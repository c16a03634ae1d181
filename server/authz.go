package server

import (
	"context"
	"fmt"
	"github.com/agentstream/agentstream/protocol"

	"github.com/agentstream/agentstream/auth"
)

// Authorize decides whether principal p may read and act on thread
// threadID; the transports ask before serving a stream, a WebSocket, a
// command or the thread's state, when authentication is on. The principal
// that first uses a thread owns it (the owner is kept with the thread's
// state, see [StateStore.ClaimOwner]); after that the owner, admins and
// principals whose thread patterns match may use it (auth.Principal.MayUse),
// and everyone else gets an error wrapping ErrPermissionDenied. A nil
// principal gets ErrUnauthenticated.
//
// With create set (streams and commands, which create threads anyway), an
// unknown thread is created for p, within MaxThreads, and p owns it: a
// claim goes when the thread is forgotten (ThreadTTL), and no request can
// make the server keep owners of threads that do not exist. Without it (a
// read), an unknown thread is ErrNoSuchThread, and nothing is claimed.
func (s *Server) Authorize(p *auth.Principal, threadID string, create bool) error {
	if p == nil {
		return ErrUnauthenticated
	}
	if err := ValidThreadID(threadID); err != nil {
		s.metrics.refused.add(LimitThreadID)
		return err
	}
	ctx := context.Background() // the store bounds its own calls
	owner, ok, err := s.st.State.Owner(ctx, threadID)
	if err != nil {
		return storeError(err)
	}
	if !ok {
		hist, err := s.hasHistory(ctx, threadID)
		if err != nil {
			return err
		}
		if hist {
			// Another request may have claimed the thread since the
			// owner was read (its claim is state too): read it again.
			if owner, ok, err = s.st.State.Owner(ctx, threadID); err != nil {
				return storeError(err)
			}
		}
		if hist && ok {
			return s.mayUse(p, threadID, owner)
		}
		if hist {
			// The owner record is gone (expired, or a store that lost
			// it) while the thread has history: it is not handed to
			// whoever comes next. Admins, and principals granted the
			// thread by pattern, may still use it.
			if p.MayUse(threadID, "") {
				return nil
			}
			s.metrics.denied.Add(1)
			return fmt.Errorf("%w: thread %s has history but its owner record is gone (its store lost it); only admins may use it until it is restored", ErrPermissionDenied, threadID)
		}
		if !create {
			exists, err := s.HasThread(ctx, threadID)
			if err != nil {
				return err
			}
			if !exists {
				return fmt.Errorf("%w: %q", ErrNoSuchThread, threadID)
			}
		}
		if _, err := s.threadFor(threadID, true, p); err != nil {
			return err
		}
		if owner, err = s.st.State.ClaimOwner(ctx, threadID, p.Subject); err != nil {
			return storeError(err)
		}
	}
	return s.mayUse(p, threadID, owner)
}

// mayUse is Authorize's answer for a thread owned by owner.
func (s *Server) mayUse(p *auth.Principal, threadID, owner string) error {
	if p.MayUse(threadID, owner) {
		return nil
	}
	s.metrics.denied.Add(1)
	return fmt.Errorf("%w: thread %s belongs to another principal, and %q is neither an admin nor granted it", ErrPermissionDenied, threadID, p.Subject)
}

// hasHistory reports whether the thread has events or state: this node
// delivered some, or the durable log or the StateStore holds some.
func (s *Server) hasHistory(ctx context.Context, threadID string) (bool, error) {
	if t, _ := s.thread(threadID, false); t != nil {
		t.mu.Lock()
		n := t.acked
		t.mu.Unlock()
		if n > 0 {
			return true, nil
		}
	}
	if d := s.st.Durable; d != nil {
		epoch, _, err := d.Head(ctx, threadID)
		if err != nil {
			return false, storeError(err)
		}
		if epoch != "" {
			return true, nil
		}
	}
	ok, err := s.st.State.Exists(ctx, threadID)
	if err != nil {
		return false, storeError(err)
	}
	return ok, nil
}

// Owner returns the principal that owns thread threadID ("" for none).
func (s *Server) Owner(ctx context.Context, threadID string) (string, error) {
	o, _, err := s.st.State.Owner(ctx, threadID)
	if err != nil {
		return "", storeError(err)
	}
	return o, nil
}

// storeError is the error of a call to the StateStore that failed: the
// store is unavailable (codeOf: unavailable).
// StoreError is err, a store's failure, as the core answers it: a coded
// error of the core (a limit, unavailable already) as it is, any other as
// ErrUnavailable naming it. The resource packages answer their stores'
// failures with it.
func StoreError(err error) error {
	if err == nil {
		return nil
	}
	return storeError(err)
}

func storeError(err error) error {
	if code, _ := CodeOf(err); code != protocol.ErrorCodeUnknownError {
		return err // a refusal of the core's (a limit, unavailable already) is not the store being down
	}
	return fmt.Errorf("%w: the thread's store: %v", ErrUnavailable, err)
}

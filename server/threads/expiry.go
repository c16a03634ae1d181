package threads

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
)

// ErrTTL refuses a thread TTL under a second (the Platform's ttl is in
// minutes: one rounded to nothing would keep the thread for ever).
var ErrTTL = server.NewError(protocol.ErrorCodeInvalidArgument, "", "threads: a thread's ttl is at least 1 second")

// SetTTL makes thread id live ttl after its record last changes (0: for
// ever), from now; ok is false when it does not exist.
func (cat *Catalog) SetTTL(ctx context.Context, id string, ttl time.Duration) (ThreadInfo, bool, error) {
	if ttl != 0 && ttl < time.Second {
		return ThreadInfo{}, false, fmt.Errorf("%w (%s)", ErrTTL, ttl)
	}
	return cat.edit(ctx, id, func(rec *server.ThreadRecord) error {
		rec.TTL = ttl
		return nil
	})
}

// startExpiry deletes, every Config.ThreadExpiryCheck, the threads whose
// TTL ran out and that have no run going on (tried again at the next
// check); it stops as the server closes. Each node checks: a delete is
// the same from any.
func (cat *Catalog) startExpiry() {
	if cat.st.Catalog == nil {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(cat.cfg.ThreadExpiryCheck)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				cat.expire(ctx)
			}
		}
	}()
	cat.host.OnClose(func(context.Context) { stop(); <-done })
}

// expire deletes the threads whose TTL ran out (one pass).
func (cat *Catalog) expire(ctx context.Context) int {
	now := cat.cfg.Now()
	var due []string
	_ = cat.st.Catalog.Records(ctx, func(rec server.ThreadRecord) bool {
		if rec.Expired(now) {
			due = append(due, rec.ID)
		}
		return ctx.Err() == nil
	})
	deleted := 0
	for _, id := range due {
		if ctx.Err() != nil {
			break
		}
		// Read again: a change since the scan moved its end.
		if rec, ok, err := cat.st.Catalog.Record(ctx, id); err != nil || !ok || !rec.Expired(cat.cfg.Now()) {
			continue
		}
		if ok, err := cat.Delete(ctx, id); err == nil && ok {
			deleted++
		} else if err != nil && !errors.Is(err, server.ErrThreadBusy) {
			continue // the store failed: the next check tries again
		}
	}
	return deleted
}

package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/agentstream/agentstream/auth"
	"golang.org/x/time/rate"
)

// maxRunBuckets bounds the principals whose run buckets are kept; past it
// the buckets of principals idle long enough to have refilled are dropped.
const maxRunBuckets = 100_000

// runQuota is MaxRunsPerMinute: a token bucket per principal.
type runQuota struct {
	perMinute int

	mu      sync.Mutex
	buckets map[string]*runBucket
}

type runBucket struct {
	lim  *rate.Limiter
	seen time.Time
}

// allow takes a token from subject's bucket.
func (q *runQuota) allow(subject string, now time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.buckets == nil {
		q.buckets = map[string]*runBucket{}
	}
	b := q.buckets[subject]
	if b == nil {
		if len(q.buckets) >= maxRunBuckets {
			for k, old := range q.buckets {
				if now.Sub(old.seen) >= time.Minute { // refilled: a new bucket is the same
					delete(q.buckets, k)
				}
			}
			if len(q.buckets) >= maxRunBuckets {
				return false
			}
		}
		b = &runBucket{lim: rate.NewLimiter(rate.Limit(float64(q.perMinute)/60), q.perMinute)}
		q.buckets[subject] = b
	}
	b.seen = now
	return b.lim.AllowN(now, 1)
}

// startQuota checks the run quota of the principal that ctx carries
// (auth.FromContext; none without authentication, and admins are exempt).
func (s *Server) startQuota(ctx context.Context) error {
	p := auth.FromContext(ctx)
	if p == nil || p.Admin {
		return nil
	}
	if s.runs.allow(p.Subject, s.cfg.Now()) {
		return nil
	}
	s.metrics.refused.add(LimitPrincipalRuns)
	return fmt.Errorf("%w: principal %q started more than %d runs in a minute (--max-runs-per-minute); retry later", ErrQuota, p.Subject, s.cfg.MaxRunsPerMinute)
}

package server

import (
	"context"
	"fmt"

	"github.com/agentstream/agentstream/auth"
)

// startQuota checks the run quota of the principal that ctx carries
// (auth.FromContext; none without authentication, and admins are exempt):
// Config.MaxRunsPerMinute, a token bucket per principal.
func (s *Server) startQuota(ctx context.Context) error {
	p := auth.FromContext(ctx)
	if p == nil || p.Admin {
		return nil
	}
	if s.runs.Allow(p.Subject, s.cfg.Now()) {
		return nil
	}
	s.metrics.refused.add(LimitPrincipalRuns)
	return fmt.Errorf("%w: principal %q started more than %d runs in a minute (--max-runs-per-minute); retry later", ErrQuota, p.Subject, s.cfg.MaxRunsPerMinute)
}

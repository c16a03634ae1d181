package redisstore

import (
	"fmt"
	"sync"
	"time"
)

// DefaultErrorSummaryEvery is how often a Redis outage's errors are
// summed up after the first is reported (Options.ErrorSummaryEvery).
const DefaultErrorSummaryEvery = 10 * time.Second

// errorLimiter hands the first error of a burst to report at once and the
// rest as one summary per interval, so that an outage, in which every
// command fails, is a few lines rather than thousands. A burst ends when
// an interval passes with no error.
type errorLimiter struct {
	report func(error)
	every  time.Duration
	now    func() time.Time

	mu       sync.Mutex
	since    time.Time // when the current interval started (zero: quiet)
	held     int       // errors since then, not reported
	last     error     // the newest of them
	reported bool      // the burst's first error was reported
}

func newErrorLimiter(report func(error), every time.Duration, now func() time.Time) *errorLimiter {
	if every <= 0 {
		every = DefaultErrorSummaryEvery
	}
	if now == nil {
		now = time.Now
	}
	return &errorLimiter{report: report, every: every, now: now}
}

// add takes one error: reported now when it starts a burst, otherwise
// counted, and the count reported once its interval is over.
func (l *errorLimiter) add(err error) {
	if err == nil {
		return
	}
	l.mu.Lock()
	now := l.now()
	var out error
	switch {
	case l.since.IsZero() || now.Sub(l.since) >= 2*l.every && l.held == 0:
		// A new burst: its first error at once.
		l.since, l.held, l.last = now, 0, nil
		out = err
	case now.Sub(l.since) >= l.every:
		out = summary(l.held+1, now.Sub(l.since), err)
		l.since, l.held, l.last = now, 0, nil
	default:
		l.held++
		l.last = err
	}
	l.mu.Unlock()
	if out != nil {
		l.report(out)
	}
}

// flush reports what is held, if its interval is over (the engine's
// health loop calls it, so a burst's tail is reported without a next
// error).
func (l *errorLimiter) flush() {
	l.mu.Lock()
	now := l.now()
	var out error
	if l.held > 0 && now.Sub(l.since) >= l.every {
		out = summary(l.held, now.Sub(l.since), l.last)
		l.since, l.held, l.last = now, 0, nil
	}
	l.mu.Unlock()
	if out != nil {
		l.report(out)
	}
}

func summary(n int, d time.Duration, last error) error {
	return fmt.Errorf("%d more errors in the last %s, the newest: %w", n, d.Round(time.Second), last)
}

package transport

import (
	"net"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// The defaults of Options.HTTPCommandRate, HTTPCommandBurst,
// HTTPStreamRate and HTTPStreamBurst.
const (
	DefaultHTTPCommandRate  = 1000
	DefaultHTTPCommandBurst = 10000
	DefaultHTTPStreamRate   = 100
	DefaultHTTPStreamBurst  = 1000
	DefaultAuthFailureRate  = 10
	DefaultAuthFailureBurst = 100
	// DefaultMaxStreamsPerPrincipal is Options.MaxStreamsPerPrincipal's
	// default.
	DefaultMaxStreamsPerPrincipal = 1000
)

// streamQuota counts the open streams and WebSockets of each principal.
type streamQuota struct {
	max  int
	mu   sync.Mutex
	open map[string]int
}

// take takes one of subject's slots, and returns the function that gives
// it back.
func (q *streamQuota) take(subject string) (func(), bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.open[subject] >= q.max {
		return nil, false
	}
	q.open[subject]++
	return func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		if q.open[subject]--; q.open[subject] <= 0 {
			delete(q.open, subject)
		}
	}, true
}

// maxLimiters bounds how many clients' buckets are kept at once; past it,
// buckets that have refilled (their clients idle) are dropped first, and
// a client that finds no room is refused as if over its rate.
const maxLimiters = 100_000

// commandLimiter is a token bucket per client (for commands, streams or
// failed authentications): per
// principal with authentication on, per remote IP without.
type commandLimiter struct {
	rate  rate.Limit
	burst int

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
}

func newCommandLimiter(perSecond float64, burst int) *commandLimiter {
	return &commandLimiter{rate: rate.Limit(perSecond), burst: burst, buckets: map[string]*bucket{}}
}

// allow takes a token from key's bucket.
func (l *commandLimiter) allow(key string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= maxLimiters {
			l.dropFull(now)
			if len(l.buckets) >= maxLimiters {
				return false
			}
		}
		b = &bucket{lim: rate.NewLimiter(l.rate, l.burst)}
		l.buckets[key] = b
	}
	b.seen = now
	return b.lim.AllowN(now, 1)
}

// exhausted reports whether key's bucket is empty, without taking a
// token.
func (l *commandLimiter) exhausted(key string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	return b != nil && b.lim.TokensAt(now) < 1
}

// dropFull forgets the buckets of clients idle long enough to have
// refilled: a new bucket would be the same.
func (l *commandLimiter) dropFull(now time.Time) {
	refill := time.Duration(float64(l.burst) / float64(l.rate) * float64(time.Second))
	for k, b := range l.buckets {
		if now.Sub(b.seen) >= refill {
			delete(l.buckets, k)
		}
	}
	if len(l.buckets) < maxLimiters/2 {
		m := make(map[string]*bucket, len(l.buckets)) // a Go map keeps the room of deleted entries
		for k, b := range l.buckets {
			m[k] = b
		}
		l.buckets = m
	}
}

// remoteIP is a request's client address without the port.
func remoteIP(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

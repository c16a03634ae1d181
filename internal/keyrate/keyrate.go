// Package keyrate owns token buckets kept per key (a client's address, a
// principal): the rate limits of the HTTP routes and of failed
// authentications, and the runs a principal may start. The buckets stay
// bounded however many keys come: idle keys' buckets make room, and a key
// that finds none is refused as if over its rate.
package keyrate

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// MaxKeys bounds how many keys' buckets are kept at once.
const MaxKeys = 100_000

// Limiter is a token bucket per key, filling at Rate a second up to
// Burst. It is safe for concurrent use.
type Limiter struct {
	Rate  rate.Limit
	Burst int

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
}

// New returns a Limiter of perSecond tokens a second, bursts of burst.
func New(perSecond float64, burst int) *Limiter {
	return &Limiter{Rate: rate.Limit(perSecond), Burst: burst, buckets: map[string]*bucket{}}
}

// Allow takes a token from key's bucket.
func (l *Limiter) Allow(key string, now time.Time) bool {
	return l.AllowN(key, 1, now)
}

// AllowN takes n tokens from key's bucket, or none when it holds fewer.
func (l *Limiter) AllowN(key string, n int, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= MaxKeys {
			l.dropFull(now)
			if len(l.buckets) >= MaxKeys {
				return false
			}
		}
		b = &bucket{lim: rate.NewLimiter(l.Rate, l.Burst)}
		l.buckets[key] = b
	}
	b.seen = now
	return b.lim.AllowN(now, n)
}

// Exhausted reports whether key's bucket is empty, without taking a
// token.
func (l *Limiter) Exhausted(key string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	return b != nil && b.lim.TokensAt(now) < 1
}

// Len is how many keys' buckets are kept.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// dropFull forgets the buckets of keys idle long enough to have refilled:
// a new bucket would be the same.
func (l *Limiter) dropFull(now time.Time) {
	refill := time.Duration(float64(l.Burst) / float64(l.Rate) * float64(time.Second))
	for k, b := range l.buckets {
		if now.Sub(b.seen) >= refill {
			delete(l.buckets, k)
		}
	}
	if len(l.buckets) < MaxKeys/2 {
		m := make(map[string]*bucket, len(l.buckets)) // a Go map keeps the room of deleted entries
		for k, b := range l.buckets {
			m[k] = b
		}
		l.buckets = m
	}
}

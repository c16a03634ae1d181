package transport

import (
	"net"
	"sync"
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

// remoteIP is a request's client address without the port.
func remoteIP(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

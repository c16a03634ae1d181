package wire

import "time"

// Observer hears what the transports do, for the metrics: the stream
// handlers (sse, ws) report their streams, deliveries, stages and
// refusals through it, the routes their refusals.
type Observer interface {
	// Opened says a stream (kind "sse") or a WebSocket ("websocket")
	// opened; the function it returns is called once as it closes.
	Opened(kind string) (closed func())
	// Delivered counts n events written to a client.
	Delivered(n int)
	// Stage times one stage of an event's way to the client (sampled).
	Stage(stage string, d time.Duration)
	// Refused counts a request or message refused by the limit named.
	Refused(limit string)
	// AuthRefused counts a refused authentication or authorization, by
	// reason (no_credential, invalid_credential, expired,
	// permission_denied).
	AuthRefused(reason string)
	// Webhook counts a run's webhook by outcome: sent, failed (every
	// attempt), refused (an address the egress guard does not dial).
	Webhook(outcome string)
}

// NopObserver hears nothing; embed it to hear only some of it.
type NopObserver struct{}

func (NopObserver) Opened(string) func()        { return func() {} }
func (NopObserver) Delivered(int)               {}
func (NopObserver) Stage(string, time.Duration) {}
func (NopObserver) Refused(string)              {}
func (NopObserver) AuthRefused(string)          {}
func (NopObserver) Webhook(string)              {}

// Observers tells each of its observers, in order (and closes what they
// opened in the reverse order).
type Observers []Observer

func (os Observers) Opened(kind string) func() {
	closers := make([]func(), len(os))
	for i, o := range os {
		closers[i] = o.Opened(kind)
	}
	return func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
}

func (os Observers) Delivered(n int) {
	for _, o := range os {
		o.Delivered(n)
	}
}

func (os Observers) Stage(stage string, d time.Duration) {
	for _, o := range os {
		o.Stage(stage, d)
	}
}

func (os Observers) Refused(limit string) {
	for _, o := range os {
		o.Refused(limit)
	}
}

func (os Observers) AuthRefused(reason string) {
	for _, o := range os {
		o.AuthRefused(reason)
	}
}

func (os Observers) Webhook(outcome string) {
	for _, o := range os {
		o.Webhook(outcome)
	}
}

// Join returns an Observer that tells a and then b, leaving out a nil one.
func Join(a, b Observer) Observer {
	switch {
	case a == nil && b == nil:
		return NopObserver{}
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return Observers{a, b}
}

package redisstore

import (
	"context"
	"time"
)

// Health pings Redis and tells the server when it goes and comes back
// (server.EngineHost.SetUnavailable): while it is gone, streams end with an error
// and commands are refused as unavailable, rather than served from a
// store that is not there; nothing needs a restart when it returns.
type Health struct {
	e     *Engine
	set   func(error)
	every time.Duration
	stop  chan struct{}
	done  chan struct{}
}

// Health starts watching Redis every interval (500ms when 0) for set
// (the server's EngineHost.SetUnavailable): three failed pings in a row (each given
// 2 s: a Redis that is only slow, under load, is not taken for lost) make
// it unavailable, one answer available again. Close it.
func (e *Engine) Health(set func(error), every time.Duration) *Health {
	if every <= 0 {
		every = 500 * time.Millisecond
	}
	h := &Health{e: e, set: set, every: every, stop: make(chan struct{}), done: make(chan struct{})}
	go h.run()
	return h
}

// Close stops watching.
func (h *Health) Close() {
	close(h.stop)
	<-h.done
}

func (h *Health) run() {
	defer close(h.done)
	tick := time.NewTicker(h.every)
	defer tick.Stop()
	failed := 0
	for {
		select {
		case <-h.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := h.e.Ping(ctx)
		cancel()
		switch {
		case err == nil:
			if failed >= 3 {
				h.set(nil)
			}
			failed = 0
		default:
			failed++
			if failed == 3 {
				h.set(err)
			}
		}
	}
}

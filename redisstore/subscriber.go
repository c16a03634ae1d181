package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// subscriber keeps one sharded pub/sub connection up for a changing set
// of channels: it subscribes to what is added, unsubscribes from what is
// removed, and after a lost connection reconnects with a backoff and
// subscribes again to all of them. One goroutine owns the connection;
// Close stops it.
type subscriber struct {
	e         *Engine
	onMessage func(rueidis.PubSubMessage)
	// onSubscribed, when set, is called with the channels each successful
	// SSUBSCRIBE covered (to catch up on what was published before).
	onSubscribed func(chans []string)
	onErr        func(error)

	mu    sync.Mutex
	chans map[string]struct{}
	ops   []subOp // changes for the goroutine to carry out, in order
	wake  chan struct{}
	stop  chan struct{}
	done  chan struct{}
}

type subOp struct {
	channel string
	add     bool
}

func newSubscriber(e *Engine, onMessage func(rueidis.PubSubMessage), onErr func(error)) *subscriber {
	return &subscriber{e: e, onMessage: onMessage, onErr: onErr, chans: map[string]struct{}{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// start connects and subscribes to the channels added so far, then
// returns; the goroutine goes on.
func (s *subscriber) start() {
	ready := make(chan struct{})
	go s.run(ready)
	<-ready
}

func (s *subscriber) close() {
	close(s.stop)
	<-s.done
}

// change adds or removes a channel; it does not wait for Redis.
func (s *subscriber) change(channel string, add bool) {
	s.mu.Lock()
	if add {
		s.chans[channel] = struct{}{}
	} else {
		delete(s.chans, channel)
	}
	s.ops = append(s.ops, subOp{channel, add})
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *subscriber) fail(err error) {
	if err != nil && s.onErr != nil {
		s.onErr(err)
	}
}

func (s *subscriber) run(ready chan struct{}) {
	defer close(s.done)
	backoff := 50 * time.Millisecond
	first := true
	for {
		dc, release := s.e.c.Dedicate()
		lost := dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: s.onMessage})
		s.mu.Lock()
		all := make([]string, 0, len(s.chans))
		for ch := range s.chans {
			all = append(all, ch)
		}
		s.ops = nil // all of them are subscribed below
		s.mu.Unlock()
		if s.subscribe(dc, all) {
			backoff = 50 * time.Millisecond
		}
		if first {
			close(ready)
			first = false
		}
	serving:
		for {
			select {
			case <-s.wake:
				s.apply(dc)
			case err := <-lost:
				release()
				s.fail(err)
				select {
				case <-time.After(backoff):
					backoff = min(2*backoff, 2*time.Second)
				case <-s.stop:
					return
				}
				break serving
			case <-s.stop:
				release()
				return
			}
		}
	}
}

// apply carries out the changes made since the last time, in order.
func (s *subscriber) apply(dc rueidis.DedicatedClient) {
	s.mu.Lock()
	ops := s.ops
	s.ops = nil
	s.mu.Unlock()
	var add []string
	for _, o := range ops {
		if o.add {
			add = append(add, o.channel)
			continue
		}
		if len(add) > 0 {
			s.subscribe(dc, add)
			add = nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s.fail(dc.Do(ctx, dc.B().Sunsubscribe().Channel(o.channel).Build()).Error())
		cancel()
	}
	s.subscribe(dc, add)
}

// subscribe subscribes to chans, a thousand at a time.
func (s *subscriber) subscribe(dc rueidis.DedicatedClient, chans []string) bool {
	for i := 0; i < len(chans); i += 1000 {
		part := chans[i:min(i+1000, len(chans))]
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := dc.Do(ctx, dc.B().Ssubscribe().Channel(part...).Build()).Error()
		cancel()
		if err != nil {
			s.fail(err)
			return false
		}
		if s.onSubscribed != nil {
			s.onSubscribed(part)
		}
	}
	return true
}

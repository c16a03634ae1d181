package redisstore

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/agentstream/agentstream/server"
	"github.com/redis/rueidis"
)

// Live follows, for one node, the threads it holds: it subscribes to each
// one's sharded channel (SSUBSCRIBE; a Log with Publish set sends every
// event there) and hands what other nodes publish to the server's Ingest.
// It is a server.Watcher. A node subscribes only to the threads it holds,
// so publishing costs the same however many nodes there are.
//
// Pub/sub was chosen over each node reading the streams (XREAD BLOCK on
// every watched key) because a node may hold tens of thousands of threads:
// one subscription connection serves them all, and an event costs one
// SPUBLISH, in the batch that carries its XADD. Pub/sub delivers at most
// once; a gap (a message lost while the connection was down) is filled
// from the stream when the next event arrives (server.Ingest).
//
// When the connection is lost Live reconnects, with a backoff, and
// subscribes again to every thread it holds.
type Live struct {
	e   *Engine
	srv Ingester

	onErr func(error)

	mu      sync.Mutex
	threads map[string]struct{}
	ops     []op          // Watch and Unwatch calls for run to carry out, in order
	wake    chan struct{} // ops wait
	stop    chan struct{}
	done    chan struct{}
}

// Ingester is what Live hands events to: a *server.Server.
type Ingester interface {
	// Ingest delivers an event another node published.
	Ingest(thread string, ev *server.Event)
	// CatchUp delivers what the thread's log holds beyond what this node
	// has: what was published while the subscription was being made.
	CatchUp(thread string)
}

type op struct {
	thread string
	watch  bool
}

var _ server.Watcher = (*Live)(nil)

// Live starts following threads for srv (set it as the server's
// Config.Watcher, then call Start with the server); Close it. onErr, when
// set, hears of connection losses.
func (e *Engine) Live(onErr func(error)) *Live {
	return &Live{e: e, onErr: onErr, threads: map[string]struct{}{}, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// Start connects and hands events to srv. The server is made with the
// Live as its Watcher first, so Watch may be called before Start.
func (l *Live) Start(srv Ingester) {
	l.srv = srv
	ready := make(chan struct{})
	go l.run(ready)
	<-ready
}

// Close stops following.
func (l *Live) Close() {
	close(l.stop)
	<-l.done
}

func (l *Live) channel(thread string) string { return l.e.key(thread, "live") }

func (l *Live) thread(channel string) string {
	s := strings.TrimPrefix(channel, l.e.prefix+":{")
	return strings.TrimSuffix(s, "}:live")
}

// run keeps one subscription connection up.
func (l *Live) run(ready chan struct{}) {
	defer close(l.done)
	backoff := 50 * time.Millisecond
	first := true
	for {
		dc, release := l.e.c.Dedicate()
		lost := dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: l.message})
		l.mu.Lock()
		threads := make([]string, 0, len(l.threads))
		for th := range l.threads {
			threads = append(threads, th)
		}
		l.ops = nil // all of them are subscribed below
		l.mu.Unlock()
		if l.subscribe(dc, threads) {
			backoff = 50 * time.Millisecond
		}
		if first {
			close(ready)
			first = false
		}
	serving:
		for {
			select {
			case <-l.wake:
				l.apply(dc)
			case err := <-lost:
				release()
				if err != nil && l.onErr != nil {
					l.onErr(err)
				}
				select {
				case <-time.After(backoff):
					backoff = min(2*backoff, 2*time.Second)
				case <-l.stop:
					return
				}
				break serving
			case <-l.stop:
				release()
				return
			}
		}
	}
}

// apply carries out the Watch and Unwatch calls made since the last time.
func (l *Live) apply(dc rueidis.DedicatedClient) {
	l.mu.Lock()
	ops := l.ops
	l.ops = nil
	l.mu.Unlock()
	var sub []string
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, o := range ops {
		if o.watch {
			sub = append(sub, o.thread)
			continue
		}
		if len(sub) > 0 {
			l.subscribe(dc, sub)
			sub = nil
		}
		_ = dc.Do(ctx, dc.B().Sunsubscribe().Channel(l.channel(o.thread)).Build()).Error()
	}
	l.subscribe(dc, sub)
}

// subscribe subscribes to the threads' channels, then catches each
// thread up on what was published before the subscription took effect.
func (l *Live) subscribe(dc rueidis.DedicatedClient, threads []string) bool {
	if len(threads) == 0 {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := 0; i < len(threads); i += 1000 {
		part := threads[i:min(i+1000, len(threads))]
		chans := make([]string, len(part))
		for j, th := range part {
			chans[j] = l.channel(th)
		}
		if err := dc.Do(ctx, dc.B().Ssubscribe().Channel(chans...).Build()).Error(); err != nil {
			if l.onErr != nil {
				l.onErr(err)
			}
			return false
		}
	}
	for _, th := range threads {
		l.srv.CatchUp(th)
	}
	return true
}

func (l *Live) message(m rueidis.PubSubMessage) {
	ev, err := server.DecodeEvent([]byte(m.Message))
	if err != nil {
		if l.onErr != nil {
			l.onErr(err)
		}
		return
	}
	l.srv.Ingest(l.thread(m.Channel), ev)
}

// Watch implements server.Watcher: the node holds the thread now. It
// does not wait: Live's goroutine subscribes.
func (l *Live) Watch(thread string) { l.queue(op{thread, true}) }

// Unwatch implements server.Watcher.
func (l *Live) Unwatch(thread string) { l.queue(op{thread, false}) }

func (l *Live) queue(o op) {
	l.mu.Lock()
	if o.watch {
		l.threads[o.thread] = struct{}{}
	} else {
		delete(l.threads, o.thread)
	}
	l.ops = append(l.ops, o)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

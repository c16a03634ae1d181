package redisstore

import (
	"strings"
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
// from the stream when the next event arrives (server.Ingest), and every
// subscription made is followed by a catch-up (server.CatchUp).
//
// When the connection is lost Live reconnects, with a backoff, and
// subscribes again to every thread it holds. And every CatchUpEvery it
// reads the streams of the threads whose run, on another node, has not
// ended and sent nothing for CatchUpEvery (server.RemoteRuns): a run's
// last events, lost in a pub/sub outage, have no next event to bring
// them. A run whose events still arrive is not read: its next event
// fills any gap (server.Ingest), and reading every followed run's stream
// every second would cost Redis a round trip per thread per second, as
// much as the events of a thread written a few times a second.
type Live struct {
	e    *Engine
	sub  *subscriber
	srv  server.IngestHost
	stop chan struct{}
	done chan struct{}
}

// CatchUpEvery is how often Live reads the streams of the followed threads
// whose remote run has not ended, and how long such a run must have sent
// nothing for its stream to be read: a run's last event lost in a pub/sub
// outage reaches this node within two CatchUpEvery.
const CatchUpEvery = time.Second

var _ server.Watcher = (*Live)(nil)

// Live returns a follower of threads: a server's Watcher, started with
// the server's IngestHost and closed after the server (the engine New
// makes does both). onErr, when set, hears of connection losses.
func (e *Engine) Live(onErr func(error)) *Live {
	l := &Live{e: e, stop: make(chan struct{}), done: make(chan struct{})}
	l.sub = newSubscriber(e, l.message, onErr)
	l.sub.onSubscribed = func(chans []string) {
		threads := make([]string, len(chans))
		for i, ch := range chans {
			threads[i] = l.thread(ch)
		}
		// What cannot be read now comes with the thread's next event
		// (server.Ingest fills the gap).
		_ = l.srv.CatchUp(threads...)
	}
	return l
}

// Start connects and hands events to the server srv.
func (l *Live) Start(srv server.IngestHost) {
	l.srv = srv
	l.sub.start()
	go l.sweep()
}

// Close stops following.
func (l *Live) Close() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
		if l.srv != nil {
			<-l.done
		}
	}
	l.sub.close()
}

// sweep catches up, every CatchUpEvery, the threads whose remote run has
// not ended.
func (l *Live) sweep() {
	defer close(l.done)
	tick := time.NewTicker(CatchUpEvery)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		quiet := l.srv.RemoteRuns(CatchUpEvery)
		for len(quiet) > 0 {
			select {
			case <-l.stop:
				return
			default:
			}
			part := quiet[:min(len(quiet), headsPerRoundTrip)]
			quiet = quiet[len(part):]
			_ = l.srv.CatchUp(part...) // what cannot be read now, the next sweep reads
		}
	}
}

func (l *Live) channel(thread string) string { return l.e.key(thread, "live") }

func (l *Live) thread(channel string) string {
	s := strings.TrimPrefix(channel, l.e.prefix+":{")
	return strings.TrimSuffix(s, "}:live")
}

func (l *Live) message(m rueidis.PubSubMessage) {
	ev, err := server.DecodeEvent([]byte(m.Message))
	if err != nil {
		l.sub.fail(err)
		return
	}
	l.srv.Ingest(l.thread(m.Channel), ev)
}

// Watch implements server.Watcher: the node holds the thread now. It
// does not wait for Redis.
func (l *Live) Watch(thread string) { l.sub.change(l.channel(thread), true) }

// Unwatch implements server.Watcher.
func (l *Live) Unwatch(thread string) { l.sub.change(l.channel(thread), false) }

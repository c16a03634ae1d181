package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
)

// ErrClosed is returned by a closed session's Next once its queued events
// are read.
var ErrClosed = errors.New("server: session closed")

// ErrCredentialExpired ends a session whose credential expired
// ([Session.ExpireAt]): the transport tells its client so (an error, then
// WebSocket close 4401 or the end of an SSE stream).
var ErrCredentialExpired = errors.New("server: credential expired; connect again with a new one")

// SlowConsumerError ends a session whose queue overflowed: it read too
// slowly to keep up, or asked for a replay larger than its queue. LastSeq
// is the last event queued for it, so a reader that drains the queue and
// subscribes again with that cursor loses nothing still buffered.
type SlowConsumerError struct {
	LastSeq   uint64
	QueueSize int
}

func (e *SlowConsumerError) Error() string {
	return fmt.Sprintf("server: slow consumer: more than %d bytes queued; resume after seq %d", e.QueueSize, e.LastSeq)
}

// Session is one reader of one thread, and the unit every transport
// delivers through: a WebSocket connection, an SSE stream (a session with
// one subscription) and an in-process client each have one.
//
// A session holds any number of subscriptions (filters) and merges them
// into one stream: the thread's events that match any of them, in
// sequence order, each once. Subscribing queues the new subscription's
// replay (a missed-events notice when its cursor is older than the buffer,
// the current values when it selects them, then the buffered events after
// its cursor), merged in sequence order with whatever is still unread;
// live events follow with no gap and no duplicate.
//
// Publishing never waits for a session: events go into one queue bounded
// by bytes ([Config.QueueBytes]), and a session whose queue would overflow
// with live events is ended with a [*SlowConsumerError] after what it has
// queued. A replay is paced by its reader instead: what does not fit the
// queue is read from the log a part at a time as the reader makes room,
// however long the history, and live events follow once it has caught up. Its cost per event does not depend on how many subscriptions
// it has: identical filter terms of its subscriptions share one entry of
// the thread's routing index, and an event several of them match is queued
// once.
//
// A transport reads with [Session.TryNext] when [Session.SetNotify]'s
// function tells it events wait; an in-process reader may instead block
// in [Session.Next]. A session is read by one goroutine at a time; its
// other methods are safe for concurrent use. When the connection drops,
// [Session.Detach] keeps its subscriptions restorable by
// subscription.reconnect for Config.ReconnectGrace.
type Session struct {
	srv      *Server
	threadID string
	t        atomic.Pointer[thread] // set by the first subscription

	// Guarded by the thread's lock.
	subs    map[string]*subscription // by subscription id
	subsGen uint64                   // counts the changes of subs (a refill read for other ones is read again)
	terms   map[term]*termEntry      // this session's entries in the thread's index
	indexed bool                     // in the thread's index and sessions
	offered uint64                   // the last event delivery handed it

	mu         sync.Mutex
	q          []queued // q[qhead:] is unread, in order
	qhead      int
	qbytes     int
	counted    int    // the part of qbytes the server's total holds (whole queueSteps)
	lastQueued uint64 // the newest seq queued: an event is queued at most once
	// behind says the session is reading a replay larger than its queue
	// from the log, a queue's worth at a time as its reader makes room
	// (refill): live events are not queued meanwhile (the log holds
	// them), and everything up to lastQueued is queued or did not match.
	behind    bool
	refilling bool   // a refill is under way
	lastRead  uint64 // the newest seq read
	closed    bool   // nothing more is queued; err says why
	err       error
	notify    SessionNotify
	ready     chan struct{} // wakes Next when no notify function is set
	expiry    *time.Timer   // ends the session when its credential expires
}

// queued is an entry of a session's queue. key orders it: 2*seq for an
// event; 2*after+1 for a notice about a replay from cursor after, which
// goes right before the events after that cursor.
type queued struct {
	e   *Event
	key uint64
}

// subscription is one filter of a session.
type subscription struct {
	id     string
	filter channels.Filter
	terms  []term
}

// term is one entry of a filter in the routing index: a channel key, a
// namespace prefix and a depth.
type term struct {
	channel string // "" for every channel
	prefix  string // channels.Namespace.Key of the prefix
	depth   int
}

// termEntry is a term in the thread's index, shared by the session's
// subscriptions that have it.
type termEntry struct {
	id     uint64
	filter channels.Filter // the term alone
	refs   int
}

// SessionNotify tells a transport when to read a session, and what was
// queued, so that a transport that paces its writes can decide when to
// write (the session knows nothing of pacing). The functions run on the
// goroutine that queued events (a publisher, or a command) and must not
// block.
type SessionNotify struct {
	// Ready is called when events may be waiting or the session ended.
	Ready func()
	// Subscribed, when set, is called instead of Ready when a
	// subscription is added (with a replay or without one). runEnded says
	// what it queued holds the end of a run (its root lifecycle,
	// completed or failed).
	Subscribed func(runEnded bool)
	// RunEnded, when set, is called instead of Ready when a live event
	// that ends a run is queued.
	RunEnded func()
}

// detachedSub remembers a subscription of a dropped session.
type detachedSub struct {
	thread  string
	filter  channels.Filter
	last    Cursor // the last event the dropped session read
	expires time.Time
}

// NewSession opens a session on thread threadID. The thread is created by
// the session's first subscription (or by a run.start).
func (s *Server) NewSession(threadID string) *Session {
	return &Session{srv: s, threadID: threadID, subs: map[string]*subscription{}, terms: map[term]*termEntry{}, ready: make(chan struct{}, 1)}
}

// Subscribe opens a session on thread id with one subscription, to the
// events that match f after cursor (every buffered event when cursor is
// nil): an SSE stream, or an in-process reader of one filter. The thread
// is created if needed, so a client may subscribe before the first run.
// replayed counts the buffered events queued for replay.
func (s *Server) Subscribe(id string, f channels.Filter, cursor *Cursor) (ss *Session, replayed int, err error) {
	ss = s.NewSession(id)
	if _, replayed, err = ss.Subscribe(f, cursor); err != nil {
		ss.Close()
		return nil, 0, err
	}
	return ss, replayed, nil
}

// Thread is the session's thread.
func (ss *Session) Thread() string { return ss.threadID }

// lockThread returns the session's thread, locked, creating it. A
// session with no subscription left may outlive its thread (the sweeper
// forgets idle threads): it then moves to the thread that replaces it.
func (ss *Session) lockThread() (*thread, error) {
	if t := ss.t.Load(); t != nil {
		t.mu.Lock()
		if !t.evicted {
			return t, nil
		}
		t.mu.Unlock()
	}
	t, err := ss.srv.lockThread(ss.threadID)
	if err != nil {
		return nil, err
	}
	ss.t.Store(t) // the server hands out one live thread per id
	return t, nil
}

// Subscribe adds a subscription to the events that match f, replaying the
// buffered ones after cursor (all of them when cursor is nil) merged into
// what the session has not read yet. It returns the subscription's id and
// how many buffered events it queued for replay.
func (ss *Session) Subscribe(f channels.Filter, cursor *Cursor) (id string, replayed int, err error) {
	return ss.subscribe(ss.srv.cfg.NewID("sub_"), f, cursor)
}

func (ss *Session) subscribe(id string, f channels.Filter, cursor *Cursor) (string, int, error) {
	if err := ss.srv.Unavailable(); err != nil {
		return "", 0, err
	}
	// The replay is read without the thread's lock (the log and the state
	// may be a store's I/O away), as of where the stream stood; the
	// subscription joins the index with the lock taken again, after what
	// was published meanwhile. A stream that moved to another epoch, or a
	// session whose long replay moved on, meanwhile, is read again.
	var (
		t                    *thread
		replay               []queued
		after, upTo, reached uint64
		replayed             int
		more                 bool
	)
	for {
		var err error
		if t, err = ss.lockThread(); err != nil {
			return "", 0, err
		}
		if err := ss.canSubscribe(); err != nil {
			t.mu.Unlock()
			return "", 0, err
		}
		// A session reading a long replay (behind) takes the new
		// subscription's events after what it queued with the rest of it.
		ss.mu.Lock()
		budget, behind := ss.replayBudget(), ss.behind
		upTo = t.acked
		if behind {
			upTo = ss.lastQueued
		}
		ss.mu.Unlock()
		v := t.view()
		t.mu.Unlock()
		replay, after, replayed, reached, more, err = v.replay(f, cursor, upTo, budget)
		if err != nil {
			return "", 0, err
		}
		t.mu.Lock()
		if t.evicted {
			// Forgotten meanwhile: deleted, the subscription fails (a
			// replacement made now would read the data being deleted);
			// forgotten idle (the sweeper), it is made on the thread that
			// replaces it.
			deleted := t.deleted
			t.mu.Unlock()
			if deleted {
				return "", 0, ErrThreadDeleted
			}
			continue
		}
		ss.mu.Lock()
		moved := ss.behind != behind || behind && ss.lastQueued != upTo
		ss.mu.Unlock()
		if t.epoch != v.epoch || moved {
			t.mu.Unlock()
			continue
		}
		if err := ss.canSubscribe(); err != nil {
			t.mu.Unlock()
			return "", 0, err
		}
		if !behind && !more && t.acked > upTo {
			// Published while the replay was read: the log's newest events,
			// which every engine serves from memory.
			var n int
			replay, n, reached, more, err = t.view().history(replay, func(e *Event) bool { return f.Matches(e.Channel, e.Name, e.Namespace) }, upTo, false, t.acked, budget, uint64(t.srv.cfg.Now().UnixMilli()))
			if err != nil {
				t.mu.Unlock()
				return "", 0, err
			}
			replayed += n
			upTo = t.acked
		}
		break
	}
	defer t.mu.Unlock()
	sub := &subscription{id: id, filter: f}
	ss.subs[id] = sub
	ss.subsGen++
	ss.index(t, sub)
	t.srv.metrics.subscribes.Add(1)
	if replayed > 0 {
		t.srv.metrics.replays.Add(1)
	}
	t.lastActive = t.srv.cfg.Now()
	if ss.merge(replay, upTo, after, reached, more, true) {
		t.cutOff(ss)
	}
	if u := ss.srv.cfg.Upstream; u != nil {
		u.Watch(ss.threadID)
	}
	return id, replayed, nil
}

// canSubscribe refuses a subscription to a closed session or one with
// its most subscriptions. The caller holds the thread's lock.
func (ss *Session) canSubscribe() error {
	ss.mu.Lock()
	done := ss.closed
	ss.mu.Unlock()
	if done {
		return ErrClosed
	}
	if len(ss.subs) >= ss.srv.cfg.MaxSessionSubscriptions {
		ss.srv.metrics.refused.add(LimitSessionSubscriptions)
		return fmt.Errorf("%w: %d, the most one connection may have (--max-subscriptions)", ErrTooManySubscriptions, len(ss.subs))
	}
	return nil
}

// index adds sub's terms to the thread's index, sharing the entries the
// session already has. The caller holds t.mu.
func (ss *Session) index(t *thread, sub *subscription) {
	if !ss.indexed {
		ss.indexed = true
		t.sessions[ss] = struct{}{}
	}
	t.nsubs++
	chans := sub.filter.Channels
	if len(chans) == 0 {
		chans = []string{""}
	}
	prefixes := sub.filter.Namespaces
	if len(prefixes) == 0 {
		prefixes = []channels.Namespace{nil}
	}
	depth := sub.filter.Depth
	if depth < 0 {
		depth = channels.Unlimited
	}
	for _, c := range chans {
		for _, p := range prefixes {
			k := term{channel: c, prefix: p.Key(), depth: depth}
			if p == nil {
				k.prefix = "\x00root" // distinct from the key of a one-segment prefix ""
			}
			sub.terms = append(sub.terms, k)
			if e := ss.terms[k]; e != nil {
				e.refs++
				continue
			}
			tf := channels.Filter{Depth: depth}
			if c != "" {
				tf.Channels = []string{c}
			}
			if p != nil {
				tf.Namespaces = []channels.Namespace{p}
			}
			e := &termEntry{id: t.srv.nextSubID.Add(1), filter: tf, refs: 1}
			ss.terms[k] = e
			t.index.Add(e.id, tf, ss)
		}
	}
}

// unindex removes sub's terms from the thread's index. The caller holds
// t.mu.
func (ss *Session) unindex(t *thread, sub *subscription) {
	if !ss.indexed {
		return
	}
	t.nsubs--
	for _, k := range sub.terms {
		e := ss.terms[k]
		if e == nil {
			continue
		}
		if e.refs--; e.refs == 0 {
			t.index.Remove(e.id, e.filter)
			delete(ss.terms, k)
		}
	}
}

// leave takes the session out of the thread: its index entries, its
// subscriptions' count. Its subscriptions stay listed (for Detach). The
// caller holds t.mu.
func (ss *Session) leave(t *thread) {
	if !ss.indexed {
		return
	}
	for _, sub := range ss.subs {
		ss.unindex(t, sub)
	}
	ss.indexed = false
	delete(t.sessions, ss)
	t.lastActive = t.srv.cfg.Now()
}

// Unsubscribe ends subscription id; events it already queued may still be
// read. It reports false when the session has no such subscription.
func (ss *Session) Unsubscribe(id string) bool {
	t := ss.t.Load()
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	sub := ss.subs[id]
	if sub == nil {
		return false
	}
	delete(ss.subs, id)
	ss.subsGen++
	ss.unindex(t, sub)
	if len(ss.subs) == 0 {
		ss.leave(t) // a session with no subscription keeps no thread alive
	}
	t.lastActive = t.srv.cfg.Now()
	return true
}

// Subscriptions lists the ids of the session's subscriptions.
func (ss *Session) Subscriptions() []string {
	t := ss.t.Load()
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(ss.subs))
	for id := range ss.subs {
		out = append(out, id)
	}
	return out
}

// enqueue queues a live event. It runs under the thread's lock (events
// come in sequence order) and never blocks; it reports true when this
// event overflowed the queue and ended the session.
func (ss *Session) enqueue(e *Event) (cutOff bool) { return ss.push(e, e.Seq, e.Seq<<1) }

// enqueueNotice queues a notice (an event without a sequence number) that
// goes before event next; it reports whether the session overflowed.
func (ss *Session) enqueueNotice(e *Event, next uint64) (cutOff bool) {
	return ss.push(e, next, (next-1)<<1|1)
}

// restartAt queues notice (a reset) and takes events after base from now
// on, though base is below what it queued: the stream went on in a new
// epoch (thread.restart). It reports whether the session overflowed.
func (ss *Session) restartAt(notice *Event, base uint64) (cutOff bool) {
	ss.mu.Lock()
	ss.lastQueued, ss.behind = base, false // the rest of the old epoch is gone
	ss.mu.Unlock()
	return ss.enqueueNotice(notice, base+1)
}

// push queues e under key unless the session is closed or has queued
// event seq already; e's own sequence number, if any, becomes the last
// queued. It reports true when e overflowed the queue and ended the
// session.
func (ss *Session) push(e *Event, seq, key uint64) (cutOff bool) {
	ss.mu.Lock()
	if ss.closed || seq <= ss.lastQueued || ss.behind {
		ss.mu.Unlock()
		return false // queued already, or read from the log later (refill)
	}
	if ss.qbytes+e.Size() > ss.srv.cfg.QueueBytes && ss.unread() > 0 {
		ss.closeLocked(&SlowConsumerError{LastSeq: ss.lastQueued, QueueSize: ss.srv.cfg.QueueBytes})
		n := ss.notify.Ready
		ss.mu.Unlock()
		ss.signal(n)
		return true
	}
	if ss.overShare(e.Size()) {
		ss.cutForTotal()
		n := ss.notify.Ready
		ss.mu.Unlock()
		ss.signal(n)
		return true
	}
	ss.q = append(ss.q, queued{e: e, key: key})
	ss.addQueued(e.Size())
	if e.Seq != 0 {
		ss.lastQueued = e.Seq
	}
	n := ss.notify.Ready
	if ss.notify.RunEnded != nil && e.Seq != 0 && e.EndsRun() {
		n = ss.notify.RunEnded
	}
	ss.mu.Unlock()
	ss.signal(n)
	return false
}

func (ss *Session) unread() int { return len(ss.q) - ss.qhead }

// queueStep is the unit in which a session's queue counts in the server's
// total (Config.QueueTotalBytes): a reader that keeps up, whose queue
// stays under a step, never touches the shared counter, so delivering an
// event costs no write to memory all sessions share.
const queueStep = 16 << 10

// addQueued counts n more bytes (n < 0: fewer) in the session's queue,
// and, while the session is open, its whole steps in the server's total.
// ss.mu held.
func (ss *Session) addQueued(n int) {
	ss.qbytes += n
	if ss.closed {
		return // an ended session's queue left the total as it ended
	}
	if steps := ss.qbytes &^ (queueStep - 1); steps != ss.counted {
		ss.srv.queued.Add(int64(steps - ss.counted))
		switch {
		case ss.counted == 0:
			ss.srv.queuing.Add(1)
		case steps == 0:
			ss.srv.queuing.Add(-1)
		}
		ss.counted = steps
	}
}

// closeLocked ends the session with err: what it has queued can still be
// read but leaves the server's total. ss.mu held, ss.closed false.
func (ss *Session) closeLocked(err error) {
	ss.closed, ss.err = true, err
	if ss.counted > 0 {
		ss.srv.queued.Add(-int64(ss.counted))
		ss.srv.queuing.Add(-1)
		ss.counted = 0
	}
}

// overShare reports whether queueing n more bytes would take the server
// past Config.QueueTotalBytes while this session already holds more than
// its share of it; a queue under one step never does. ss.mu held.
func (ss *Session) overShare(n int) bool {
	if ss.counted == 0 {
		return false
	}
	total := ss.srv.cfg.QueueTotalBytes
	if ss.srv.queued.Load()+int64(n) <= total {
		return false
	}
	return int64(ss.qbytes) >= total/max(1, ss.srv.queuing.Load())
}

// cutForTotal ends the session as a slow consumer because the server's
// queues are full and it holds more than its share: its unread queue is
// dropped at once, and it resumes after the last event it read. ss.mu
// held.
func (ss *Session) cutForTotal() {
	ss.srv.metrics.refused.add(LimitQueueTotal)
	ss.closeLocked(&SlowConsumerError{LastSeq: ss.lastRead, QueueSize: int(ss.srv.cfg.QueueTotalBytes)})
	clear(ss.q)
	ss.q, ss.qhead, ss.qbytes = nil, 0, 0
}

// merge adds a replay from cursor after (in key order) to the unread
// queue, keeping it in order with each event once. A whole replay marks
// everything up to head (the thread's last seq) queued; one with more to
// come (a part of a longer history) marks what it reached, and the
// session reads the rest from the log as its reader makes room (behind).
// A replay that does not fit the server's total for queues is cut after
// what fits and ends the session as a slow consumer, to resume after the
// last replayed event queued: merge then reports true. subscribed says
// the replay is a new subscription's (Notify.Subscribed is told), not a
// refill. The caller holds the thread's lock.
func (ss *Session) merge(replay []queued, head, after, reached uint64, more, subscribed bool) (cutOff bool) {
	ss.mu.Lock()
	if len(replay) == 0 { // nothing to merge: only the live cursor moves
		if head > ss.lastQueued {
			ss.lastQueued = head
		}
		done := ss.notify.Subscribed
		ss.mu.Unlock()
		if done != nil && subscribed {
			done(false) // the client's other subscribes may follow
		}
		return false
	}
	unread := ss.q[ss.qhead:]
	if more {
		// What the session queued past the part replayed now (other
		// subscriptions' live events) comes again, in order, with the
		// rest of the history.
		for len(unread) > 0 && unread[len(unread)-1].key > reached<<1 {
			ss.addQueued(-unread[len(unread)-1].e.Size())
			unread = unread[:len(unread)-1]
		}
	}
	out := make([]queued, 0, len(unread)+len(replay))
	i, j := 0, 0
	last := after
	runEnded := false
	for i < len(unread) || j < len(replay) {
		if j == len(replay) || (i < len(unread) && unread[i].key <= replay[j].key) {
			if j < len(replay) && unread[i].key == replay[j].key && unread[i].key&1 == 0 {
				j++ // the same event, already unread
			}
			out = append(out, unread[i])
			i++
			continue
		}
		r := replay[j]
		j++
		if size := r.e.Size(); ss.overShare(size) && len(out) > 0 {
			cutOff = true
			// What fits of the replay stays; the rest of the unread queue
			// (other subscriptions' events) is kept too.
			for ; i < len(unread); i++ {
				out = append(out, unread[i])
			}
			break
		}
		ss.addQueued(r.e.Size())
		if r.e.Seq > 0 {
			last = r.e.Seq
		}
		runEnded = runEnded || r.e.EndsRun()
		out = append(out, r)
	}
	clear(ss.q[ss.qhead+len(unread):])
	ss.q, ss.qhead = out, 0
	n := ss.notify.Ready
	if ss.notify.Subscribed != nil && subscribed {
		done := ss.notify.Subscribed
		n = func() { done(runEnded) }
	}
	refill := false
	switch {
	case cutOff:
		ss.srv.metrics.refused.add(LimitQueueTotal)
		ss.closeLocked(&SlowConsumerError{LastSeq: last, QueueSize: int(ss.srv.cfg.QueueTotalBytes)})
		n = ss.notify.Ready
	case more:
		ss.lastQueued, ss.behind = reached, true
		refill = ss.refillDue()
	case head > ss.lastQueued:
		ss.lastQueued = head
	}
	ss.mu.Unlock()
	if refill {
		go ss.refill()
	}
	ss.signal(n)
	return cutOff
}

// refillDue reports whether the session, behind, should read the next part
// of its replay now: its reader has read half of its queue and no refill
// is under way; it then counts one under way. ss.mu held.
func (ss *Session) refillDue() bool {
	if !ss.behind || ss.refilling || ss.closed || ss.qbytes > ss.srv.cfg.QueueBytes/2 {
		return false
	}
	ss.refilling = true
	return true
}

// replayBudget is how many bytes of replay the session queues at once:
// up to half its queue, and at least a quarter of it, so that the queue
// keeps room for the live events that follow when the replay reaches the
// head. ss.mu held.
func (ss *Session) replayBudget() int {
	q := ss.srv.cfg.QueueBytes
	return max(q/2-ss.qbytes, q/4)
}

// refill queues the next part of a session's replay (it is behind): the
// events after the last it queued that match any of its subscriptions,
// as many as fit its queue, read from the log by this goroutine of its
// own (a transport's writer never waits for the disk); once it reaches
// the thread's head, live events are queued again. The session's reader
// starts it (TryNext), one at a time; it ends with the part queued.
func (ss *Session) refill() {
	t := ss.t.Load()
	var (
		out            []queued
		after, reached uint64
		budget         int
		more           bool
		err            error
		v              streamView
	)
	for {
		t.mu.Lock()
		ss.mu.Lock()
		var stop bool
		after, budget, stop = ss.lastQueued, ss.replayBudget(), ss.closed || !ss.indexed
		ss.mu.Unlock()
		if stop {
			ss.mu.Lock()
			ss.refilling, ss.behind = false, false
			ss.mu.Unlock()
			t.mu.Unlock()
			return
		}
		// Read without the thread's lock, for the subscriptions the session
		// has now; the session, behind, queues no live event meanwhile, and
		// what it reads is read again if its subscriptions or the stream's
		// epoch changed meanwhile.
		var gen uint64
		var match func(*Event) bool
		v, gen, match = t.view(), ss.subsGen, ss.matcher()
		t.mu.Unlock()
		out, after, reached, more, err = v.refillPart(after, budget, match)
		t.mu.Lock()
		if t.epoch == v.epoch && ss.subsGen == gen {
			break
		}
		t.mu.Unlock()
	}
	defer t.mu.Unlock()
	if err == nil && !more && t.acked > v.acked {
		// Published while the part was read: the log's newest events, which
		// every engine serves from memory.
		out, _, reached, more, err = t.view().history(out, ss.matcher(), v.acked, false, t.acked, budget, uint64(t.srv.cfg.Now().UnixMilli()))
	}
	t.srv.metrics.refills.Add(1)
	if err != nil {
		ss.mu.Lock()
		ss.refilling = false
		ss.mu.Unlock()
		ss.end(err) // the client resumes from the last event it read
		return
	}
	ss.mu.Lock()
	ss.refilling = false
	if !more {
		ss.behind = false // caught up: live events from here
	}
	ss.mu.Unlock()
	if len(out) == 0 && !more {
		ss.merge(nil, t.acked, after, after, false, false)
		ss.signal(ss.readyFn())
		return
	}
	ss.merge(out, t.acked, after, reached, more, false)
}

// matcher reports whether an event matches any of the session's
// subscriptions (those it has now). The caller holds the thread's lock.
func (ss *Session) matcher() func(*Event) bool {
	filters := make([]channels.Filter, 0, len(ss.subs))
	for _, sub := range ss.subs {
		filters = append(filters, sub.filter)
	}
	return func(e *Event) bool {
		for _, f := range filters {
			if f.Matches(e.Channel, e.Name, e.Namespace) {
				return true
			}
		}
		return false
	}
}

// refillPart reads the next part of a replay after event after, for
// Session.refill: the events that match, at most budget bytes of them,
// after a missed-events notice when the log let go of events since.
// It returns after moved past the events the log let go of.
func (v streamView) refillPart(after uint64, budget int, match func(*Event) bool) (out []queued, _, reached uint64, more bool, err error) {
	now := uint64(v.t.srv.cfg.Now().UnixMilli())
	oldest, err := v.oldest(context.Background())
	if err == nil && oldest > after+1 {
		// The log let go of events while the reader caught up (a
		// buffer in memory): announced.
		var notice *Event
		notice, err = v.missedNotice(protocol.EventsMissedData{Since: after, FirstAvailableSeq: oldest, Missed: oldest - after - 1}, now)
		out = append(out, queued{e: notice, key: after<<1 | 1})
		after = oldest - 1
	}
	reached = after
	if err == nil {
		out, _, reached, more, err = v.history(out, match, after, false, v.acked, budget, now)
	}
	return out, after, reached, more, err
}

// readyFn is the session's Ready function.
func (ss *Session) readyFn() func() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.notify.Ready
}

// signal wakes the reader: through the notify function when one is set,
// otherwise through the channel Next waits on (its one slot is enough,
// since a woken reader reads everything queued).
func (ss *Session) signal(fn func()) {
	if fn != nil {
		fn()
		return
	}
	select {
	case ss.ready <- struct{}{}:
	default:
	}
}

// SetNotify has the session call n's functions, instead of waking Next,
// whenever events may be waiting or it ends; a transport then starts a
// writer only when there is something to write, rather than keep a
// goroutine per connection. Ready is called right away if events already
// wait.
func (ss *Session) SetNotify(n SessionNotify) {
	ss.mu.Lock()
	ss.notify = n
	pending := ss.qhead < len(ss.q) || ss.closed
	ss.mu.Unlock()
	if pending {
		ss.signal(n.Ready)
	}
}

// TryNext returns the next event without waiting: ok is false when none is
// queued (err then says whether the session has ended: ErrClosed, a
// *SlowConsumerError, ErrServerClosed). During a replay longer than the
// queue the next part may be on its way: the notify function (or Next)
// tells when it is queued.
func (ss *Session) TryNext() (e *Event, ok bool, err error) {
	e, ok, err, refill := ss.take()
	if refill {
		go ss.refill()
	}
	return e, ok, err
}

// take is TryNext; refill says the session is to read the next part of its
// replay now (refillDue).
func (ss *Session) take() (e *Event, ok bool, err error, refill bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	defer func() { refill = ss.behind && ss.refillDue() }() // with what was taken, before the unlock
	if ss.qhead < len(ss.q) {
		e = ss.q[ss.qhead].e
		ss.q[ss.qhead] = queued{}
		ss.qhead++
		ss.addQueued(-e.Size())
		if e.Seq > ss.lastRead {
			ss.lastRead = e.Seq
		}
		if ss.qhead == len(ss.q) {
			// Drained: start over, and let a burst's large queue go.
			ss.qhead = 0
			if cap(ss.q) > 256 {
				ss.q = nil
			} else {
				ss.q = ss.q[:0]
			}
		}
		return e, true, nil, refill
	}
	if ss.closed {
		return nil, false, ss.err, refill
	}
	return nil, false, nil, refill
}

// Next returns the next event, waiting for one. It returns ctx.Err() when
// ctx ends, and once the session is closed and drained, ErrClosed or the
// reason it was ended (such as a *SlowConsumerError). It is for readers
// that set no notify function.
func (ss *Session) Next(ctx context.Context) (*Event, error) {
	for {
		if e, ok, err := ss.TryNext(); ok || err != nil {
			return e, err
		}
		select {
		case <-ss.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Pending reports whether TryNext has something to return: an event, or
// the reason the session ended.
func (ss *Session) Pending() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.qhead < len(ss.q) || ss.closed
}

// Done reports whether the session has ended: nothing more will be
// queued, though its queue may still hold events.
func (ss *Session) Done() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.closed
}

// LastSeq is the sequence number of the last event read (0 before any).
func (ss *Session) LastSeq() uint64 {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.lastRead
}

// end marks the session over with err, unless it already is, and wakes
// the reader; events still queued can be read.
func (ss *Session) end(err error) {
	ss.mu.Lock()
	if !ss.closed {
		ss.closeLocked(err)
	}
	if ss.expiry != nil {
		ss.expiry.Stop()
		ss.expiry = nil
	}
	n := ss.notify.Ready
	ss.mu.Unlock()
	ss.signal(n)
}

// ExpireAt ends the session with ErrCredentialExpired at t, when the
// credential its connection was opened with stops being valid; a later
// call moves the deadline (a refreshed credential), and a zero t removes
// it. It reports false when the session has already ended.
func (ss *Session) ExpireAt(t time.Time) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return false
	}
	if ss.expiry != nil {
		ss.expiry.Stop()
		ss.expiry = nil
	}
	if !t.IsZero() {
		ss.expiry = time.AfterFunc(time.Until(t), func() { ss.end(ErrCredentialExpired) })
	}
	return true
}

// Close ends the session and its subscriptions for good; events still
// queued can be read, then Next returns ErrClosed. Closing twice is
// harmless.
func (ss *Session) Close() {
	ss.stop()
	ss.end(ErrClosed)
}

// stop takes the session out of its thread and returns its subscriptions.
func (ss *Session) stop() map[string]*subscription {
	t := ss.t.Load()
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	ss.leave(t)
	subs := ss.subs
	ss.subs = map[string]*subscription{}
	ss.subsGen++
	return subs
}

// Detach ends the session because its connection dropped: it stops, but
// its subscriptions stay restorable by id, from the last event read, for
// Config.ReconnectGrace.
func (ss *Session) Detach() {
	var epoch string
	if t := ss.t.Load(); t != nil {
		t.mu.Lock()
		epoch = t.epoch
		t.mu.Unlock()
	}
	subs := ss.stop()
	ss.end(ErrClosed)
	if len(subs) == 0 {
		return
	}
	last := Cursor{Epoch: epoch, Seq: ss.LastSeq()}
	expires := ss.srv.cfg.Now().Add(ss.srv.cfg.ReconnectGrace)
	ss.srv.mu.Lock()
	for id, sub := range subs {
		ss.srv.detached[id] = &detachedSub{thread: ss.threadID, filter: sub.filter, last: last, expires: expires}
		ss.srv.detachedHW.Grew(len(ss.srv.detached))
	}
	ss.srv.mu.Unlock()
	if st := ss.srv.st.Detached; st != nil {
		// Where other nodes find them too; a store that cannot keep
		// them leaves them restorable here only.
		for id, sub := range subs {
			_ = st.Keep(context.Background(), id, DetachedSubscription{Thread: ss.threadID, Filter: sub.filter, Last: last}, ss.srv.cfg.ReconnectGrace)
		}
	}
}

// Do carries out a command in this session: the subscription commands
// here, every other command through [Server.Do]. Its error is always a
// *protocol.ErrorResponse, as Server.Do's.
func (ss *Session) Do(ctx context.Context, cmd *protocol.ClientCommand) (*protocol.CommandResponse, error) {
	return result(ss.do(ctx, cmd))
}

// do is Do with the error typed.
func (ss *Session) do(ctx context.Context, cmd *protocol.ClientCommand) (*protocol.CommandResponse, *protocol.ErrorResponse) {
	switch c := cmd.Value.(type) {
	case *protocol.ClientCommandSubscriptionSubscribe:
		ss.srv.metrics.commands.Add(1)
		f := FilterOf(c.Params.Channels, c.Params.Namespaces, c.Params.Depth)
		applied := ss.srv.LastSeq(ss.threadID)
		id, replayed, err := ss.Subscribe(f, nil)
		if err != nil {
			return nil, errorResponse(c.ID, codeOf(err), "%v", err)
		}
		n := protocol.JsUint(replayed)
		return success(c.ID, applied, protocol.SubscribeResult{SubscriptionID: id, ReplayedEvents: &n}), nil
	case *protocol.ClientCommandSubscriptionUnsubscribe:
		ss.srv.metrics.commands.Add(1)
		if !ss.Unsubscribe(c.Params.SubscriptionID) {
			return nil, errorResponse(c.ID, protocol.ErrorCodeNoSuchSubscription, "params.subscription_id: no subscription %q on this connection", c.Params.SubscriptionID)
		}
		return success(c.ID, ss.srv.LastSeq(ss.threadID), nil), nil
	case *protocol.ClientCommandSubscriptionReconnect:
		ss.srv.metrics.commands.Add(1)
		return ss.reconnect(ctx, c)
	}
	return ss.srv.do(ctx, ss.threadID, cmd)
}

// reconnect restores subscriptions of a dropped session by id and replays
// what they missed: after last_event_id when given, else after the last
// event the dropped session had read.
func (ss *Session) reconnect(ctx context.Context, c *protocol.ClientCommandSubscriptionReconnect) (*protocol.CommandResponse, *protocol.ErrorResponse) {
	p := c.Params
	var cursor *Cursor
	if p.LastEventID != nil {
		c2, err := ParseCursor(*p.LastEventID)
		if err != nil {
			return nil, errorResponse(c.ID, protocol.ErrorCodeInvalidArgument, "params.last_event_id: %v", err)
		}
		cursor = &c2
	}
	applied := ss.srv.LastSeq(ss.threadID)
	ss.srv.mu.Lock()
	var found []string
	var restore []*detachedSub
	var elsewhere []string // not dropped here: maybe on another node
	now := ss.srv.cfg.Now()
	for _, id := range p.Subscriptions {
		d := ss.srv.detached[id]
		if d == nil || d.thread != ss.threadID || now.After(d.expires) {
			elsewhere = append(elsewhere, id)
			continue
		}
		delete(ss.srv.detached, id)
		found = append(found, id)
		restore = append(restore, d)
	}
	ss.srv.mu.Unlock()
	if st := ss.srv.st.Detached; st != nil {
		for _, id := range found {
			_, _, _ = st.Take(ctx, ss.threadID, id) // restored here: not again elsewhere
		}
		for _, id := range elsewhere {
			d, ok, err := st.Take(ctx, ss.threadID, id)
			if err != nil {
				return nil, errorResponse(c.ID, protocol.ErrorCodeUnavailable, "reading the dropped subscriptions: %v", err)
			}
			if ok && d.Thread == ss.threadID {
				found = append(found, id)
				restore = append(restore, &detachedSub{thread: d.Thread, filter: d.Filter, last: d.Last})
			}
		}
	}
	missed := 0
	for i, d := range restore {
		from := d.last
		if cursor != nil {
			from = *cursor
		}
		_, replayed, err := ss.subscribe(found[i], d.filter, &from)
		if err != nil {
			return nil, errorResponse(c.ID, codeOf(err), "%v", err)
		}
		missed += replayed
	}
	restored := len(found) > 0 && len(found) == len(p.Subscriptions)
	n := protocol.JsUint(missed)
	res := protocol.ReconnectResult{Restored: restored, MissedEvents: &n, CurrentNamespaces: ss.srv.namespaces(ss.threadID)}
	return success(c.ID, applied, res), nil
}

// namespaces lists every namespace of the thread with its status.
func (s *Server) namespaces(threadID string) []protocol.AgentStatusEntry {
	out := []protocol.AgentStatusEntry{}
	t, _ := s.thread(threadID, false)
	if t == nil {
		return out
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range t.tree {
		out = append(out, protocol.AgentStatusEntry{Namespace: nonNil(n.ns), Status: n.status})
	}
	return out
}

// FilterOf builds a filter from the protocol's subscription parameters.
func FilterOf(chans []protocol.Channel, namespaces []protocol.Namespace, depth *protocol.JsUint) channels.Filter {
	f := channels.Filter{Depth: channels.Unlimited}
	for _, c := range chans {
		f.Channels = append(f.Channels, string(c))
	}
	for _, ns := range namespaces {
		f.Namespaces = append(f.Namespaces, channels.Namespace(ns))
	}
	if depth != nil {
		f.Depth = int(min(*depth, 1<<30))
	}
	return f
}

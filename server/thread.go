package server

import (
	"context"
	"sync"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
)

// thread is one conversation: its event stream (sequence numbers, replay
// buffer, subscriptions), its runs and its state. Everything in it is
// guarded by mu.
type thread struct {
	srv     *Server
	id      string
	creator string // the principal it was created for (MaxThreadsPerPrincipal), "" without authentication

	epoch string // the stream's epoch (see Cursor); changes only when another node restarted the stream (Ingest)

	// wmu orders the writes of the thread's state with the events that
	// announce them: whoever writes its values or checkpoints to the
	// StateStore (a run's Values and Checkpoint, a fork, an answer with an
	// update, a rollback) holds it across the write and the publish, and
	// whoever reads the values a run starts from holds it too. It is
	// taken before mu, never while mu is held, so the store's I/O happens
	// with mu free: commands, subscriptions and reads of the thread do not
	// wait for the store.
	wmu sync.Mutex
	// imu orders what this node ingests of another node's writing of the
	// thread (Ingest, CatchUp): it is held across the read of the events
	// this node lacks from the durable log, which happens without mu, and
	// their delivery. Taken before mu.
	imu sync.Mutex

	mu  sync.Mutex
	seq uint64 // the last sequence number published
	// acked is the last sequence number delivered: the store holds it
	// (a WriteThroughLog's OnWritten), or, with a log that is not
	// write-through, seq. Subscribers see events up to acked only.
	acked      uint64
	index      *channels.Index[*Session]
	sessions   map[*Session]struct{} // sessions with subscriptions here
	nsubs      int                   // their subscriptions
	cutoff     []*Session            // scratch: sessions ended during a publish
	evicted    bool                  // forgotten by the sweeper: a new thread replaces it
	deleted    bool                  // evicted because the thread was deleted (ResourceHost.Release)
	lastActive time.Time
	// storeWriters counts those writing the thread's state without its
	// lock (unlockForStore): the thread is not idle meanwhile.
	storeWriters int

	// Runs.
	run      *run                 // the active (running or interrupted) run, if any
	queued   []*run               // runs waiting behind it (multitask_strategy enqueue)
	tree     map[string]*treeNode // namespace key -> lifecycle status
	answered map[string]bool      // interrupt ids already answered

	remoteRun bool // another node runs a run of this thread (Ingest says so)
	// remoteOpen holds the messages and tool calls that another node's
	// run has open (from its events), so that a run failed because its
	// node died closes them too.
	remoteOpen map[string]openItem
	fenced     bool // this node lost the thread's run lease: it publishes nothing (Fence)
	// written, when a producer waits for a write-through log's store to
	// take its batch, is closed when the store has taken more (or refused).
	written    chan struct{}
	remoteSeen time.Time // when this node last received an event of the thread from another node
	// claimed is the epoch this node moved the thread to when it took it
	// over (takeOver), at claimedAt, its seq then: the stream's events up
	// to there are of the epoch before.
	claimed   string
	claimedAt uint64

	producers map[string]*producerMark // each producer's last batch (Publish)
}

func newThread(s *Server, id string, h streamHead) *thread {
	t := &thread{
		srv: s, id: id, epoch: newEpoch(),
		index:      channels.NewIndex[*Session](),
		sessions:   map[*Session]struct{}{},
		tree:       map[string]*treeNode{},
		answered:   map[string]bool{},
		lastActive: s.cfg.Now(),
	}
	if h.ok {
		// The stream goes on where the durable log left it: same epoch,
		// next seq.
		t.epoch, t.seq, t.acked = h.epoch, h.seq, h.seq
	}
	return t
}

// publish appends an event to the stream and delivers it to the matching
// subscriptions. The caller holds t.mu. It returns the event.
func (t *thread) publish(d eventData) (*Event, error) {
	if t.fenced {
		return nil, ErrLeaseLost
	}
	now := t.srv.cfg.Now()
	ts := uint64(now.UnixMilli())
	if d.ts != 0 {
		ts = d.ts // a producer's own time
	}
	e, err := buildEvent(d, t.epoch, t.seq+1, ts)
	if err != nil {
		return nil, err
	}
	return e, t.append(e, d.by)
}

// append adds a built event, its seq above the thread's last, to the log
// and delivers it. The log bounds its own wait (a Redis log's queue
// wait); an event it does not keep is not published: the emitter gets
// the error. A producer's event (by set) goes to a ProducerLog with its
// batch. The caller holds t.mu.
func (t *thread) append(e *Event, by *ProducedBy) error {
	var err error
	if pl := t.srv.st.Producers; by != nil && pl != nil {
		err = pl.AppendProduced(context.Background(), t.id, e, *by)
	} else {
		err = t.srv.st.Log.Append(context.Background(), t.id, e)
	}
	if err != nil {
		return storeError(err)
	}
	t.seq = e.Seq
	t.lastActive = t.srv.cfg.Now()
	t.srv.metrics.published.Add(1)
	if !t.srv.writeThrough {
		t.acked = e.Seq
		t.deliver(e)
	}
	return nil
}

// unlockForStore lets t.mu go while the caller, holding t.wmu, does the
// store's I/O, and relockAfterStore takes it again: meanwhile the thread
// counts a writer, so the sweeper does not forget it (and its state) under
// the write.
func (t *thread) unlockForStore() {
	t.storeWriters++
	t.mu.Unlock()
}

// relockAfterStore ends unlockForStore.
func (t *thread) relockAfterStore() {
	t.mu.Lock()
	t.storeWriters--
}

// waitRoom waits, without the thread's lock, until the log can take
// another event of thread (EngineStores.Room: its store's queue is
// bounded), or returns the log's refusal, or ctx's error. Every publisher
// waits here before it takes the lock, so that a stalled store holds up
// no command, subscription or read of the thread.
func (s *Server) waitRoom(ctx context.Context, threadID string) error {
	r := s.st.Room
	if r == nil {
		return nil
	}
	if err := r.WaitRoom(ctx, threadID); err != nil {
		return storeError(err)
	}
	return nil
}

// written delivers what a WriteThroughLog's store now holds (its
// OnWritten), or, when the store refused the events because another
// writer holds their sequence numbers, stops this node's writing of the
// thread (fence): nobody saw them, and nobody will. Without wait it does
// nothing, and reports false, when the thread's lock is taken.
func (s *Server) written(threadID string, events []*Event, err error, wait bool) bool {
	t, _ := s.thread(threadID, false)
	if t == nil {
		return true
	}
	switch {
	case wait:
		t.mu.Lock()
	case err != nil:
		return false // fencing takes the lock again: not from the writer
	case !t.mu.TryLock():
		return false
	}
	if err != nil {
		// What this node published after its last delivered event is
		// not in the stream: its sequence goes back there, and the root's
		// status is read from the stream when the node writes it again.
		t.seq = t.acked
		delete(t.tree, channels.Namespace(nil).Key())
		t.producers = nil // their last batches may be among what was lost
		t.wakeWritten()
		t.mu.Unlock()
		s.fence(threadID)
		return true
	}
	defer t.mu.Unlock()
	if t.evicted {
		return true
	}
	for _, e := range events {
		if e.Seq <= t.acked || e.Epoch() != t.epoch {
			continue
		}
		t.acked = e.Seq
		t.deliver(e)
	}
	t.wakeWritten()
	return true
}

// wakeWritten wakes the producers waiting for the store to take their
// events (waitWritten). The caller holds t.mu.
func (t *thread) wakeWritten() {
	if t.written != nil {
		close(t.written)
		t.written = nil
	}
}

// sessionList is the sessions with subscriptions here, for ending them
// without the thread's lock; the caller holds t.mu.
func (t *thread) sessionList() []*Session {
	sessions := make([]*Session, 0, len(t.sessions))
	for ss := range t.sessions {
		sessions = append(sessions, ss)
	}
	return sessions
}

// deliver hands e to every session with a matching subscription; those
// whose queue overflows are ended and taken out of the thread.
func (t *thread) deliver(e *Event) {
	t.index.Match(e.Channel, e.Name, e.Namespace, func(ss *Session) {
		if ss.offered == e.Seq {
			return // another of its subscriptions matched it too
		}
		ss.offered = e.Seq
		if ss.enqueue(e) {
			t.cutoff = append(t.cutoff, ss)
		}
	})
	if len(t.cutoff) > 0 {
		t.endOverflowed()
	}
}

// endOverflowed takes the sessions that overflowed during a delivery
// (t.cutoff) out of the thread. The caller holds t.mu.
func (t *thread) endOverflowed() {
	for i, ss := range t.cutoff {
		t.cutOff(ss)
		t.cutoff[i] = nil
	}
	t.cutoff = t.cutoff[:0]
}

// missedNotice is the events.missed notice of data, in the thread's
// epoch, at now (Unix ms). The caller holds t.mu.
func (t *thread) missedNotice(data protocol.EventsMissedData, now uint64) (*Event, error) {
	return t.view().missedNotice(data, now)
}

// streamView is where a thread's stream stood when it was taken (under
// the thread's lock): its epoch and its last delivered event. Replays
// are read from the log through it without the lock, and the caller,
// with the lock again, checks that the stream is still in that epoch.
type streamView struct {
	t     *thread
	epoch string
	acked uint64
}

// view is where the stream stands now. The caller holds t.mu.
func (t *thread) view() streamView { return streamView{t: t, epoch: t.epoch, acked: t.acked} }

// missedNotice is the events.missed notice of data, in the view's epoch,
// at now (Unix ms).
func (v streamView) missedNotice(data protocol.EventsMissedData, now uint64) (*Event, error) {
	epoch := v.epoch
	data.Epoch = &epoch
	return buildEvent(eventData{p: protocol.NewServerEventEventsMissed(data)}, v.epoch, 0, now)
}

// cutOff takes a session that overflowed out of the thread. The caller
// holds t.mu.
func (t *thread) cutOff(ss *Session) {
	ss.leave(t)
	t.srv.metrics.slowConsumers.Add(1)
}

// replay lists what a new subscription of filter f from cursor gets
// before live events, in queue order: a missed-events notice when cursor is
// older than the buffer (or, nil, the buffer no longer starts at the
// stream's first event) or from another epoch of the stream, the current
// state when the filter selects values (empty before anything set it), and
// the buffered events after cursor up to event upTo (all of them for a nil
// cursor or one from another epoch), at most budget bytes of them (at
// least one): more says it stopped short of upTo, after event reached,
// the rest for the session to read as its reader makes room
// (Session.refill).
// after is the cursor used, replayed the number of buffered events. It
// reads the log and the state without the thread's lock, as of the view:
// the caller, with the lock again, adds what was published meanwhile
// (Session.subscribe), so that replay and live delivery meet without gap
// or duplicate.
func (v streamView) replay(f channels.Filter, cursor *Cursor, upTo uint64, budget int) (out []queued, after uint64, replayed int, reached uint64, more bool, err error) {
	// A cursor of another epoch, or beyond the end of this stream (a bare
	// number from before a restart), is from a stream that is gone: the
	// client gets all of this one, after a notice that says so.
	reset := cursor != nil && (cursor.Epoch != "" && cursor.Epoch != v.epoch || cursor.Seq > v.acked)
	if cursor != nil && !reset {
		after = cursor.Seq
	}
	now := uint64(v.t.srv.cfg.Now().UnixMilli())
	noticeKey := after<<1 | 1
	ctx := context.Background() // the log bounds its reads
	var oldest uint64
	if reset || after < v.acked {
		// Only a cursor behind the head can have missed events: one at the
		// head asks the log nothing (a log that cannot be read now does not
		// fail a subscription that needs nothing of it).
		var err error
		if oldest, err = v.oldest(ctx); err != nil {
			return nil, 0, 0, 0, false, err
		}
	}
	// A reader from the start (no cursor) of a stream whose first events
	// are gone (trimmed, or past retention) is told so too.
	if reset || oldest > after+1 {
		since := after
		if cursor != nil {
			since = cursor.Seq
		}
		data := protocol.EventsMissedData{Since: since, FirstAvailableSeq: oldest, Missed: oldest - after - 1}
		if reset {
			data.Reset = &reset
		}
		notice, err := v.missedNotice(data, now)
		if err != nil {
			return nil, 0, 0, 0, false, err
		}
		out = append(out, queued{e: notice, key: noticeKey})
	}
	if f.Matches(channels.Values, "", nil) {
		// The protocol: "the first replayed values event is the current full
		// state". Before anything set it, that is an empty state: a client
		// gets its baseline whenever it subscribes, mid-run included.
		state, ok, err := v.t.srv.st.State.Values(ctx, v.t.id)
		if err != nil {
			return nil, 0, 0, 0, false, storeError(err)
		}
		if !ok {
			state = map[string]any{}
		}
		snap, err := buildEvent(eventData{p: protocol.NewServerEventValues(state)}, v.epoch, 0, now)
		if err != nil {
			return nil, 0, 0, 0, false, err
		}
		out = append(out, queued{e: snap, key: noticeKey})
	}
	if after >= upTo {
		return out, after, 0, 0, false, nil // nothing to replay
	}
	// prev is the event the next one replayed must follow: the cursor's
	// (a gap before the oldest event kept has its notice above), or, for
	// a replay from the start, the first one replayed.
	prev, fromStart := max(after, oldest-min(oldest, 1)), cursor == nil || reset
	out, replayed, reached, more, err = v.history(out, func(e *Event) bool { return f.Matches(e.Channel, e.Name, e.Namespace) }, prev, fromStart, upTo, budget, now)
	if err != nil {
		return nil, 0, 0, 0, false, err
	}
	return out, after, replayed, reached, more, nil
}

// oldest is the first event the log holds, or the next one to come when
// it holds none.
func (v streamView) oldest(ctx context.Context) (uint64, error) {
	oldest, err := v.t.srv.st.Log.Oldest(ctx, v.t.id)
	if err != nil {
		return 0, storeError(err)
	}
	if oldest == 0 {
		oldest = v.acked + 1 // nothing buffered: the next event is the first available
	}
	return oldest, nil
}

// history appends to out the logged events after prev, up to event upTo,
// that match, at most budget bytes of them (at least one): more says it
// stopped short of upTo, after event reached (every event to it queued
// or not matching). A hole inside the log gets its missed-events
// notice; fromStart takes the first event logged as the start (no hole
// before it).
func (v streamView) history(out []queued, match func(*Event) bool, prev uint64, fromStart bool, upTo uint64, budget int, now uint64) (_ []queued, replayed int, reached uint64, more bool, err error) {
	var gapErr error
	bytes := 0
	err = v.t.srv.st.Log.After(context.Background(), v.t.id, prev, func(e *Event) bool {
		if e.Seq > upTo {
			// A durable log shared with other nodes may hold events this
			// node has not ingested yet, and a write-through log events
			// its store does not hold yet: they arrive live (Ingest,
			// OnWritten), and the session, which counts what it queued by
			// the thread's head, must not get them twice.
			return false
		}
		matches := match(e)
		if matches && bytes+e.Size() > budget && replayed > 0 {
			more = true // the rest when the reader has made room
			return false
		}
		if fromStart {
			prev, fromStart = e.Seq-1, false
		}
		if e.Seq > prev+1 {
			// A hole inside the stream (a Redis restored from its
			// append-only file without its last writes, under a writer
			// that went on): announced, never passed off as continuity.
			notice, err := v.missedNotice(protocol.EventsMissedData{Since: prev, FirstAvailableSeq: e.Seq, Missed: e.Seq - prev - 1}, now)
			if err != nil {
				gapErr = err
				return false
			}
			out = append(out, queued{e: notice, key: (e.Seq-1)<<1 | 1})
		}
		prev = e.Seq
		if matches {
			out = append(out, queued{e: e, key: e.Seq << 1})
			bytes += e.Size()
			replayed++
		}
		return true
	})
	if err == nil {
		err = gapErr
	}
	if err != nil {
		// A gap the client could not see: the subscription fails instead.
		return nil, 0, 0, false, storeError(err)
	}
	return out, replayed, prev, more, nil
}

// idle reports whether the thread has no run and no subscription and has
// been so since before cutoff.
func (t *thread) idle(cutoff time.Time) bool {
	return t.run == nil && len(t.queued) == 0 && len(t.sessions) == 0 && t.storeWriters == 0 && t.lastActive.Before(cutoff)
}

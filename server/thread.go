package server

import (
	"sync"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
)

// thread is one conversation: its event stream (sequence numbers, replay
// buffer, subscriptions), its runs and its state. Everything in it is
// guarded by mu.
type thread struct {
	srv *Server
	id  string

	mu         sync.Mutex
	seq        uint64 // the last sequence number published
	index      *channels.Index[*Subscription]
	subs       map[uint64]*Subscription
	cutoff     []*Subscription // scratch: subscriptions ended during a publish
	lastActive time.Time

	// Runs.
	run      *run   // the active (running or interrupted) run, if any
	queued   []*run // runs waiting behind it (multitask_strategy enqueue)
	runs     map[string]*run
	tree     map[string]*treeNode // namespace key -> lifecycle status
	answered map[string]bool      // interrupt ids already answered
}

func newThread(s *Server, id string) *thread {
	return &thread{
		srv: s, id: id,
		index:      channels.NewIndex[*Subscription](),
		subs:       map[uint64]*Subscription{},
		runs:       map[string]*run{},
		tree:       map[string]*treeNode{},
		answered:   map[string]bool{},
		lastActive: s.cfg.Now(),
	}
}

// publish appends an event to the stream and delivers it to the matching
// subscriptions. The caller holds t.mu. It returns the event.
func (t *thread) publish(d eventData) (*Event, error) {
	now := t.srv.cfg.Now()
	e, err := buildEvent(d, t.seq+1, uint64(now.UnixMilli()))
	if err != nil {
		return nil, err
	}
	t.seq = e.Seq
	t.srv.cfg.Log.Append(t.id, e)
	t.lastActive = now
	t.srv.metrics.published.Add(1)
	t.deliver(e)
	if t.srv.cfg.FanOut != nil {
		t.srv.cfg.FanOut.Publish(t.id, e)
	}
	return e, nil
}

// deliver hands e to every matching subscription; those whose queue
// overflows are ended and removed.
func (t *thread) deliver(e *Event) {
	t.index.Match(e.Channel, e.Name, e.Namespace, func(s *Subscription) {
		if !s.enqueue(e) {
			t.cutoff = append(t.cutoff, s)
		}
	})
	if len(t.cutoff) > 0 {
		for i, s := range t.cutoff {
			t.removeSub(s)
			t.srv.metrics.slowConsumers.Add(1)
			t.cutoff[i] = nil
		}
		t.cutoff = t.cutoff[:0]
	}
}

func (t *thread) removeSub(s *Subscription) {
	if _, ok := t.subs[s.id]; ok {
		delete(t.subs, s.id)
		t.index.Remove(s.id, s.filter)
	}
}

// unsubscribe removes s from the thread.
func (t *thread) unsubscribe(s *Subscription) {
	t.mu.Lock()
	t.removeSub(s)
	t.lastActive = t.srv.cfg.Now()
	t.mu.Unlock()
}

// subscribe registers a subscription and queues, ahead of live events: a
// missed-events notice when cursor is older than the buffer, the current
// state when the filter selects values, and the buffered events after
// cursor. All of it happens under the lock, so no event is published in
// between: replay and live delivery meet without gap or duplicate.
// A nil cursor replays everything buffered.
func (t *thread) subscribe(f channels.Filter, cursor *uint64) (*Subscription, int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := newSubscription(t.srv.nextSubID.Add(1), t, f, t.srv.cfg.QueueBytes)
	after := uint64(0)
	if cursor != nil {
		after = *cursor
	}
	if after > t.seq {
		after = t.seq // a cursor from the future: nothing to replay
	}
	now := uint64(t.srv.cfg.Now().UnixMilli())
	oldest := t.srv.cfg.Log.Oldest(t.id)
	if oldest == 0 {
		oldest = t.seq + 1 // nothing buffered: the next event is the first available
	}
	if cursor != nil && oldest > after+1 {
		notice, err := buildEvent(eventData{method: MethodEventsMissed, data: protocol.EventsMissedData{
			Since: after, FirstAvailableSeq: oldest, Missed: oldest - after - 1,
		}}, 0, now)
		if err != nil {
			return nil, 0, err
		}
		s.pre = append(s.pre, notice)
	}
	if state, ok := t.srv.cfg.State.Values(t.id); ok && f.Matches(channels.Values, "", nil) {
		snap, err := buildEvent(eventData{method: MethodValues, data: state}, 0, now)
		if err != nil {
			return nil, 0, err
		}
		s.pre = append(s.pre, snap)
	}
	replayed := 0
	t.srv.cfg.Log.After(t.id, after, func(e *Event) bool {
		if f.Matches(e.Channel, e.Name, e.Namespace) {
			s.pre = append(s.pre, e)
			replayed++
		}
		return true
	})
	s.lastQueued = t.seq
	t.subs[s.id] = s
	t.index.Add(s.id, f, s)
	t.lastActive = t.srv.cfg.Now()
	if replayed > 0 {
		t.srv.metrics.replays.Add(1)
	}
	return s, replayed, nil
}

// idle reports whether the thread has no run and no subscription and has
// been so since before cutoff.
func (t *thread) idle(cutoff time.Time) bool {
	return t.run == nil && len(t.queued) == 0 && len(t.subs) == 0 && t.lastActive.Before(cutoff)
}

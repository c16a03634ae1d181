package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentstream/agentstream/protocol"
)

// ingest delivers an event another node published on thread threadID to
// this node's subscribers, as if it had been published here: in sequence
// order, each once, kept for local replays (DurableLog.Cache). Events this
// node already has (its own, or repeats) are ignored; when events are
// missing before it (a live message lost), they are read from the log
// first. A thread this node does not hold is ignored: nobody here reads
// it. It is what a Watcher calls.
func (s *Server) ingest(threadID string, e *Event) {
	if e == nil || e.Seq == 0 {
		return
	}
	t, _ := s.thread(threadID, false)
	if t == nil {
		return
	}
	t.imu.Lock()
	defer t.imu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.evicted {
		return
	}
	t.follow(e.Epoch(), e.Seq) // a restarted stream is read again below
	if e.Seq <= t.seq {
		return
	}
	d := s.st.Durable
	if d != nil && e.Seq > t.seq+1 {
		_ = t.ingestStored(d, e.Seq) // what it cannot read stays missed
		if t.evicted {
			return
		}
	}
	t.ingestOne(d, e) // d is nil for a log that is not durable: nothing to cache
}

// ingestPart is how many events ingestStored reads from the durable log
// at a time.
const ingestPart = 256

// ingestStored ingests the events the durable log holds after this
// node's last one and before event upTo (0: all of them), read a part at
// a time without t.mu, which the caller holds (and holds again when it
// returns), as it holds t.imu, so that no other ingest comes between. It
// stops at an evicted thread.
func (t *thread) ingestStored(d DurableLog, upTo uint64) error {
	from := t.seq
	for upTo == 0 || from+1 < upTo {
		part := make([]*Event, 0, 16)
		t.mu.Unlock()
		err := d.Stored(context.Background(), t.id, from, func(e *Event) bool {
			if upTo != 0 && e.Seq >= upTo {
				return false
			}
			part = append(part, e)
			return len(part) < ingestPart
		})
		t.mu.Lock()
		if t.evicted {
			return nil
		}
		for _, e := range part {
			t.ingestOne(d, e)
		}
		if err != nil || len(part) < ingestPart {
			return err
		}
		from = part[len(part)-1].Seq
	}
	return nil
}

// ingestOne caches (when d is set) and delivers one event of another
// node. The caller holds t.mu.
func (t *thread) ingestOne(d DurableLog, e *Event) {
	if e.Seq <= t.seq {
		return
	}
	if t.acked > 0 && e.Seq > t.acked+1 {
		// Events before it are neither here nor in the stream (a Redis
		// restarted without them): the subscribers are told, not left to
		// take the jump for continuity.
		t.announceGap(t.acked, e.Seq)
	}
	if d != nil {
		d.Cache(context.Background(), t.id, e)
	}
	t.seq, t.acked = e.Seq, e.Seq
	t.lastActive = t.srv.cfg.Now()
	t.remoteSeen = t.lastActive
	t.noteRemote(e)
	t.deliver(e)
}

// catchUp delivers what the threads' durable log holds beyond the last
// event this node has of each: the events another node published before
// this node's subscription to them took effect. A Watcher calls it once
// its subscriptions are made. The heads are read at once when the log
// reads many (HeadsReader). An error says the log could not be read for
// some: the node may not have everything of them.
func (s *Server) catchUp(threadIDs ...string) error {
	d := s.st.Durable
	if d == nil {
		return nil
	}
	var held []*thread
	var ids []string
	for _, id := range threadIDs {
		if t, _ := s.thread(id, false); t != nil {
			held = append(held, t)
			ids = append(ids, id)
		}
	}
	if len(held) == 0 {
		return nil
	}
	var heads []Head
	if hr := s.st.Heads; hr != nil {
		heads = hr.Heads(context.Background(), ids)
	} else {
		heads = make([]Head, len(ids))
		for i, id := range ids {
			heads[i].Epoch, heads[i].Seq, heads[i].Err = d.Head(context.Background(), id)
		}
	}
	var errs []error
	for i, t := range held {
		err := heads[i].Err
		if err == nil {
			err = t.catchUpTo(d, heads[i].Epoch, heads[i].Seq)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// catchUpTo delivers what d holds of the thread beyond the last event
// this node has, up to head, the log's last sequence number (in epoch).
func (t *thread) catchUpTo(d DurableLog, epoch string, head uint64) error {
	t.imu.Lock()
	defer t.imu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.evicted {
		return nil
	}
	t.follow(epoch, head)
	if head <= t.seq {
		return nil
	}
	err := t.ingestStored(d, 0)
	if err == nil && !t.evicted && t.seq < head {
		err = fmt.Errorf("server: thread %s: the log's head is %d, read up to %d", t.id, head, t.seq)
	}
	return err
}

// follow moves the thread to epoch when the stream, at seq, goes on in
// another one (its keys had expired, or Redis lost them, or what this
// node saw last: see TailClaimer); cursors of the old epoch get the reset
// notice, and when seq is not above what this node had, the thread starts
// again (restart). The old epoch's events up to where this node took the
// thread over itself (takeOver) are the stream it goes on from, not a
// newer one. The caller holds t.mu.
func (t *thread) follow(epoch string, seq uint64) {
	if epoch == "" || epoch == t.epoch || t.claimed == t.epoch && seq <= t.claimedAt {
		return
	}
	t.epoch = epoch
	if seq <= t.seq {
		t.restart()
	}
}

// restart follows a stream that goes on, in a new epoch, below what this
// node had: what this node kept of the old one goes, and every live
// subscriber is told (events.missed with reset) and takes the stream
// again from its start, as a replay after a reset gives it. The caller
// holds t.mu.
func (t *thread) restart() {
	const base = 0
	t.srv.st.Log.Release(context.Background(), t.id)
	since := t.acked
	t.seq, t.acked = base, base
	t.tree = map[string]*treeNode{}
	reset := true
	notice, err := t.missedNotice(protocol.EventsMissedData{Since: since, FirstAvailableSeq: base + 1, Reset: &reset}, uint64(t.srv.cfg.Now().UnixMilli()))
	if err != nil {
		return
	}
	t.srv.metrics.gaps.Add(1)
	for ss := range t.sessions {
		ss.offered = 0
		if ss.restartAt(notice, base) {
			t.cutoff = append(t.cutoff, ss)
		}
	}
	t.endOverflowed()
}

// announceGap tells every session of the thread that the events after
// prev and before next will never reach them (events.missed). The caller
// holds t.mu.
func (t *thread) announceGap(prev, next uint64) {
	notice, err := t.missedNotice(protocol.EventsMissedData{Since: prev, FirstAvailableSeq: next, Missed: next - prev - 1}, uint64(t.srv.cfg.Now().UnixMilli()))
	if err != nil {
		return
	}
	t.srv.metrics.gaps.Add(1)
	for ss := range t.sessions {
		if ss.enqueueNotice(notice, next) {
			t.cutoff = append(t.cutoff, ss)
		}
	}
	t.endOverflowed()
}

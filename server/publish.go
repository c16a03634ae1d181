package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
)

// ProducerBatch is a batch of events a producer outside the server (an
// agent in another language, an orchestrator, a job worker) publishes into
// a thread: the events, in order, each as clients receive it but for its
// seq and id, which the thread assigns.
type ProducerBatch struct {
	// Producer names the producer, for idempotency: with Seq, a batch
	// sent again (a retry after a lost answer) appends nothing twice.
	// Empty: no idempotency.
	Producer string
	// Principal is who sends it (the authenticated subject, "" without
	// authentication): producers are told apart by principal and name,
	// so that two principals never share one's batches.
	Principal string
	// Seq is the producer's own number of the batch, increasing from one
	// batch to the next (gaps allowed). A batch whose Seq is not above the
	// last one the thread took from the producer appends nothing.
	Seq uint64
	// Events are appended in order, each published as a run's would be.
	Events []protocol.ProducerEvent
	// Sources, when set, names where each event came from (one per event:
	// Event.Source), kept with it in a durable log.
	Sources []string
}

// PublishResult is what a batch appended: the sequence number and id of
// each of its events, in order. Duplicate says the batch had been taken
// before (nothing was appended now); when it was the producer's last one,
// Seqs and EventIDs are those it was given then, else they are empty. A
// batch a crash (or a store's failure) cut short is completed by the
// retry: its events not appended yet are, and the answer lists them all.
type PublishResult struct {
	Seqs      []uint64 `json:"seqs"`
	EventIDs  []string `json:"event_ids"`
	Duplicate bool     `json:"duplicate"`
}

// producerMark is what a thread remembers of a producer: its last batch
// and what that batch was given (fewer seqs than count: cut short).
type producerMark struct {
	seq   uint64
	count int
	last  PublishResult
	used  time.Time
}

// ErrNotTheWriter refuses a batch sent to a node while another node holds
// the thread's run lease (with a Cluster): only the holder writes it.
var ErrNotTheWriter = coded(protocol.ErrorCodeUnavailable, ReasonConflict, "server: another node writes this thread")

// Producers' batch numbers: at most MaxProducerSeq (the largest integer
// every JSON client reads exactly), and at most MaxProducerSeqJump above
// the producer's last batch on the thread (room for numbers taken from a
// clock in milliseconds over weeks), so that one batch far ahead cannot
// make every later one of the producer a duplicate.
const (
	MaxProducerSeq     = 1<<53 - 1
	MaxProducerSeqJump = 1 << 32
)

// ErrProducerSeq refuses a producer's batch whose number breaks the rule
// above: nothing is appended, and the producer's last batch stays as it
// was.
var ErrProducerSeq = coded(protocol.ErrorCodeInvalidArgument, "", "server: a producer's batch number")

// Publish appends a producer's batch to a thread, creating the thread if
// it is new, and delivers it to the thread's subscribers like a run's
// events: root lifecycle events set the thread's status (agent.getTree),
// a custom event reaches `custom:NAME`. With a Cluster the node takes the
// thread's run lease first; while another node holds it the batch is
// refused (ErrNotTheWriter, naming it). A store that fails midway leaves
// the events before the failure appended (the result lists them) and
// returns the error. With a SyncedLog (the disk engine) Publish returns
// once the batch is synced, where a crash cannot lose it, and with a
// write-through log (Redis) once its store holds the batch (unless
// Config.IngestFastAck); a batch sent again is answered only once the
// first is kept too. Past Config.IngestAckTimeout it returns
// ErrUnavailable.
func (s *Server) Publish(ctx context.Context, threadID string, b ProducerBatch) (*PublishResult, error) {
	res, err := s.publish(ctx, threadID, b)
	if err != nil || s.cfg.IngestFastAck || len(res.Seqs) == 0 {
		return res, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.IngestAckTimeout)
	defer cancel()
	switch {
	case s.syncs != nil:
		if err := s.syncs.WaitSynced(ctx); err != nil {
			s.metrics.refused.add(LimitIngestAck)
			return nil, fmt.Errorf("%w: the batch is not on disk yet (%v); send it again with the same producer and batch number", ErrUnavailable, err)
		}
	case s.writeThrough:
		if err := s.waitWritten(ctx, threadID, res.Seqs[len(res.Seqs)-1]); err != nil {
			s.metrics.refused.add(LimitIngestAck)
			return nil, fmt.Errorf("%w: the batch is not in the store yet (%v); send it again with the same producer and batch number", ErrUnavailable, err)
		}
	}
	return res, nil
}

// waitWritten waits until a write-through log's store holds the thread's
// events up to seq (the server delivered them), or ctx ends, or the
// store refused them (another node writes the thread now).
func (s *Server) waitWritten(ctx context.Context, threadID string, seq uint64) error {
	t, _ := s.thread(threadID, false)
	if t == nil {
		return ErrUnavailable
	}
	for {
		t.mu.Lock()
		if t.acked >= seq {
			t.mu.Unlock()
			return nil
		}
		if t.seq < seq || t.evicted {
			t.mu.Unlock()
			return errors.New("the store did not take it")
		}
		if t.written == nil {
			t.written = make(chan struct{})
		}
		ch := t.written
		t.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// publish appends the batch (Publish), under the thread's lock.
func (s *Server) publish(ctx context.Context, threadID string, b ProducerBatch) (*PublishResult, error) {
	if err := s.Unavailable(); err != nil {
		return nil, err
	}
	if len(b.Events) == 0 {
		return nil, errors.New("server: a batch holds no event")
	}
	if err := ValidThreadID(threadID); err != nil {
		return nil, err
	}
	if c := s.st.Cluster; c != nil {
		holder, err := s.claimToPublish(c, threadID)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		if holder != c.Node() {
			return nil, fmt.Errorf("%w: node %s does, while its run goes on; publish there or retry when it ends", ErrNotTheWriter, holder)
		}
	}
	if err := s.waitRoom(ctx, threadID); err != nil {
		return nil, err
	}
	t, err := s.lockThread(threadID)
	if err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	now := s.cfg.Now()
	key, start := "", 0
	res := &PublishResult{Seqs: make([]uint64, 0, len(b.Events)), EventIDs: make([]string, 0, len(b.Events))}
	if b.Producer != "" {
		if b.Seq > MaxProducerSeq {
			return nil, fmt.Errorf("%w: %d is above %d (2^53-1)", ErrProducerSeq, b.Seq, uint64(MaxProducerSeq))
		}
		key = ProducerKey(b.Principal, b.Producer)
		m, err := s.producerMark(ctx, t, key, now)
		if err != nil {
			return nil, fmt.Errorf("%w: the producer's last batch cannot be read (%v); send it again", ErrUnavailable, err)
		}
		if m != nil && b.Seq > m.seq && b.Seq-m.seq > MaxProducerSeqJump {
			return nil, fmt.Errorf("%w: %d is more than 2^32 above the producer's last on this thread (%d)", ErrProducerSeq, b.Seq, m.seq)
		}
		if m != nil && b.Seq <= m.seq {
			m.used = now
			cut := b.Seq == m.seq && len(m.last.Seqs) < m.count && len(m.last.Seqs) < len(b.Events)
			if !cut {
				s.metrics.ingestDuplicates.Add(1)
				if b.Seq == m.seq {
					r := m.last
					r.Duplicate = true
					return &r, nil
				}
				return &PublishResult{Seqs: []uint64{}, EventIDs: []string{}, Duplicate: true}, nil
			}
			// Cut short: the events it lacks are appended now.
			start = len(m.last.Seqs)
			res.Seqs = append(res.Seqs, m.last.Seqs...)
			res.EventIDs = append(res.EventIDs, m.last.EventIDs...)
		}
	}
	for i := start; i < len(b.Events); i++ {
		pe := b.Events[i]
		d := eventData{p: pe.Event, namespace: channels.Namespace(pe.Event.GetNamespace()), ts: pe.Timestamp}
		if i < len(b.Sources) {
			d.source = b.Sources[i]
		}
		if key != "" {
			d.by = &ProducedBy{Producer: key, Batch: b.Seq, Index: i, Count: len(b.Events)}
		}
		if len(d.namespace) == 0 {
			d.namespace = nil
		}
		switch p := pe.Event.(type) {
		case *protocol.ServerEventCustom:
			if p.Params.Data.Name != nil {
				d.name = *p.Params.Data.Name
			}
		case *protocol.ServerEventLifecycle:
			t.setStatus(d.namespace, p.Params.Data.Event, derefString(p.Params.Data.GraphName))
		}
		e, err := t.publish(d)
		if err != nil {
			s.remember(t, key, b, res, now)
			return res, err
		}
		res.Seqs = append(res.Seqs, e.Seq)
		res.EventIDs = append(res.EventIDs, e.EventID())
	}
	s.metrics.ingested.Add(uint64(len(b.Events) - start))
	s.remember(t, key, b, res, now)
	return res, nil
}

// producerMark returns what the thread knows of the producer's last
// batch: what it remembers, else what a ProducerLog keeps (remembered
// from then on), nil when neither knows the producer. The caller holds
// t.mu, which it lets go while the ProducerLog is read.
func (s *Server) producerMark(ctx context.Context, t *thread, key string, now time.Time) (*producerMark, error) {
	if m, ok := t.producers[key]; ok {
		return m, nil
	}
	pl := s.st.Producers
	if pl == nil {
		return nil, nil
	}
	// Read without the thread's lock: a batch of the producer's that
	// came meanwhile is the one to go by.
	t.unlockForStore()
	lb, ok, err := pl.LastBatch(ctx, t.id, key)
	t.relockAfterStore()
	if m, ok := t.producers[key]; ok {
		return m, nil
	}
	if err != nil || !ok {
		return nil, err
	}
	s.rememberMark(t, key, &producerMark{seq: lb.Batch, count: lb.Count, used: now,
		last: PublishResult{Seqs: orEmpty(lb.Seqs), EventIDs: orEmpty(lb.EventIDs)}})
	return t.producers[key], nil
}

// orEmpty is s, or an empty slice for nil (answered as [] in JSON).
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// remember records a producer's batch on the thread (key is "" for a
// batch with no producer). The caller holds t.mu.
func (s *Server) remember(t *thread, key string, b ProducerBatch, res *PublishResult, now time.Time) {
	if key == "" || len(res.Seqs) == 0 {
		return
	}
	s.rememberMark(t, key, &producerMark{seq: b.Seq, count: len(b.Events), last: *res, used: now})
}

// rememberMark keeps m as the producer's last batch, forgetting the
// producer used longest ago when the thread remembers
// MaxProducersPerThread. The caller holds t.mu.
func (s *Server) rememberMark(t *thread, key string, m *producerMark) {
	if t.producers == nil {
		t.producers = map[string]*producerMark{}
	}
	if _, ok := t.producers[key]; !ok && len(t.producers) >= s.cfg.MaxProducersPerThread {
		var oldest string
		var at time.Time
		for p, m := range t.producers {
			if oldest == "" || m.used.Before(at) {
				oldest, at = p, m.used
			}
		}
		delete(t.producers, oldest)
		s.metrics.refused.add(LimitProducers)
	}
	t.producers[key] = m
}

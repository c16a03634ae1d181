package server

import (
	"context"
	"fmt"

	"github.com/agentstream/agentstream/protocol"
)

// Upstream is a server the assistants run on, in front of which this one
// fans its threads out (edge mode; Config.Upstream).
type Upstream interface {
	// Forward carries out a command on the upstream, or reports handled
	// false for one the server carries out itself (the subscription
	// commands, auth.refresh). Its error is an ErrorResponse.
	Forward(ctx context.Context, threadID string, cmd *protocol.ClientCommand) (resp *protocol.CommandResponse, errResp *protocol.ErrorResponse, handled bool)
	// Watch says a client subscribed to the thread here: the upstream's
	// stream of it is followed (Mirrors.Append) while it has subscribers or a run.
	// It is called with the thread locked: it must not block nor call
	// the server.
	Watch(threadID string)
}

// holds reports whether this node holds the thread's lease, as far as
// the Cluster knows without asking its store.
func holds(c Cluster, thread string) bool {
	lh, ok := c.(LeaseHolder)
	return ok && lh.Holds(thread)
}

// Mirrors are what edge mode uses to keep this server's copy of another
// server's threads (Server.Mirrors): who writes a thread, whether anyone
// watches it here, and the appending of the other server's events with
// their own seqs and ids.
type Mirrors struct{ s *Server }

// Mirrors are the server's mirrored threads (edge mode).
func (s *Server) Mirrors() Mirrors { return Mirrors{s} }

// ClaimWriter takes, or keeps, the right to write thread id for this node
// (with a Cluster, its lease, as Publish and Append take it; call it again
// within the lease's life to keep it). mine is false while another node
// holds it (holder names it). Without a Cluster every thread is this
// node's.
func (m Mirrors) ClaimWriter(id string) (holder string, mine bool, err error) {
	s := m.s
	c := s.st.Cluster
	if c == nil {
		return "", true, nil
	}
	holder, err = s.claimToPublish(c, id)
	if err != nil {
		return "", false, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return holder, holder == c.Node(), nil
}

// Watched reports whether thread id has subscribers on this server.
func (m Mirrors) Watched(id string) bool {
	s := m.s
	t, _ := s.thread(id, false)
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.sessions) > 0
}

// MirrorResult is what Mirrors.Append appended.
type MirrorResult struct {
	// Appended counts the events appended; the others were at or below
	// the thread's last sequence number already (a resumed stream's
	// overlap) and were skipped.
	Appended int
	// Last is the thread's last sequence number after the batch.
	Last uint64
}

// Append appends events another server published on its copy of the
// thread (edge mode: an upstream's event stream), each the JSON of a
// protocol event with its seq and event_id, keeping both: a client can
// move between this server and the other with its cursor (with a
// Cluster the ids are the cluster's, EPOCH-SEQ, on the same seqs, which a
// bare-number cursor of the other server still finds). Events are
// taken in order; one whose seq is not above the thread's last is
// skipped as one already appended, and one past the next announces the
// gap to the thread's subscribers (events.missed). With offset set, every seq is raised
// by offset and the event renumbered in this server's own ids (epoch and
// seq): for an upstream whose numbering went back (it lost the thread),
// so that the thread's stream goes on rising. Root lifecycle events set
// the thread's status, as a producer's do.
func (m Mirrors) Append(threadID string, events [][]byte, offset uint64) (MirrorResult, error) {
	s := m.s
	if err := s.Unavailable(); err != nil {
		return MirrorResult{}, err
	}
	if err := ValidThreadID(threadID); err != nil {
		return MirrorResult{}, err
	}
	if c := s.st.Cluster; c != nil && !holds(c, threadID) {
		// One node writes a thread: the holder of its lease, as for a
		// producer's batch. A node that holds it (a follower renews it,
		// ClaimWriter) appends without asking Redis for every event.
		holder, err := s.claimToPublish(c, threadID)
		if err != nil {
			return MirrorResult{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		if holder != c.Node() {
			return MirrorResult{}, fmt.Errorf("%w: node %s does", ErrNotTheWriter, holder)
		}
	}
	if err := s.waitRoom(context.Background(), threadID); err != nil {
		return MirrorResult{}, err
	}
	t, err := s.lockThread(threadID)
	if err != nil {
		return MirrorResult{}, err
	}
	defer t.mu.Unlock()
	res := MirrorResult{}
	for i, b := range events {
		e, err := DecodeEvent(append([]byte(nil), b...))
		if err != nil {
			return res, fmt.Errorf("server: mirrored event %d: %w", i, err)
		}
		if offset > 0 || s.st.Cluster != nil {
			// With a Cluster the thread's ids are its epoch's (what the
			// cluster's stream and its takeovers rest on): the seq stays.
			if e, err = t.renumber(e, e.Seq+offset); err != nil {
				return res, fmt.Errorf("server: mirrored event %d: %w", i, err)
			}
		}
		if e.Seq <= t.seq {
			continue
		}
		if t.seq > 0 && e.Seq > t.seq+1 {
			// The other server no longer had the events in between (its
			// buffer moved on while the stream was away): the thread's
			// subscribers are told, as for any gap.
			t.announceGap(t.seq, e.Seq)
		}
		if l, ok := e.Payload.(*protocol.ServerEventLifecycle); ok {
			t.setStatus(e.Namespace, l.Params.Data.Event, derefString(l.Params.Data.GraphName))
		}
		if err := t.append(e, nil); err != nil {
			return res, err
		}
		res.Appended++
	}
	s.metrics.ingested.Add(uint64(res.Appended))
	res.Last = t.seq
	return res, nil
}

// renumber rebuilds e as this thread's event seq (its own epoch, its
// time kept). The caller holds t.mu.
func (t *thread) renumber(e *Event, seq uint64) (*Event, error) {
	typed, err := e.WithPayload()
	if err != nil {
		return nil, err
	}
	d := eventData{p: typed.Payload, namespace: e.Namespace, name: e.Name, ts: uint64(timestampOf(typed.Payload))}
	if d.ts == 0 {
		d.ts = uint64(t.srv.cfg.Now().UnixMilli())
	}
	return buildEvent(d, t.epoch, seq, d.ts)
}

// timestampOf reads an event's params.timestamp (0 when it has none).
func timestampOf(p protocol.ServerEventVariant) protocol.Timestamp {
	if g, ok := p.(interface{ GetTimestamp() protocol.Timestamp }); ok {
		return g.GetTimestamp()
	}
	return 0
}

package server

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
)

// Cluster lets the nodes that share an engine (Redis) share runs: one node
// at a time runs a thread's runs, under a lease, and the commands for a
// thread's run reach that node wherever they arrive (an engine's
// EngineStores.Cluster).
// Implementations renew the leases of the threads that have a run here
// (EngineHost.RunActive) and give up the others, and when a node holding
// a lease dies they call EngineHost.FailLostRun on a node that follows
// the thread (EngineHost.RemoteRuns); a forwarded command is carried out
// with EngineHost.DoForwarded, a forwarded state read with
// EngineHost.RunState.
type Cluster interface {
	// Node names this node.
	Node() string
	// Acquire takes the thread's run lease for this node unless another
	// node holds it, and returns the node that holds it now.
	Acquire(thread string) (holder string, err error)
	// Holder returns the node holding the thread's lease ("" for none).
	Holder(thread string) (holder string, err error)
	// Forward has node carry out cmd on the thread (its Server.Do) and
	// returns its answer: the node's *protocol.ErrorResponse, or another
	// error when the command or its answer could not be carried.
	Forward(ctx context.Context, node, thread string, cmd *protocol.ClientCommand) (*protocol.CommandResponse, error)
	// ForwardRunState asks node for its run of the thread (its
	// Server.RunState), for a state read on another node.
	ForwardRunState(ctx context.Context, node, thread string) (status string, interrupts []PendingInterrupt, err error)
}

// WorkerDirectory is what a Cluster may also do (EngineStores.Workers) for remote workers: tell
// every node which nodes have workers for an assistant, so that a
// run.start arriving at a node without one runs on a node with one (the
// worker's events then go from its node straight to the thread's stream,
// and the thread's commands follow the run's lease there as for any run).
type WorkerDirectory interface {
	// LocateWorkers returns the node whose workers have the most room for
	// the assistant's runs ("" when no node's workers serve it).
	LocateWorkers(ctx context.Context, assistant string) (node string, err error)
	// Yield asks node to give up its run lease on the thread if it has
	// no run or queued run there, and reports whether the lease is free
	// of node now.
	Yield(ctx context.Context, node, thread string) (bool, error)
	// WorkersChanged says this node's workers changed (one connected or
	// was lost, took a run or ended one): the directory hears of it soon
	// (EngineHost.WorkerRoom).
	WorkersChanged()
}

// LeaseHolder is what a Cluster may also say: whether this node holds
// the thread's run lease already (took it, and has not given it up or
// lost it since), so that taking it again needs no takeover of the
// thread's stream (a producer publishing batch after batch).
type LeaseHolder interface {
	Holds(thread string) bool
}

// PublishLeaser is what a Cluster may also do: take a thread's lease for
// a producer's batches rather than for a run, so that when this node dies
// holding it no run is failed on the thread (its stream has none).
type PublishLeaser interface {
	AcquireToPublish(thread string) (holder string, err error)
}

type forwardedKey struct{}

// forwarded returns ctx marked as carrying a command another node
// forwarded here: Do runs it here.
func forwarded(ctx context.Context) context.Context {
	return context.WithValue(ctx, forwardedKey{}, true)
}

func isForwarded(ctx context.Context) bool {
	v, _ := ctx.Value(forwardedKey{}).(bool)
	return v
}

// route sends a command that concerns the thread's run to the node that
// runs it; done is false when it is to be carried out here.
func (s *Server) route(ctx context.Context, c Cluster, threadID string, id uint64, cmd *protocol.ClientCommand) (resp *protocol.CommandResponse, errResp *protocol.ErrorResponse, done bool) {
	switch cv := cmd.Value.(type) {
	case *protocol.ClientCommandRunStart, *protocol.ClientCommandStateFork:
		if start, ok := cv.(*protocol.ClientCommandRunStart); ok && !isForwarded(ctx) {
			if resp, errResp, done := s.routeToWorkers(ctx, c, threadID, id, start.Params.AssistantID, cmd); done {
				return resp, errResp, true
			}
		}
		holder, err := s.claim(c, threadID)
		if err != nil {
			return nil, errorResponse(id, protocol.ErrorCodeUnavailable, "%v", err), true
		}
		if holder != c.Node() {
			if isForwarded(ctx) {
				return nil, errorResponse(id, protocol.ErrorCodeUnavailable, "the thread's runs moved to node %s while the command was on its way; retry", holder), true
			}
			resp, err := c.Forward(ctx, holder, threadID, cmd)
			return resp, forwardError(id, holder, err), true
		}
	case *protocol.ClientCommandRunCancel, *protocol.ClientCommandInputRespond, *protocol.ClientCommandInputInject, *protocol.ClientCommandAgentGetTree:
		if isForwarded(ctx) {
			return nil, nil, false
		}
		holder, err := c.Holder(threadID)
		if err != nil {
			return nil, errorResponse(id, protocol.ErrorCodeUnavailable, "cannot find the node that runs the thread: %v", err), true
		}
		if holder != "" && holder != c.Node() {
			resp, err := c.Forward(ctx, holder, threadID, cmd)
			return resp, forwardError(id, holder, err), true
		}
	}
	return nil, nil, false
}

// routeToWorkers sends a run.start of an assistant that no worker
// connected here serves (and that is not this server's own) to the node
// whose workers have the most room for it, first asking the thread's
// lease holder to give up its lease if it holds it idle (its last run
// ended lately). done is false when the command is to go on as usual: the
// assistant is this node's, no node serves it, or the thread's lease
// holder has a run (the holder then answers, as for any run.start).
func (s *Server) routeToWorkers(ctx context.Context, c Cluster, threadID string, id uint64, assistantID string, cmd *protocol.ClientCommand) (resp *protocol.CommandResponse, errResp *protocol.ErrorResponse, done bool) {
	dir := s.st.Workers
	if dir == nil {
		return nil, nil, false
	}
	if _, local := s.assistant(assistantID); local {
		return nil, nil, false
	}
	node, err := dir.LocateWorkers(ctx, assistantID)
	if err != nil {
		return nil, errorResponse(id, protocol.ErrorCodeUnavailable, "cannot find the workers of assistant %s: %v", assistantID, err), true
	}
	if node == "" || node == c.Node() {
		return nil, nil, false
	}
	holder, err := c.Holder(threadID)
	if err != nil {
		return nil, errorResponse(id, protocol.ErrorCodeUnavailable, "cannot find the node that runs the thread: %v", err), true
	}
	if holder != "" && holder != node {
		free, err := dir.Yield(ctx, holder, threadID)
		if err != nil {
			return nil, errorResponse(id, protocol.ErrorCodeUnavailable, "the node holding the thread's runs (%s) did not answer: %v", holder, err), true
		}
		if !free {
			return nil, nil, false
		}
	}
	resp, err = c.Forward(ctx, node, threadID, cmd)
	return resp, forwardError(id, node, err), true
}

// claim takes the thread's run lease for this node unless another node
// holds it, and returns the node that holds it now. When this node took
// it, the thread's stream goes on from where the previous holder left it,
// and a run of that holder that never ended on the stream (its node died,
// or was fenced before it could say so) ends now, before anything more is
// written: every client sees it end.
func (s *Server) claim(c Cluster, threadID string) (holder string, err error) {
	return s.claimWith(c, threadID, c.Acquire)
}

// claimToPublish is claim for a producer's batch: with a PublishLeaser,
// the lease is not taken for a run (a node that dies holding it has no run
// to fail).
func (s *Server) claimToPublish(c Cluster, threadID string) (holder string, err error) {
	if pl, ok := c.(PublishLeaser); ok {
		return s.claimWith(c, threadID, pl.AcquireToPublish)
	}
	return s.claim(c, threadID)
}

func (s *Server) claimWith(c Cluster, threadID string, acquire func(string) (string, error)) (holder string, err error) {
	held := holds(c, threadID)
	holder, err = acquire(threadID)
	if err != nil {
		return "", fmt.Errorf("cannot take the thread's run lease: %w", err)
	}
	if holder != c.Node() {
		return holder, nil
	}
	if held && s.current(threadID) {
		// This node held the lease all along and has the thread: nobody
		// else wrote it, and its stream is where this node left it.
		return holder, nil
	}
	if err := s.takeOver(threadID); err != nil {
		return "", fmt.Errorf("cannot read where the thread's stream stands: %w", err)
	}
	s.unfence(threadID)
	s.endLostRun(threadID, false, 0, nodeLost)
	return holder, nil
}

// runActive reports whether this node runs a run of the thread, or has one
// queued: a Cluster keeps the thread's lease while it does.
func (s *Server) runActive(threadID string) bool {
	t, _ := s.thread(threadID, false)
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.run != nil || len(t.queued) > 0
}

// remoteRuns lists the threads this node follows whose run, on another
// node, has started and not ended (as far as the events it ingested say),
// less, when quiet is above zero, those it received an event of within
// quiet.
func (s *Server) remoteRuns(quiet time.Duration) []string {
	s.mu.Lock()
	threads := s.threadList()
	s.mu.Unlock()
	now := s.cfg.Now()
	var out []string
	for _, t := range threads {
		t.mu.Lock()
		if t.remoteRun && t.run == nil && (quiet <= 0 || now.Sub(t.remoteSeen) >= quiet) {
			out = append(out, t.id)
		}
		t.mu.Unlock()
	}
	return out
}

// ErrNodeLost is the error of a run whose node stopped renewing its lease:
// its failed lifecycle event carries its text.
var ErrNodeLost = errors.New("node lost: the node running this run stopped (its lease expired)")

// ErrRunCut is the error of a run the store shows open that no process
// runs: the server stopped while it ran (killed, or crashed) and started
// again (EngineHost.EndCutRun). Its failed lifecycle event carries its
// text.
var ErrRunCut = errors.New("run cut: the server stopped while this run was going on (killed or crashed) and started again")

// LostRun is what EngineHost.FailLostRun found of a thread's run.
type LostRun int

const (
	// LostRunNone: no run of the thread was open (its end is in the
	// stream), or this node runs the thread now.
	LostRunNone LostRun = iota
	// LostRunFailed: a run was open and is failed now.
	LostRunFailed
	// LostRunUnsure: it cannot tell yet (the stream could not be read, or
	// an event of the run came within the quiet time): look again later.
	LostRunUnsure
)

// lostRun is how a lost run ends: the code and text of its unfinished
// messages and tool calls, and its root's failure.
type lostRun struct {
	code string
	err  error
}

var (
	nodeLost = lostRun{"node_lost", ErrNodeLost}
	runCut   = lostRun{"run_cut", ErrRunCut}
)

// forwardError is the ErrorResponse of a command forwarded to node: the
// node's own, or unavailable when it could not be reached.
func forwardError(id uint64, node string, err error) *protocol.ErrorResponse {
	if err == nil {
		return nil
	}
	var e *protocol.ErrorResponse
	if errors.As(err, &e) {
		return e
	}
	return errorResponse(id, protocol.ErrorCodeUnavailable, "the node running the thread (%s) did not answer: %v", node, err)
}

// failLostRun ends, for every node's clients, a run of the thread's
// previous lease holder that never ended on the stream (its node died, or
// was fenced before it could say so): the root agent's lifecycle says
// failed (ErrNodeLost). The caller holds the thread's lease, so that one
// node does it and no other writes the thread meanwhile. It reports
// whether there was such a run: one whose end is in the stream (read
// first) is left alone. A thread this node has no root lifecycle of is
// read from the log's tail; assumeOpen says what to take when the tail
// holds none (the reaper knows a node held the thread for a run). A run
// this node received an event of within quiet is left alone.
func (s *Server) failLostRun(threadID string, assumeOpen bool, quiet time.Duration, why lostRun) LostRun {
	if _, err := s.thread(threadID, true); err != nil {
		return LostRunUnsure
	}
	if s.takeOver(threadID) != nil {
		// Its end may be in the stream, unread: try again later rather
		// than fail a run that ended.
		return LostRunUnsure
	}
	return s.endLostRun(threadID, assumeOpen, quiet, why)
}

// endLostRun is failLostRun for a thread this node has taken over
// (takeOver) already.
func (s *Server) endLostRun(threadID string, assumeOpen bool, quiet time.Duration, why lostRun) LostRun {
	t, err := s.thread(threadID, true)
	if err != nil {
		return LostRunUnsure
	}
	// The tail of a stream this node has no root lifecycle of is read
	// without the thread's lock, up to the event it had then.
	t.mu.Lock()
	needTail, acked := t.tree[channels.Namespace(nil).Key()] == nil, t.acked
	t.mu.Unlock()
	var tail []*Event
	if needTail {
		if tail, err = t.readTail(acked); err != nil {
			return LostRunUnsure
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.run != nil || len(t.queued) > 0 {
		return LostRunNone
	}
	if t.evicted {
		return LostRunUnsure
	}
	if quiet > 0 && s.cfg.Now().Sub(t.remoteSeen) < quiet {
		// This node received one of the run's events lately: its node
		// is alive, only late in renewing its lease (a loaded machine).
		return LostRunUnsure
	}
	root := t.tree[channels.Namespace(nil).Key()]
	if root == nil {
		if !needTail || t.acked != acked {
			return LostRunUnsure // the stream moved while its tail was read: look again later
		}
		if !t.tailRunOpen(tail, assumeOpen) {
			if assumeOpen {
				// A node held the thread for a run that may have been
				// cut before any of its events reached the store: nothing
				// to end on the wire, but a record still running ends.
				s.runCut(RunCut{Thread: threadID, Seq: t.acked + 1, At: s.cfg.Now(), Err: why.err, Unseen: true})
			}
			return LostRunNone
		}
		root = t.tree[channels.Namespace(nil).Key()]
	} else if !openStatus(root.status) {
		return LostRunNone
	}
	t.remoteRun = false
	t.fenced = false // the caller holds the lease
	graph := ""
	if root != nil {
		graph = root.graph
	}
	t.closeRemoteOpen(why)
	if e, err := t.publishLifecycle(nil, protocol.AgentStatusFailed, graph, nil, why.err.Error()); err == nil {
		s.runCut(RunCut{Thread: threadID, Seq: e.Seq, At: s.cfg.Now(), Err: why.err})
	}
	return LostRunFailed
}

// takeOver readies a thread this node holds the lease of for writing: it
// reads what the stream holds beyond this node's last event and, with a
// TailClaimer log, moves to a new epoch when the stream's store may have
// lost the tail of what the previous writer wrote (its ids were seen).
func (s *Server) takeOver(threadID string) error {
	if err := s.catchUp(threadID); err != nil {
		return err
	}
	tc := s.st.Tails
	if tc == nil {
		return nil
	}
	epoch, err := tc.ClaimTail(context.Background(), threadID, newEpoch())
	if err != nil || epoch == "" {
		return err
	}
	t, err := s.thread(threadID, true)
	if err != nil {
		return err
	}
	t.mu.Lock()
	// Another node may have taken producers' batches meanwhile: what this
	// node remembers of them is read again from the log.
	t.producers = nil
	if epoch != t.epoch {
		t.epoch = epoch // the sequence goes on; the ids change
		t.claimed, t.claimedAt = epoch, t.seq
		s.metrics.epochBumps.Add(1)
	}
	t.mu.Unlock()
	return nil
}

// openStatus reports whether a root agent with status st has a run going.
func openStatus(st protocol.AgentStatus) bool {
	return st != protocol.AgentStatusCompleted && st != protocol.AgentStatusFailed
}

// tailEvents is how many of a stream's last events tailRunOpen reads:
// enough to hold the start of any message or tool call still open in a
// run of usual length. It is read once per lost run.
const tailEvents = 4096

// readTail reads the stream's last tailEvents up to event acked, for a
// thread this node has no root lifecycle of (tailRunOpen), without the
// thread's lock; an error says the log could not be read.
func (t *thread) readTail(acked uint64) ([]*Event, error) {
	d := t.srv.st.Durable
	if d == nil || acked == 0 {
		return nil, nil
	}
	from := uint64(0)
	if acked > tailEvents {
		from = acked - tailEvents
	}
	var tail []*Event
	err := d.Stored(context.Background(), t.id, from, func(e *Event) bool {
		if e.Seq > acked {
			return false
		}
		tail = append(tail, e)
		return true
	})
	return tail, err
}

// tailRunOpen learns, from the stream's tail (readTail), whether the
// thread's last run is open, from the root lifecycle events among it
// (recording them in the thread's tree), and what that run left open
// (noteRemoteOpen: a message or tool call started before those events is
// not known); with no root lifecycle among them it answers assumeOpen,
// and with an empty stream false. The caller holds t.mu.
func (t *thread) tailRunOpen(tail []*Event, assumeOpen bool) bool {
	if t.srv.st.Durable == nil || t.acked == 0 {
		return false
	}
	open := assumeOpen
	for _, e := range tail {
		t.noteRemoteOpen(e)
		if l, isLife := e.Payload.(*protocol.ServerEventLifecycle); isLife && len(e.Namespace) == 0 {
			t.setStatus(nil, l.Params.Data.Event, derefString(l.Params.Data.GraphName))
			open = openStatus(l.Params.Data.Event)
		}
	}
	return open
}

// ErrLeaseLost ends a run whose node lost the thread's run lease (it
// could not renew it within its life, cut off from the store): another
// node may run the thread now, so this one stops, and publishes nothing
// more on it until it holds the lease again.
var ErrLeaseLost = errors.New("server: this node lost the thread's run lease")

// fence stops this node's runs of the thread, and its publishing on it,
// because it lost the thread's run lease: the run is cancelled, its queued
// runs dropped, and no event of it reaches the stream (another node may be
// writing it now). Taking the lease again (a run.start here) lifts it.
func (s *Server) fence(threadID string) {
	t, _ := s.thread(threadID, false)
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.fenced = true
	for _, r := range t.queued {
		r.endCause = ErrLeaseLost
	}
	t.queued = nil
	if t.run != nil {
		t.run.cancel(ErrLeaseLost)
	}
}

// current reports whether this node has the thread in memory, not fenced
// (its lease lost) nor evicted.
func (s *Server) current(threadID string) bool {
	t, _ := s.thread(threadID, false)
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.fenced && !t.evicted
}

func (s *Server) unfence(threadID string) {
	t, _ := s.thread(threadID, false)
	if t == nil {
		return
	}
	t.mu.Lock()
	t.fenced = false
	t.mu.Unlock()
}

// noteRemote records, from an event of another node, whether the thread
// has a run there. The caller holds t.mu.
func (t *thread) noteRemote(e *Event) {
	t.noteRemoteOpen(e)
	l, ok := e.Payload.(*protocol.ServerEventLifecycle)
	if !ok || len(e.Namespace) != 0 {
		return
	}
	st := l.Params.Data.Event
	t.setStatus(nil, st, derefString(l.Params.Data.GraphName))
	switch st {
	case protocol.AgentStatusCompleted, protocol.AgentStatusFailed:
		t.remoteRun = false
	default:
		t.remoteRun = true
	}
}

// noteRemoteOpen records the messages and tool calls another node's run
// opens and ends. The caller holds t.mu.
func (t *thread) noteRemoteOpen(e *Event) {
	payload := e.Payload
	if payload == nil && (e.Channel == channels.Messages || e.Channel == channels.Tools) {
		// Events read back from a log carry their typed payload for
		// lifecycle only: decode the few that open or close something,
		// found without decoding the rest (the deltas).
		switch string(dataEvent(e.JSON())) { // compared without allocating
		case "message-start", "message-finish", "error", "tool-started", "tool-finished", "tool-error":
			if full, err := e.WithPayload(); err == nil {
				payload = full.Payload
			}
		}
	}
	if l, ok := payload.(*protocol.ServerEventLifecycle); ok {
		if len(e.Namespace) == 0 && !openStatus(l.Params.Data.Event) {
			t.remoteOpen = nil // the run ended: it closed what it had open
		}
		return
	}
	t.remoteOpen = trackOpen(t.remoteOpen, e.Namespace, e.Seq, payload)
}

// trackOpen records in open (made when nil) the message or tool call
// that event payload (published in namespace ns with seq) opens, or
// forgets the one it ends, and returns open.
func trackOpen(open map[string]openItem, ns channels.Namespace, seq uint64, payload any) map[string]openItem {
	switch p := payload.(type) {
	case *protocol.ServerEventMessages:
		key := "m" + ns.Key() + "\x01" + derefString(p.Params.Node)
		switch d := p.Params.Data.Value.(type) {
		case *protocol.MessageStartData:
			if open == nil {
				open = map[string]openItem{}
			}
			open[key] = openItem{ns: slices.Clone(ns), node: p.Params.Node, id: d.ID, extra: d.Extra, opened: seq}
		case *protocol.MessageFinishData, *protocol.MessageErrorData:
			delete(open, key)
		}
	case *protocol.ServerEventTools:
		switch d := p.Params.Data.Value.(type) {
		case *protocol.ToolStartedData:
			if open == nil {
				open = map[string]openItem{}
			}
			open["t"+d.ToolCallID] = openItem{ns: slices.Clone(ns), node: p.Params.Node, id: d.ToolCallID, tool: true, opened: seq}
		case *protocol.ToolFinishedData:
			delete(open, "t"+d.ToolCallID)
		case *protocol.ToolErrorData:
			delete(open, "t"+d.ToolCallID)
		}
	}
	return open
}

// dataEvent is the value of an event's "data":{"event": member as the
// server writes it (first in data), or nil.
func dataEvent(b []byte) []byte {
	const key = `"data":{"event":"`
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return nil
	}
	rest := b[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return nil
	}
	return rest[:j]
}

// closeRemoteOpen ends what a lost run left open, as closeOpen does for a
// run of this node (code node_lost, or run_cut). The caller holds t.mu.
func (t *thread) closeRemoteOpen(why lostRun) {
	items := slices.SortedFunc(maps.Values(t.remoteOpen), func(a, b openItem) int { return cmp.Compare(a.opened, b.opened) })
	t.remoteOpen = nil
	for _, it := range items {
		t.publishUnfinished(it, why.code, why.err.Error())
	}
}

func derefString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
)

// Remote workers: processes outside the server that serve assistants (the
// worker wire of protocol/worker.cddl). A worker connects saying which
// assistant ids it serves and how many runs it takes at once; a run.start
// of such an assistant is handed to one of them (the least busy, in turn
// among equals), or waits for one to be free (at most
// MaxQueuedWorkerRuns per assistant). The run executes here as any run
// does (its lifecycle, its seqs and ids, cancel, interrupts, its end),
// with a remoteAssistant standing in for the code: what the worker sends
// is published in the run's name, and what clients send the run reaches
// the worker. A worker that sends nothing for WorkerLease is lost; its
// runs fail.

// The defaults of the worker limits of Config.
const (
	DefaultWorkerLease         = 15 * time.Second
	DefaultMaxWorkers          = 1024
	DefaultMaxRunsPerWorker    = 64
	DefaultMaxQueuedWorkerRuns = 256
	// workerOutbox bounds what waits to be written to a worker's stream.
	// A worker that does not read that much is lost.
	workerOutbox = 1024
)

// Errors of the worker calls.
var (
	// ErrNoSuchWorker: the worker is not connected (never was, or was lost).
	ErrNoSuchWorker = coded(protocol.ErrorCodeInvalidArgument, ReasonNotFound, "server: no such worker")
	// ErrNotWorkersRun: the run is not one the worker serves (now).
	ErrNotWorkersRun = coded(protocol.ErrorCodeNoSuchRun, ReasonConflict, "server: not a run of this worker")
	// ErrTooManyWorkers: MaxWorkers are connected.
	ErrTooManyWorkers = coded(protocol.ErrorCodeResourceExhausted, "", "server: too many workers")
)

// WorkerHello is what a worker says when it connects.
type WorkerHello struct {
	// ID names the worker; empty for a new name. A worker coming back
	// under its name (after a dropped connection) keeps its runs.
	ID string
	// Owner is the principal that connected it: only it may act for the
	// worker.
	Owner string
	// Assistants are the assistant ids it serves.
	Assistants []string
	// Grant is what the owner's credential says of the assistants it may
	// serve; nil with authentication off (then any). See Workers.Connect.
	Grant *AssistantGrant
	// MaxRuns is how many runs it takes at once (capped by
	// Config.MaxRunsPerWorker; 0: that cap).
	MaxRuns int
}

// AssistantGrant is what a principal may serve: every assistant id as an
// admin; those matching Patterns ("*" matches any run of characters) when
// its credential lists some; otherwise the ids no other principal has
// served on this node (the first to serve one owns it while the server
// runs, until an admin releases it: Workers.Release), never an assistant
// of the server's own.
type AssistantGrant struct {
	Admin    bool
	Patterns []string
	// Match reports whether pattern matches id (auth.Glob).
	Match func(pattern, id string) bool
}

// ErrAssistantNotYours refuses a worker that would serve an assistant id
// its principal may not serve.
var ErrAssistantNotYours = coded(protocol.ErrorCodePermissionDenied, "", "server: the principal may not serve this assistant")

// ErrOwnedAssistants refuses a worker whose principal would own more than
// MaxOwnedAssistants assistant ids by serving them first.
var ErrOwnedAssistants = coded(protocol.ErrorCodeResourceExhausted, "", "server: too many assistant ids owned")

// Worker is a connected worker, as its connection sees it.
type Worker struct {
	hub        *Workers
	id         string
	owner      string
	assistants []string
	maxRuns    int

	// Guarded by hub.mu:
	runs     map[string]*remoteRun
	lastSeen time.Time
	lost     bool
	attached chan struct{} // closed when another connection takes the worker over

	out chan protocol.WorkerMessageVariant // to the connection; bounded
}

// ID is the worker's name.
func (w *Worker) ID() string { return w.id }

// Messages is what the server sends the worker, in order.
func (w *Worker) Messages() <-chan protocol.WorkerMessageVariant { return w.out }

// Replaced is closed when a newer connection of the same worker takes
// over this one.
func (w *Worker) Replaced() <-chan struct{} {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	return w.attached
}

// remoteRun is a run a worker serves.
type remoteRun struct {
	rc       *RunContext
	assist   string
	assigned chan *Worker // the worker, once one takes it
	end      chan error   // the worker's end of the run: nil for completed
	answers  chan protocol.WorkerMessageVariant
	values   map[string]any // the thread's state when the run started

	mu        sync.Mutex // serializes the worker's batches for this run
	lastBatch uint64
	lastSeqs  []uint64
	ended     bool

	// Guarded by hub.mu:
	worker *Worker
	lostBy error // why the worker was lost
	lostCh chan struct{}
}

// Workers are the remote workers connected to this server
// (Server.Workers): the worker wire's transport registers a worker
// (Connect), renews its lease (Alive), applies its batches (Publish) and
// lets it go (Disconnect).
type Workers struct {
	s       *Server
	mu      sync.Mutex
	owners  map[string]string // per assistant id served without a grant: the principal that owns it
	owned   map[string]int    // per principal: how many ids owners gives it
	workers map[string]*Worker
	turn    map[string]int                 // per assistant: where the next tie-break starts
	waiting map[string][]*remoteRun        // per assistant: runs waiting for a free worker
	served  map[string]map[string]struct{} // per assistant: the ids of the workers serving it
}

func newWorkerHub(s *Server) *Workers {
	return &Workers{s: s, owners: map[string]string{}, owned: map[string]int{}, workers: map[string]*Worker{}, turn: map[string]int{}, waiting: map[string][]*remoteRun{}, served: map[string]map[string]struct{}{}}
}

// counts returns the workers registered and the runs waiting for one.
func (hub *Workers) counts() (workers, queued int) {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	for _, runs := range hub.waiting {
		queued += len(runs)
	}
	return len(hub.workers), queued
}

// Workers are the server's remote workers.
func (s *Server) Workers() *Workers { return s.workers }

// Connect registers a worker (or takes back one of the same id and
// owner), for the connection that reads its Messages. Its lease starts now.
func (hub *Workers) Connect(h WorkerHello) (*Worker, error) {
	s := hub.s
	if err := s.Unavailable(); err != nil {
		return nil, err
	}
	if g := h.Grant; g != nil && !g.Admin {
		for _, a := range h.Assistants {
			if _, local := s.localAssistant(a); local { // before hub.mu: s.mu comes first
				return nil, fmt.Errorf("%w: %q is this server's own assistant", ErrAssistantNotYours, a)
			}
		}
	}
	hub.mu.Lock()
	defer hub.mu.Unlock()
	now := s.cfg.Now()
	if w, ok := hub.workers[h.ID]; ok && h.ID != "" {
		if w.owner != h.Owner {
			return nil, fmt.Errorf("%w: %w: worker %s belongs to another principal", ErrPermissionDenied, ErrNoSuchWorker, h.ID)
		}
		close(w.attached)
		w.attached = make(chan struct{})
		w.lastSeen = now
		hub.dispatchLocked()
		return w, nil
	}
	if err := hub.mayServe(h); err != nil {
		return nil, err
	}
	if len(hub.workers) >= s.cfg.MaxWorkers {
		s.metrics.refused.add(LimitWorkers)
		return nil, fmt.Errorf("%w: %d are connected (--max-workers)", ErrTooManyWorkers, len(hub.workers))
	}
	if h.ID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		h.ID = "wkr_" + hex.EncodeToString(b[:])
	}
	maxRuns := h.MaxRuns
	if maxRuns <= 0 || maxRuns > s.cfg.MaxRunsPerWorker {
		maxRuns = s.cfg.MaxRunsPerWorker
	}
	w := &Worker{hub: hub, id: h.ID, owner: h.Owner, assistants: slices.Compact(slices.Sorted(slices.Values(h.Assistants))), maxRuns: maxRuns,
		runs: map[string]*remoteRun{}, lastSeen: now, attached: make(chan struct{}), out: make(chan protocol.WorkerMessageVariant, workerOutbox)}
	hub.workers[w.id] = w
	for _, a := range w.assistants {
		if hub.served[a] == nil {
			hub.served[a] = map[string]struct{}{}
		}
		hub.served[a][w.id] = struct{}{}
	}
	hub.dispatchLocked()
	return w, nil
}

// mayServe checks that h's owner may serve each of its assistants (see
// AssistantGrant; the server's own are checked before), and records the
// owner of those it now owns. The caller holds hub.mu.
func (hub *Workers) mayServe(h WorkerHello) error {
	g := h.Grant
	if g == nil || g.Admin {
		return nil
	}
	for _, a := range h.Assistants {
		if len(g.Patterns) > 0 {
			if !slices.ContainsFunc(g.Patterns, func(p string) bool { return g.Match(p, a) }) {
				return fmt.Errorf("%w: %q is not among the assistants the credential grants (%s)", ErrAssistantNotYours, a, strings.Join(g.Patterns, ", "))
			}
			continue
		}
		if o, taken := hub.owners[a]; taken && o != h.Owner {
			return fmt.Errorf("%w: %q is served by another principal (an admin may release it: DELETE /workers/assistants/{id})", ErrAssistantNotYours, a)
		}
	}
	if len(g.Patterns) > 0 {
		// Granted: served by right; recorded, so that no principal
		// without a grant takes the id.
		for _, a := range h.Assistants {
			if _, taken := hub.owners[a]; !taken && len(hub.owners) < maxGrantedOwners {
				hub.owners[a] = h.Owner
			}
		}
	} else {
		fresh := 0
		for _, a := range h.Assistants {
			if _, taken := hub.owners[a]; !taken {
				fresh++
			}
		}
		if hub.owned[h.Owner]+fresh > MaxOwnedAssistants {
			hub.s.metrics.refused.add(LimitOwnedAssistants)
			return fmt.Errorf("%w: %q would own more than %d assistant ids; give its credential an assistants grant", ErrOwnedAssistants, h.Owner, MaxOwnedAssistants)
		}
		for _, a := range h.Assistants {
			if _, taken := hub.owners[a]; !taken {
				hub.owners[a] = h.Owner
				hub.owned[h.Owner]++
			}
		}
	}
	return nil
}

// maxGrantedOwners bounds the ids recorded for granted principals (who
// are trusted by their credential).
const maxGrantedOwners = 100_000

// MaxOwnedAssistants bounds the assistant ids one principal may own by
// serving them first (without a grant), so that the table stays bounded.
const MaxOwnedAssistants = 1024

// Release forgets who owns an assistant id served without a grant (an
// admin's decision): the next principal to serve it owns it. It reports
// whether anyone did.
func (hub *Workers) Release(assistant string) bool {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	o, ok := hub.owners[assistant]
	if ok {
		delete(hub.owners, assistant)
		if hub.owned[o]--; hub.owned[o] <= 0 {
			delete(hub.owned, o)
		}
	}
	return ok
}

// Lease is how long a worker may send nothing before it is lost.
func (hub *Workers) Lease() time.Duration { return hub.s.cfg.WorkerLease }

// Alive renews a worker's lease (a heartbeat).
func (hub *Workers) Alive(workerID, owner string) error {
	_, err := hub.live(workerID, owner)
	return err
}

// live renews and returns the worker. The caller must not hold hub.mu.
func (hub *Workers) live(workerID, owner string) (*Worker, error) {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	w, ok := hub.workers[workerID]
	if !ok || w.owner != owner {
		return nil, fmt.Errorf("%w: %s (connect again)", ErrNoSuchWorker, workerID)
	}
	w.lastSeen = hub.s.cfg.Now()
	return w, nil
}

// serves reports whether a connected worker serves assistant id.
func (hub *Workers) serves(id string) bool {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	return len(hub.served[id]) > 0
}

// queueFull reports whether assistant id has MaxQueuedWorkerRuns runs
// waiting for a free worker.
func (hub *Workers) queueFull(id string) bool {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	return len(hub.waiting[id]) >= hub.s.cfg.MaxQueuedWorkerRuns
}

// served lists the assistants connected workers serve.
func (hub *Workers) assistantIDs() []string {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	out := make([]string, 0, len(hub.served))
	for a, ws := range hub.served {
		if len(ws) > 0 {
			out = append(out, a)
		}
	}
	return out
}

// dispatchLocked hands waiting runs to workers with room, oldest first.
// It runs whenever a run waits or a worker gains room, so a run waits only
// while no worker of its assistant has room.
func (hub *Workers) dispatchLocked() {
	for a, runs := range hub.waiting {
		for len(runs) > 0 {
			w := hub.pickLocked(a)
			if w == nil {
				break
			}
			hub.assignLocked(w, runs[0])
			runs = runs[1:]
		}
		if len(runs) == 0 {
			delete(hub.waiting, a)
		} else {
			hub.waiting[a] = runs
		}
	}
	if dir := hub.s.st.Workers; dir != nil {
		dir.WorkersChanged()
	}
}

// room is, per assistant served here, how many more runs its workers take
// at once, less the runs waiting for one (EngineHost.WorkerRoom).
func (hub *Workers) room() map[string]int {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	out := make(map[string]int, len(hub.served))
	for a, ids := range hub.served {
		n := -len(hub.waiting[a])
		for id := range ids {
			if w := hub.workers[id]; w != nil && !w.lost {
				n += max(w.maxRuns-len(w.runs), 0)
			}
		}
		out[a] = n
	}
	return out
}

// pickLocked chooses the worker for a run of assistant a: among those
// serving it with room, the least busy, in turn among equals.
func (hub *Workers) pickLocked(a string) *Worker {
	ids := make([]string, 0, len(hub.served[a]))
	for id := range hub.served[a] {
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return nil
	}
	slices.Sort(ids)
	start := hub.turn[a] % len(ids)
	var best *Worker
	for i := range ids {
		w := hub.workers[ids[(start+i)%len(ids)]]
		if w == nil || w.lost || len(w.runs) >= w.maxRuns {
			continue
		}
		if best == nil || len(w.runs) < len(best.runs) {
			best = w
		}
	}
	if best != nil {
		hub.turn[a] = start + 1
	}
	return best
}

func (hub *Workers) assignLocked(w *Worker, rr *remoteRun) {
	r := rr.rc.r
	w.runs[r.id] = rr
	rr.worker = w
	msg := &protocol.WorkerAssign{RunID: r.id, ThreadID: r.t.id, AssistantID: rr.assist, Input: r.input, Config: r.config, Metadata: r.metadata, Values: rr.values}
	if !hub.sendLocked(w, msg) {
		return
	}
	rr.assigned <- w
}

// sendLocked queues msg for the worker's connection; a worker whose queue
// is full is lost (it does not read what it is sent).
func (hub *Workers) sendLocked(w *Worker, msg protocol.WorkerMessageVariant) bool {
	if w.lost {
		return false
	}
	select {
	case w.out <- msg:
		return true
	default:
		hub.loseLocked(w, fmt.Errorf("worker lost: worker %s did not read what it was sent (%d messages waiting)", w.id, workerOutbox))
		hub.s.metrics.workersLost.Add(1)
		return false
	}
}

// send is sendLocked for a caller without hub.mu.
func (hub *Workers) send(w *Worker, msg protocol.WorkerMessageVariant) {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	hub.sendLocked(w, msg)
}

// loseLocked forgets worker w: each of its runs fails with why, and the
// runs waiting for an assistant nobody serves any more fail too.
func (hub *Workers) loseLocked(w *Worker, why error) {
	if w.lost {
		return
	}
	w.lost = true
	delete(hub.workers, w.id)
	for _, a := range w.assistants {
		delete(hub.served[a], w.id)
		if len(hub.served[a]) == 0 {
			delete(hub.served, a)
			for _, rr := range hub.waiting[a] {
				rr.lostBy = fmt.Errorf("no worker serves assistant %s any more", a)
				close(rr.lostCh)
			}
			delete(hub.waiting, a)
		}
	}
	for _, rr := range w.runs {
		rr.lostBy = why
		close(rr.lostCh)
	}
	w.runs = nil
	close(w.out)
	hub.dispatchLocked()
}

// expire loses the workers whose lease ran out.
func (hub *Workers) expire(now time.Time) {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	lease := hub.s.cfg.WorkerLease
	for _, w := range hub.workers {
		if quiet := now.Sub(w.lastSeen); quiet > lease {
			hub.loseLocked(w, fmt.Errorf("worker lost: worker %s sent nothing for %v (lease %v)", w.id, quiet.Round(time.Millisecond), lease))
			hub.s.metrics.workersLost.Add(1)
		}
	}
}

// closeAll loses every worker, the server closing: their streams end.
func (hub *Workers) closeAll() {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	for _, w := range hub.workers {
		hub.loseLocked(w, ErrServerClosed)
	}
}

// Disconnect loses a worker at once (it said goodbye, or the server
// refuses it any more): its runs fail.
func (hub *Workers) Disconnect(workerID, owner string, why string) error {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	w, ok := hub.workers[workerID]
	if !ok || w.owner != owner {
		return fmt.Errorf("%w: %s", ErrNoSuchWorker, workerID)
	}
	hub.loseLocked(w, fmt.Errorf("worker lost: %s", why))
	hub.s.metrics.workersLost.Add(1)
	return nil
}

// remoteAssistant stands in, in the server, for the workers serving an
// assistant id.
type remoteAssistant struct {
	hub *Workers
	id  string
}

// Run waits for a worker to take the run, then follows it: the worker's
// end ends it, a cancel reaches the worker, and so do input.inject's
// input and input.respond's answers.
func (a remoteAssistant) Run(ctx context.Context, rc *RunContext) error {
	hub := a.hub
	values, err := rc.State()
	if err != nil {
		return err
	}
	rr := &remoteRun{rc: rc, assist: a.id, assigned: make(chan *Worker, 1), end: make(chan error, 1),
		answers: make(chan protocol.WorkerMessageVariant, injectCapacity), lostCh: make(chan struct{}), values: values}
	hub.mu.Lock()
	if len(hub.served[a.id]) == 0 {
		hub.mu.Unlock()
		return fmt.Errorf("no worker serves assistant %s", a.id)
	}
	if len(hub.waiting[a.id]) >= hub.s.cfg.MaxQueuedWorkerRuns { // and so no worker has room
		hub.mu.Unlock()
		hub.s.metrics.refused.add(LimitQueuedWorkerRuns)
		return fmt.Errorf("every worker of assistant %s is busy and %d runs wait (--max-queued-worker-runs)", a.id, hub.s.cfg.MaxQueuedWorkerRuns)
	}
	hub.waiting[a.id] = append(hub.waiting[a.id], rr)
	hub.dispatchLocked()
	hub.mu.Unlock()
	defer hub.release(rr)

	var w *Worker
	select {
	case w = <-rr.assigned:
	case <-rr.lostCh:
		return hub.lostReason(rr)
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	for {
		select {
		case err := <-rr.end:
			return err
		case in := <-rc.Injected():
			hub.send(w, &protocol.WorkerInject{RunID: rc.r.id, Input: in})
		case m := <-rr.answers:
			hub.send(w, m)
		case <-rr.lostCh:
			return hub.lostReason(rr)
		case <-ctx.Done():
			hub.send(w, &protocol.WorkerCancel{RunID: rc.r.id, Reason: context.Cause(ctx).Error()})
			return context.Cause(ctx)
		}
	}
}

func (hub *Workers) lostReason(rr *remoteRun) error {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	return rr.lostBy
}

// release takes a run that ended off its worker (or off the waiting list)
// and gives its place to a waiting one.
func (hub *Workers) release(rr *remoteRun) {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	if w := rr.worker; w != nil && w.runs != nil {
		delete(w.runs, rr.rc.r.id)
	}
	for a, runs := range hub.waiting {
		if i := slices.Index(runs, rr); i >= 0 {
			hub.waiting[a] = slices.Delete(runs, i, i+1)
		}
	}
	hub.dispatchLocked()
}

// WorkerBatch is a worker's batch of operations on one of its runs.
type WorkerBatch struct {
	// Seq numbers the batch among the run's batches (0: not numbered): a
	// batch not above the last one taken appends nothing.
	Seq uint64
	Ops []WorkerOp
}

// WorkerOp is one operation of a batch: exactly one of its fields is set.
type WorkerOp struct {
	Emit      *protocol.ProducerEvent
	Interrupt *protocol.WorkerInterrupt
	End       *protocol.WorkerEnd
}

// ErrWorkerOp refuses an operation of a batch (the ops before it were
// applied): the message says which and why.
var ErrWorkerOp = coded(protocol.ErrorCodeInvalidArgument, "", "server: refused")

// Publish applies a worker's batch to one of its runs, in order:
// events are published in the run's name, an interrupt is raised, the end
// ends the run. It renews the worker's lease and returns the seq of each
// event published.
func (hub *Workers) Publish(workerID, owner, runID string, b WorkerBatch) (*protocol.WorkerBatchResult, error) {
	s := hub.s
	hub.mu.Lock()
	w, ok := hub.workers[workerID]
	if !ok || w.owner != owner {
		hub.mu.Unlock()
		return nil, fmt.Errorf("%w: %s (connect again)", ErrNoSuchWorker, workerID)
	}
	w.lastSeen = s.cfg.Now()
	rr := w.runs[runID]
	hub.mu.Unlock()
	if rr == nil {
		return nil, fmt.Errorf("%w: %s is not a run of worker %s now (it ended, was cancelled, or was never its)", ErrNotWorkersRun, runID, workerID)
	}
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if b.Seq != 0 && b.Seq <= rr.lastBatch {
		s.metrics.ingestDuplicates.Add(1)
		res := &protocol.WorkerBatchResult{Seqs: []protocol.JsUint{}, Duplicate: true}
		if b.Seq == rr.lastBatch {
			for _, q := range rr.lastSeqs {
				res.Seqs = append(res.Seqs, protocol.JsUint(q))
			}
		}
		return res, nil
	}
	if rr.ended {
		return nil, fmt.Errorf("%w: run %s has ended", ErrNotWorkersRun, runID)
	}
	seqs := []uint64{}
	var err error
	for i, op := range b.Ops {
		switch {
		case op.Emit != nil:
			var seq uint64
			seq, err = rr.rc.emitProducerEvent(*op.Emit)
			if err == nil {
				seqs = append(seqs, seq)
			}
		case op.Interrupt != nil:
			err = rr.interrupt(*op.Interrupt)
		case op.End != nil:
			var end error
			if op.End.Status == protocol.WorkerEndStatusFailed {
				msg := "the worker failed the run"
				if op.End.Error != nil && *op.End.Error != "" {
					msg = *op.End.Error
				}
				end = errors.New(msg)
			}
			rr.ended = true
			rr.end <- end
			if i != len(b.Ops)-1 {
				err = fmt.Errorf("%w: [%d]: nothing may follow the run's end", ErrWorkerOp, i+1)
			}
		}
		if err != nil {
			if !errors.Is(err, ErrWorkerOp) {
				err = fmt.Errorf("%w: [%d]: %v", ErrWorkerOp, i, err)
			}
			break
		}
	}
	s.metrics.ingested.Add(uint64(len(seqs)))
	if b.Seq != 0 {
		rr.lastBatch, rr.lastSeqs = b.Seq, seqs
	}
	res := &protocol.WorkerBatchResult{Seqs: make([]protocol.JsUint, len(seqs))}
	for i, q := range seqs {
		res.Seqs[i] = protocol.JsUint(q)
	}
	return res, err
}

// interrupt raises one of the worker's interrupts; its answer goes back
// to the worker with the worker's ref.
func (rr *remoteRun) interrupt(in protocol.WorkerInterrupt) error {
	rc := rr.rc
	if in.Namespace != nil && len(*in.Namespace) > 0 {
		rc = &RunContext{r: rc.r, ns: channels.Namespace(*in.Namespace)}
	}
	ready := make(chan error, 1)
	go func() {
		v, err := rc.interrupt(rc.r.ctx, in.Payload, ready)
		if err != nil {
			return // the run ended first
		}
		select {
		case rr.answers <- &protocol.WorkerRespond{RunID: rc.r.id, Ref: in.Ref, Response: v}:
		case <-rc.r.ctx.Done():
		}
	}()
	return <-ready
}

// emitProducerEvent publishes a worker's event in the run's name and
// returns its seq. The run's start and end (root lifecycle events) are
// the server's, and input.requested is raised through an interrupt; a
// values event also saves the thread's state. What the event opens (a
// message, a tool call) is closed at the run's end if the worker leaves
// it open.
func (rc *RunContext) emitProducerEvent(pe protocol.ProducerEvent) (uint64, error) {
	ns := channels.Namespace(pe.Event.GetNamespace())
	if len(ns) == 0 {
		ns = nil
	}
	t := rc.r.t
	if err := rc.waitRoom(); err != nil {
		return 0, err
	}
	stored := false
	if p, ok := pe.Event.(*protocol.ServerEventValues); ok {
		values, ok := p.Params.Data.(map[string]any)
		if !ok {
			return 0, lifecycleErr("a values event's data is a map of the thread's values")
		}
		// Written as RunContext.Values writes (emitStored): under the
		// writer lock, without the thread's.
		if err := rc.lockWriter(); err != nil {
			return 0, err
		}
		defer t.wmu.Unlock()
		if err := t.srv.st.State.SetValues(rc.r.ctx, t.id, values); err != nil {
			err = storeError(err)
			rc.r.unkept.CompareAndSwap(nil, &err)
			return 0, err
		}
		stored = true // announced even if the run was cancelled meanwhile, as emitStored does
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !stored && rc.r.over() {
		return 0, ErrRunEnded
	}
	d := eventData{p: pe.Event, namespace: ns, ts: pe.Timestamp}
	switch p := pe.Event.(type) {
	case *protocol.ServerEventLifecycle:
		if len(ns) == 0 {
			return 0, lifecycleErr("the run's own lifecycle (the root namespace's) is the server's: end the run instead")
		}
		t.setStatus(ns, p.Params.Data.Event, derefString(p.Params.Data.GraphName))
	case *protocol.ServerEventInputRequested:
		return 0, lifecycleErr("input.requested is raised by an interrupt operation, so that its answer reaches the worker")
	case *protocol.ServerEventCustom:
		d.name = derefString(p.Params.Data.Name)
	}
	e, err := t.publish(d)
	if err != nil {
		return 0, err
	}
	rc.r.rawOpen = trackOpen(rc.r.rawOpen, ns, e.Seq, pe.Event)
	return e.Seq, nil
}

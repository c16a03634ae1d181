package threads

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentstream/agentstream/server"
)

// recorder writes run records in the order runs change, off the threads'
// locks, on a goroutine of its own (stopped when the server closes, once
// its runs have ended); a record that finds its queue full is dropped
// (counted).
type recorder struct {
	mu      sync.Mutex
	ch      chan recorded
	closed  bool
	done    chan struct{}
	dropped uint64
	// stopping: the server closes; a record the store refuses is not
	// tried again.
	stopping atomic.Bool
}

const recordQueue = 4096

// recorded is a record to write, a run cut (cut set: its records end),
// or (done set) a mark to close once what was queued before it is
// written.
type recorded struct {
	rec  server.RunRecord
	cut  *server.RunCut
	done chan struct{}
}

// startRecorder starts writing the run records the core's run hook
// gives, when the engine keeps them.
func (cat *Catalog) startRecorder() {
	rc := cat.st.Runs
	if rc == nil {
		return
	}
	r := &recorder{ch: make(chan recorded, recordQueue), done: make(chan struct{})}
	cat.runs = r
	go func() {
		defer close(r.done)
		for it := range r.ch {
			switch {
			case it.done != nil:
				close(it.done)
			case it.cut != nil:
				endCut(rc, *it.cut)
			default:
				r.write(rc, it.rec)
			}
		}
	}()
	cat.host.OnRun(r.record)
	cat.host.OnRunCut(r.recordCut)
	cat.host.OnClose(r.stop)
}

// deleteRetries bounds how long a thread deleted when its run ends
// (DeleteOnCompletion) is tried again when its store fails.
const deleteRetries = 5 * time.Second

// recordRetries bounds how long a record the store refuses (a disk
// nearly full, Redis gone) is tried again before it is dropped (counted):
// the records queued behind it, and the answers that wait for them
// (Catalog.Keep), wait meanwhile.
const recordRetries = 10 * time.Second

// write writes rec, trying again while the store refuses it, up to
// recordRetries: a store that fails for longer loses the record, not the
// run.
func (r *recorder) write(rc server.RunCatalog, rec server.RunRecord) {
	written := retry(recordRetries, 5*time.Millisecond, func() (bool, bool) {
		return rc.SetRun(context.Background(), rec) == nil, r.stopping.Load()
	})
	if !written {
		r.mu.Lock()
		r.dropped++
		r.mu.Unlock()
	}
}

// retry calls try until it says done, or says to stop, or for longer than
// d, waiting between two calls from wait on, twice as long each time (at
// most half a second); it reports whether try said done.
func retry(d, wait time.Duration, try func() (done, stop bool)) bool {
	deadline := time.Now().Add(d)
	for {
		done, stop := try()
		if done || stop || time.Now().After(deadline) {
			return done
		}
		time.Sleep(wait)
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// endCut ends the records of the runs cut (server.RunCut): those of the
// thread that started before the cut and had not ended take status
// error, with the cut's reason. A run waiting on its interrupts
// (interrupted) is open only if it is the thread's last run before the
// cut (an earlier one of that status was cancelled), and the cut run's
// events reached the store (an unseen cut is of a run after it).
func endCut(rc server.RunCatalog, cut server.RunCut) {
	ctx := context.Background()
	runs, err := rc.Runs(ctx, cut.Thread)
	if err != nil {
		return // a store that fails keeps the records as they were
	}
	last := true
	for _, rec := range runs { // newest first
		if rec.After >= cut.Seq || rec.CreatedAt.After(cut.At) {
			continue // started, or was queued, after the cut
		}
		open := rec.Open() || rec.Status == server.RunInterrupted && last && !cut.Unseen
		last = false
		if !open {
			continue
		}
		rec.Status, rec.Error, rec.UpdatedAt = server.RunError, cut.Err.Error(), cut.At.UTC()
		_ = rc.SetRun(ctx, rec)
	}
}

// record queues rec (the core's run hook: it never blocks).
func (r *recorder) record(rec server.RunRecord) { r.queue(recorded{rec: rec}) }

// recordCut queues a run cut (the core's run-cut hook: it never blocks).
func (r *recorder) recordCut(cut server.RunCut) { r.queue(recorded{cut: &cut}) }

// queue queues it, or drops it (counted) when the queue is full.
func (r *recorder) queue(it recorded) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	select {
	case r.ch <- it:
	default:
		r.dropped++
	}
}

// stop writes what is queued and stops the recorder.
func (r *recorder) stop(ctx context.Context) {
	r.stopping.Store(true)
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.ch)
	}
	r.mu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
	}
}

// SyncRuns waits until the run records queued before the call are
// written (or ctx ends): a read that follows sees them.
func (cat *Catalog) SyncRuns(ctx context.Context) {
	r := cat.runs
	if r == nil {
		return
	}
	done := make(chan struct{})
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	select {
	case r.ch <- recorded{done: done}:
	case <-ctx.Done():
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// Keep waits until what the Platform's writes changed before the call is
// kept as the engine keeps it (on disk, for the disk engine): the run
// records queued are written (SyncRuns), the events appended are in a
// synced commit, and the values, checkpoints and records written are
// synced. An answer that acknowledges a write waits for it; its error
// (the store's, or ctx's, or the end of Config.IngestAckTimeout, counted
// as limit write_ack) means the write may not outlive a crash.
func (cat *Catalog) Keep(ctx context.Context) (err error) {
	if cat.st.Synced == nil && cat.st.StateSynced == nil {
		cat.SyncRuns(ctx) // a read that follows sees the records
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, cat.cfg.IngestAckTimeout)
	defer cancel()
	defer func() {
		if err != nil {
			cat.host.Refused(server.LimitWriteAck)
		}
	}()
	cat.SyncRuns(ctx)
	if err := ctx.Err(); err != nil {
		return err
	}
	if l := cat.st.Synced; l != nil {
		if err := l.WaitSynced(ctx); err != nil {
			return err
		}
	}
	if s := cat.st.StateSynced; s != nil {
		return s.SyncState(ctx)
	}
	return nil
}

// Runs lists thread id's runs, newest first (server.ErrNoCatalog on an
// engine that keeps none).
func (cat *Catalog) Runs(ctx context.Context, id string) ([]server.RunRecord, error) {
	rc := cat.st.Runs
	if rc == nil {
		return nil, server.ErrNoCatalog
	}
	runs, err := rc.Runs(ctx, id)
	if err != nil {
		return nil, server.StoreError(err)
	}
	return runs, nil
}

// FindRun finds run runID by its id alone (the Agent Protocol's routes):
// its record; ok is false when no thread keeps it.
func (cat *Catalog) FindRun(ctx context.Context, runID string) (server.RunRecord, bool, error) {
	rc := cat.st.Runs
	if rc == nil {
		return server.RunRecord{}, false, server.ErrNoCatalog
	}
	cat.SyncRuns(ctx)
	thread, ok, err := rc.RunThread(ctx, runID)
	if err != nil {
		return server.RunRecord{}, false, server.StoreError(err)
	}
	if !ok {
		return server.RunRecord{}, false, nil
	}
	runs, err := rc.Runs(ctx, thread)
	if err != nil {
		return server.RunRecord{}, false, server.StoreError(err)
	}
	for _, r := range runs {
		if r.ID == runID {
			return r, true, nil
		}
	}
	return server.RunRecord{}, false, nil
}

// DeleteRun forgets run runID of thread (the Platform's runs.delete); a
// run that is queued, running or interrupted is server.ErrThreadBusy
// (cancel it first).
func (cat *Catalog) DeleteRun(ctx context.Context, thread, runID string) error {
	rc := cat.st.Runs
	if rc == nil {
		return server.ErrNoCatalog
	}
	if lr := cat.host.Run(thread, runID); lr.Active || lr.Queued {
		return fmt.Errorf("%w: the run goes on; cancel it first", server.ErrThreadBusy)
	}
	cat.SyncRuns(ctx) // its last record written before it is deleted
	if err := rc.DeleteRun(ctx, thread, runID); err != nil {
		return server.StoreError(err)
	}
	return nil
}

// DeleteOnCompletion deletes thread once run runID has ended and no run
// waits behind it (the Platform's stateless runs, on_completion delete).
// A run that ended already has its thread deleted now.
func (cat *Catalog) DeleteOnCompletion(ctx context.Context, thread, runID string) error {
	if cat.host.AfterRun(thread, runID, func() {
		// A store slow to answer (a loaded machine) or away a moment is
		// asked again, for up to deleteRetries; one that cannot delete it
		// by then (a store down, a run started on it meanwhile) leaves
		// it to --thread-ttl.
		retry(deleteRetries, 20*time.Millisecond, func() (bool, bool) {
			_, err := cat.Delete(context.Background(), thread)
			return err == nil, errors.Is(err, server.ErrThreadBusy)
		})
	}) {
		return nil
	}
	_, err := cat.Delete(ctx, thread)
	return err
}

// Run is run runID of thread as this node has it: active (and waiting
// for its interrupts' answers), queued, or neither (ended, or another
// node's).
func (cat *Catalog) Run(thread, runID string) server.LiveRun { return cat.host.Run(thread, runID) }

// ActiveRun is the id of thread's active run (running or waiting on
// interrupts) on this node; ok is false when it has none.
func (cat *Catalog) ActiveRun(thread string) (runID string, ok bool) {
	return cat.host.ActiveRun(thread)
}

// RollbackRun cancels run runID of thread as multitask_strategy rollback
// does: the thread's values go back to what they were when it started.
// found is false when the run is neither active nor queued.
func (cat *Catalog) RollbackRun(thread, runID string) (found bool) {
	return cat.host.RollbackRun(thread, runID)
}

package diskstore

import (
	"bytes"
	"context"
	"errors"
	"slices"

	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/records"
	"github.com/cockroachdb/pebble/v2"
)

// The threads' records (server.ThreadCatalog): "m/" THREAD -> the record
// as JSON, written synced (a Platform client's thread outlives a crash
// once it was answered), deleted with the thread (State.Delete).

var _ server.ThreadCatalog = (*State)(nil)

func recordKey(thread string) []byte { return append([]byte("m/"), thread...) }

func decodeRecord(thread string, b []byte) (server.ThreadRecord, error) {
	r, err := records.UnmarshalThreadRecord(thread, b)
	if err != nil {
		return server.ThreadRecord{}, errors.Join(errCorrupt, err)
	}
	return r, nil
}

// Record implements server.ThreadCatalog.
func (s *State) Record(_ context.Context, thread string) (server.ThreadRecord, bool, error) {
	b, ok, err := s.get(recordKey(thread))
	if err != nil || !ok {
		return server.ThreadRecord{}, false, err
	}
	r, err := decodeRecord(thread, b)
	return r, err == nil, err
}

// SetRecord implements server.ThreadCatalog.
func (s *State) SetRecord(_ context.Context, rec server.ThreadRecord) error {
	if err := s.log.checkWritable(); err != nil {
		return err
	}
	b, err := records.MarshalThreadRecord(rec)
	if err != nil {
		return err
	}
	s.idxMu.Lock()
	defer s.idxMu.Unlock()
	if err := s.db.Set(recordKey(rec.ID), b, pebble.Sync); err != nil {
		return err
	}
	if s.index != nil {
		s.index.Set(rec)
	}
	return nil
}

// Records implements server.ThreadCatalog: the records in thread order.
func (s *State) Records(_ context.Context, fn func(server.ThreadRecord) bool) error {
	prefix := []byte("m/")
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper(prefix)})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		r, err := decodeRecord(string(it.Key()[len(prefix):]), it.Value())
		if err != nil {
			continue // one that cannot be read is left out of lists
		}
		if !fn(r) {
			break
		}
	}
	return errors.Join(it.Error(), it.Close())
}

// The threads' runs (server.RunCatalog): "n/" THREAD 0 RUN -> the run as
// JSON, not synced (the run's own events are what a crash keeps of it),
// deleted with the thread.

var _ server.RunCatalog = (*State)(nil)

func runPrefix(thread string) []byte { return append(append([]byte("n/"), thread...), 0) }

// SetRun implements server.RunCatalog. The server writes run records
// from a goroutine of its own, which may still write as a store that was
// not closed cleanly goes away: Pebble's panic on a closed store is this
// write's error then.
func (s *State) SetRun(_ context.Context, rec server.RunRecord) (err error) {
	defer closedAsError(&err)
	if err := s.log.checkWritable(); err != nil {
		return err
	}
	b, err := records.MarshalRunRecord(rec)
	if err != nil {
		return err
	}
	batch := s.db.NewBatch()
	defer batch.Close()
	_ = batch.Set(append(runPrefix(rec.Thread), rec.ID...), b, nil)
	_ = batch.Set(runThreadKey(rec.ID), []byte(rec.Thread), nil)
	if rec.Open() {
		_ = batch.Set(openRunKey(rec.Thread, rec.ID), nil, nil)
	} else {
		_ = batch.Delete(openRunKey(rec.Thread, rec.ID), nil)
	}
	if err := batch.Commit(pebble.NoSync); err != nil {
		return err
	}
	s.wrote.Add(1)
	return nil
}

// openRunKey is "q/" THREAD 0 RUN: the run's record says it runs or is
// queued. A process that stops without ending it leaves the key, and
// the next Start ends the run (its record too, when none of its events
// reached the store to say it ran).
func openRunKey(thread, run string) []byte {
	return append(append(append([]byte("q/"), thread...), 0), run...)
}

// openRunThreads lists the threads with a run its record says is open.
func (s *State) openRunThreads() ([]string, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte("q/"), UpperBound: []byte("q0")})
	if err != nil {
		return nil, err
	}
	var threads []string
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()[2:]
		if i := bytes.IndexByte(k, 0); i >= 0 {
			if th := string(k[:i]); len(threads) == 0 || threads[len(threads)-1] != th {
				threads = append(threads, th)
			}
		}
	}
	return threads, errors.Join(it.Error(), it.Close())
}

// closedAsError makes Pebble's panic on a closed store *err (deferred by
// a write that may come as the store goes away); any other panic goes on.
func closedAsError(err *error) {
	if p := recover(); p != nil {
		if e, ok := p.(error); ok && errors.Is(e, pebble.ErrClosed) {
			*err = e
			return
		}
		panic(p)
	}
}

// runThreadKey is "o/" RUN -> the run's thread (RunThread), written with
// the run's record, deleted with it.
func runThreadKey(run string) []byte { return append([]byte("o/"), run...) }

// RunThread implements server.RunCatalog.
func (s *State) RunThread(_ context.Context, run string) (string, bool, error) {
	b, ok, err := s.get(runThreadKey(run))
	if err != nil || !ok {
		return "", false, err
	}
	return string(b), true, nil
}

// DeleteRun implements server.RunCatalog.
func (s *State) DeleteRun(_ context.Context, thread, run string) error {
	if err := s.log.checkWritable(); err != nil {
		return err
	}
	batch := s.db.NewBatch()
	defer batch.Close()
	_ = batch.Delete(append(runPrefix(thread), run...), nil)
	_ = batch.Delete(openRunKey(thread, run), nil)
	if b, ok, err := s.get(runThreadKey(run)); err == nil && ok && string(b) == thread {
		_ = batch.Delete(runThreadKey(run), nil)
	}
	if err := batch.Commit(pebble.NoSync); err != nil {
		return err
	}
	s.wrote.Add(1)
	return nil
}

// Runs implements server.RunCatalog: newest first.
func (s *State) Runs(_ context.Context, thread string) ([]server.RunRecord, error) {
	prefix := runPrefix(thread)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper(prefix)})
	if err != nil {
		return nil, err
	}
	var out []server.RunRecord
	for it.First(); it.Valid(); it.Next() {
		r, err := records.UnmarshalRunRecord(thread, string(it.Key()[len(prefix):]), it.Value())
		if err != nil {
			continue // one that cannot be read is left out of lists
		}
		out = append(out, r)
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b server.RunRecord) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return out, nil
}

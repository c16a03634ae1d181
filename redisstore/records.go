package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/records"
	"github.com/redis/rueidis"
)

// The threads' records (server.ThreadCatalog) in Redis: per thread
// PREFIX:{THREAD}:record (the record as JSON), living as long as the
// thread's other keys (the TTL, renewed with them), and one sorted set of
// every thread with a record, PREFIX:threads, scored by creation time,
// which any node lists (a search sees every node's threads). An entry
// whose record expired is taken out of the set when a listing finds it
// gone.

var (
	_ server.ThreadCatalog = (*State)(nil)
	_ server.ThreadDeleter = (*State)(nil)
)

func (e *Engine) threadsKey() string { return e.prefix + ":threads" }

func decodeRedisRecord(thread string, b []byte) (server.ThreadRecord, error) {
	r, err := records.UnmarshalThreadRecord(thread, b)
	if err != nil {
		return server.ThreadRecord{}, fmt.Errorf("redisstore: thread %s's record: %w", thread, err)
	}
	return r, nil
}

// Record implements server.ThreadCatalog.
func (s *State) Record(ctx context.Context, thread string) (server.ThreadRecord, bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c := s.e.c
	b, err := c.Do(ctx, c.B().Get().Key(s.e.key(thread, "record")).Build()).AsBytes()
	if rueidis.IsRedisNil(err) {
		return server.ThreadRecord{}, false, nil
	}
	if err != nil {
		return server.ThreadRecord{}, false, s.fail(err)
	}
	r, err := decodeRedisRecord(thread, b)
	return r, err == nil, err
}

// SetRecord implements server.ThreadCatalog: the record, with the
// thread's TTL, and its entry in the set of threads.
func (s *State) SetRecord(ctx context.Context, rec server.ThreadRecord) error {
	b, err := records.MarshalThreadRecord(rec)
	if err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c := s.e.c
	for _, r := range c.DoMulti(ctx,
		c.B().Set().Key(s.e.key(rec.ID, "record")).Value(string(b)).Px(s.e.ttl).Build(),
		c.B().Zadd().Key(s.e.threadsKey()).ScoreMember().ScoreMember(float64(rec.CreatedAt.UnixMilli()), rec.ID).Build(),
	) {
		if err := r.Error(); err != nil {
			return s.fail(err)
		}
	}
	return nil
}

// Records implements server.ThreadCatalog: every thread of the set whose
// record is there, oldest first, read in pipelined pages.
func (s *State) Records(ctx context.Context, fn func(server.ThreadRecord) bool) error {
	c := s.e.c
	const page = 1000
	for start := int64(0); ; start += page {
		bctx, cancel := s.bound(ctx)
		ids, err := c.Do(bctx, c.B().Zrange().Key(s.e.threadsKey()).Min(fmt.Sprint(start)).Max(fmt.Sprint(start+page-1)).Build()).AsStrSlice()
		if err != nil {
			cancel()
			return s.fail(err)
		}
		if len(ids) == 0 {
			cancel()
			return nil
		}
		gets := make(rueidis.Commands, len(ids))
		for i, id := range ids {
			gets[i] = c.B().Get().Key(s.e.key(id, "record")).Build()
		}
		res := c.DoMulti(bctx, gets...)
		var gone []string
		for i, r := range res {
			b, err := r.AsBytes()
			if rueidis.IsRedisNil(err) {
				gone = append(gone, ids[i])
				continue
			}
			if err != nil {
				cancel()
				return s.fail(err)
			}
			rec, err := decodeRedisRecord(ids[i], b)
			if err != nil {
				continue // one that cannot be read is left out of lists
			}
			if !fn(rec) {
				cancel()
				return nil
			}
		}
		if len(gone) > 0 {
			_ = c.Do(bctx, c.B().Zrem().Key(s.e.threadsKey()).Member(gone...).Build()).Error()
			start -= int64(len(gone)) // the set moved up
		}
		cancel()
		if len(ids) < page {
			return nil
		}
	}
}

// DeleteThread implements server.ThreadDeleter: everything the engine
// keeps of the thread goes now (Delete, the idle thread's, leaves the
// keys to their TTL).
func (s *State) DeleteThread(ctx context.Context, thread string) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if !awaitFlushed(ctx, s.Flushed, thread) {
		return fmt.Errorf("%w: the thread's last events are still being written", ErrUnavailable)
	}
	if err := s.e.Forget(ctx, thread); err != nil {
		return s.fail(err)
	}
	return s.fail(s.e.c.Do(ctx, s.e.c.B().Zrem().Key(s.e.threadsKey()).Member(thread).Build()).Error())
}

// The threads' runs (server.RunCatalog): a hash per thread,
// PREFIX:{THREAD}:runs, field the run's id, value the run as JSON; it
// lives as long as the thread's other keys and goes with them.

var _ server.RunCatalog = (*State)(nil)

// SetRun implements server.RunCatalog.
func (s *State) SetRun(ctx context.Context, rec server.RunRecord) error {
	b, err := records.MarshalRunRecord(rec)
	if err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c := s.e.c
	k := s.e.key(rec.Thread, "runs")
	for _, r := range c.DoMulti(ctx, c.B().Hset().Key(k).FieldValue().FieldValue(rec.ID, string(b)).Build(), c.B().Pexpire().Key(k).Milliseconds(s.e.ttlMillis()).Build(),
		c.B().Set().Key(s.e.runThreadKey(rec.ID)).Value(rec.Thread).Px(s.e.ttl).Build()) {
		if err := r.Error(); err != nil {
			return s.fail(err)
		}
	}
	return nil
}

// runThreadKey is PREFIX:run:RUN, the run's thread (RunThread), with the
// thread's TTL, renewed as the run's record is written.
func (e *Engine) runThreadKey(run string) string { return e.prefix + ":run:" + run }

// RunThread implements server.RunCatalog.
func (s *State) RunThread(ctx context.Context, run string) (string, bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c := s.e.c
	thread, err := c.Do(ctx, c.B().Get().Key(s.e.runThreadKey(run)).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, s.fail(err)
	}
	return thread, true, nil
}

// DeleteRun implements server.RunCatalog.
func (s *State) DeleteRun(ctx context.Context, thread, run string) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c := s.e.c
	for _, r := range c.DoMulti(ctx, c.B().Hdel().Key(s.e.key(thread, "runs")).Field(run).Build(), c.B().Del().Key(s.e.runThreadKey(run)).Build()) {
		if err := r.Error(); err != nil {
			return s.fail(err)
		}
	}
	return nil
}

// Runs implements server.RunCatalog: newest first.
func (s *State) Runs(ctx context.Context, thread string) ([]server.RunRecord, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c := s.e.c
	m, err := c.Do(ctx, c.B().Hgetall().Key(s.e.key(thread, "runs")).Build()).AsStrMap()
	if err != nil {
		return nil, s.fail(err)
	}
	out := make([]server.RunRecord, 0, len(m))
	for id, v := range m {
		r, err := records.UnmarshalRunRecord(thread, id, []byte(v))
		if err != nil {
			continue
		}
		out = append(out, r)
	}
	slices.SortStableFunc(out, func(a, b server.RunRecord) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	return out, nil
}

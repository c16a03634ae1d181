package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/records"
	"github.com/redis/rueidis"
)

// State is the server.StateStore in Redis: per thread a hash (field
// "values": the values as JSON; field "owner") and a list of checkpoints
// (JSON, oldest first).
//
// The interface has no errors to return: a command that fails (Redis
// unreachable) reads as "nothing stored" and a write is lost; OnError
// hears of each.
type State struct {
	e *Engine
	// MaxCheckpoints caps the checkpoints kept per thread (100 when 0).
	MaxCheckpoints int
	// OnError, when set, hears of every failed Redis command.
	OnError func(error)
	// Timeout bounds each command (2s when 0).
	Timeout time.Duration
	// Flushed, when set, reports whether the thread's events appended to
	// the engine's Log are all written to Redis (Log.Flushed): a thread is
	// deleted only once they are, or a late batch would make its stream
	// again after the deletion, and the thread would come back.
	Flushed func(thread string) bool
}

var _ server.StateStore = (*State)(nil)

// State returns the engine's state store.
func (e *Engine) State() *State { return &State{e: e} }

// bound is ctx bounded by the store's Timeout.
func (s *State) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	t := s.Timeout
	if t <= 0 {
		t = 2 * time.Second
	}
	return context.WithTimeout(ctx, t)
}

// fail reports err (not a missing key) to OnError and returns it wrapped
// as the engine's: ErrUnavailable for a Redis that could not be reached.
func (s *State) fail(err error) error {
	if err == nil || rueidis.IsRedisNil(err) {
		return nil
	}
	if s.OnError != nil {
		s.OnError(err)
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}

// Exists implements server.StateStore: the thread has state, checkpoints
// or events.
func (s *State) Exists(ctx context.Context, thread string) (bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c := s.e.c
	// A thread exists while any of its keys does: its events too (a
	// thread with history but no values yet is a thread).
	n, err := c.Do(ctx, c.B().Exists().Key(s.e.key(thread, "state"), s.e.key(thread, "cps"), s.e.key(thread, "events")).Build()).AsInt64()
	if err := s.fail(err); err != nil {
		return false, err
	}
	return n > 0, nil
}

// Values implements server.StateStore.
func (s *State) Values(ctx context.Context, thread string) (map[string]any, bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c := s.e.c
	b, err := c.Do(ctx, c.B().Hget().Key(s.e.key(thread, "state")).Field("values").Build()).AsBytes()
	if rueidis.IsRedisNil(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, s.fail(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, false, s.fail(fmt.Errorf("thread %s: its stored values do not decode: %w", thread, err))
	}
	return v, true, nil
}

// SetValues implements server.StateStore.
func (s *State) SetValues(ctx context.Context, thread string, values map[string]any) error {
	b, err := json.Marshal(values)
	if err != nil {
		return fmt.Errorf("thread %s: the values do not encode: %w", thread, err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c := s.e.c
	k := s.e.key(thread, "state")
	for _, r := range c.DoMulti(ctx,
		c.B().Hset().Key(k).FieldValue().FieldValue("values", rueidis.BinaryString(b)).Build(),
		c.B().Pexpire().Key(k).Milliseconds(s.e.ttlMillis()).Build(),
	) {
		if err := s.fail(r.Error()); err != nil {
			return err
		}
	}
	return nil
}

// checkpoint is a CheckpointRecord as stored.
type checkpoint struct {
	ID        string         `json:"id"`
	ParentID  string         `json:"parent_id,omitempty"`
	Step      int64          `json:"step"`
	Source    string         `json:"source,omitempty"`
	Namespace []string       `json:"namespace,omitempty"`
	Node      string         `json:"node,omitempty"`
	Time      time.Time      `json:"time"`
	Values    map[string]any `json:"values,omitempty"`
	Metadata  map[string]any `json:"metadata,omitempty"`
}

// AddCheckpoint implements server.StateStore.
func (s *State) AddCheckpoint(ctx context.Context, thread string, cp server.CheckpointRecord) error {
	b, err := json.Marshal(checkpoint{ID: cp.ID, ParentID: cp.ParentID, Step: cp.Step, Source: cp.Source, Namespace: cp.Namespace,
		Node: cp.Node, Time: cp.Time, Values: cp.Values, Metadata: cp.Metadata})
	if err != nil {
		return fmt.Errorf("thread %s: the checkpoint does not encode: %w", thread, err)
	}
	max := s.MaxCheckpoints
	if max <= 0 {
		max = server.DefaultMaxCheckpoints
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c := s.e.c
	k := s.e.key(thread, "cps")
	for _, r := range c.DoMulti(ctx,
		c.B().Rpush().Key(k).Element(rueidis.BinaryString(b)).Build(),
		c.B().Ltrim().Key(k).Start(int64(-max)).Stop(-1).Build(),
		c.B().Pexpire().Key(k).Milliseconds(s.e.ttlMillis()).Build(),
	) {
		if err := s.fail(r.Error()); err != nil {
			return err
		}
	}
	return nil
}

// Checkpoints implements server.StateStore: newest first.
func (s *State) Checkpoints(ctx context.Context, thread string) ([]server.CheckpointRecord, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c := s.e.c
	items, err := c.Do(ctx, c.B().Lrange().Key(s.e.key(thread, "cps")).Start(0).Stop(-1).Build()).AsStrSlice()
	if err := s.fail(err); err != nil {
		return nil, err
	}
	out := make([]server.CheckpointRecord, 0, len(items))
	for i := len(items) - 1; i >= 0; i-- {
		var cp checkpoint
		if err := json.Unmarshal([]byte(items[i]), &cp); err != nil {
			return nil, s.fail(fmt.Errorf("thread %s: a stored checkpoint does not decode: %w", thread, err))
		}
		out = append(out, server.CheckpointRecord{ID: cp.ID, ParentID: cp.ParentID, Step: cp.Step, Source: cp.Source,
			Namespace: cp.Namespace, Node: cp.Node, Time: cp.Time, Values: cp.Values, Metadata: cp.Metadata})
	}
	return out, nil
}

// NewestCheckpoint implements records.NewestCheckpointer: the list's
// last item alone.
func (s *State) NewestCheckpoint(ctx context.Context, thread string) (server.CheckpointRecord, bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c := s.e.c
	items, err := c.Do(ctx, c.B().Lrange().Key(s.e.key(thread, "cps")).Start(-1).Stop(-1).Build()).AsStrSlice()
	if err := s.fail(err); err != nil || len(items) == 0 {
		return server.CheckpointRecord{}, false, err
	}
	var cp checkpoint
	if err := json.Unmarshal([]byte(items[0]), &cp); err != nil {
		return server.CheckpointRecord{}, false, s.fail(fmt.Errorf("thread %s: a stored checkpoint does not decode: %w", thread, err))
	}
	return server.CheckpointRecord{ID: cp.ID, ParentID: cp.ParentID, Step: cp.Step, Source: cp.Source,
		Namespace: cp.Namespace, Node: cp.Node, Time: cp.Time, Metadata: cp.Metadata}, true, nil
}

// PatchNewestCheckpoint implements records.CheckpointPatcher: the list's
// last checkpoint set again with metadata merged, if it is still the last
// (WATCH: a checkpoint added meanwhile refuses the change, asked again).
func (s *State) PatchNewestCheckpoint(ctx context.Context, thread string, metadata map[string]any) (server.CheckpointRecord, bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	k := s.e.key(thread, "cps")
	var out server.CheckpointRecord
	found := false
	err := s.e.c.Dedicated(func(c rueidis.DedicatedClient) error {
		for attempt := 0; attempt < 5; attempt++ {
			if err := c.Do(ctx, c.B().Watch().Key(k).Build()).Error(); err != nil {
				return err
			}
			items, err := c.Do(ctx, c.B().Lrange().Key(k).Start(-1).Stop(-1).Build()).AsStrSlice()
			if err != nil || len(items) == 0 {
				_ = c.Do(ctx, c.B().Unwatch().Build()).Error()
				return err
			}
			var cp checkpoint
			if err := json.Unmarshal([]byte(items[0]), &cp); err != nil {
				_ = c.Do(ctx, c.B().Unwatch().Build()).Error()
				return fmt.Errorf("thread %s: a stored checkpoint does not decode: %w", thread, err)
			}
			cp.Metadata = records.MergedMetadata(cp.Metadata, metadata)
			b, err := json.Marshal(cp)
			if err != nil {
				_ = c.Do(ctx, c.B().Unwatch().Build()).Error()
				return err
			}
			res := c.DoMulti(ctx, c.B().Multi().Build(), c.B().Lset().Key(k).Index(-1).Element(rueidis.BinaryString(b)).Build(), c.B().Exec().Build())
			exec := res[len(res)-1]
			if err := exec.Error(); err != nil {
				if rueidis.IsRedisNil(err) {
					continue // a checkpoint came meanwhile: again
				}
				return err
			}
			if vs, err := exec.ToArray(); err == nil && len(vs) == 0 {
				continue
			}
			out = server.CheckpointRecord{ID: cp.ID, ParentID: cp.ParentID, Step: cp.Step, Source: cp.Source, Namespace: cp.Namespace,
				Node: cp.Node, Time: cp.Time, Metadata: cp.Metadata}
			found = true
			return nil
		}
		return fmt.Errorf("thread %s: its checkpoints kept changing", thread)
	})
	if err := s.fail(err); err != nil {
		return server.CheckpointRecord{}, false, err
	}
	return out, found, nil
}

// Checkpoint implements server.StateStore.
func (s *State) Checkpoint(ctx context.Context, thread, id string) (server.CheckpointRecord, bool, error) {
	cps, err := s.Checkpoints(ctx, thread)
	if err != nil {
		return server.CheckpointRecord{}, false, err
	}
	for _, cp := range cps {
		if cp.ID == id {
			return cp, true, nil
		}
	}
	return server.CheckpointRecord{}, false, nil
}

// Owner implements server.StateStore.
func (s *State) Owner(ctx context.Context, thread string) (string, bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c := s.e.c
	o, err := c.Do(ctx, c.B().Hget().Key(s.e.key(thread, "state")).Field("owner").Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, s.fail(err)
	}
	return o, o != "", nil
}

// ClaimOwner implements server.StateStore, atomically (HSETNX).
func (s *State) ClaimOwner(ctx context.Context, thread, principal string) (string, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c := s.e.c
	k := s.e.key(thread, "state")
	rs := c.DoMulti(ctx,
		c.B().Hsetnx().Key(k).Field("owner").Value(principal).Build(),
		c.B().Pexpire().Key(k).Milliseconds(s.e.ttlMillis()).Build(),
		c.B().Hget().Key(k).Field("owner").Build(),
	)
	for _, r := range rs[:2] {
		if err := s.fail(r.Error()); err != nil {
			return "", err
		}
	}
	o, err := rs[2].ToString()
	if err := s.fail(err); err != nil {
		return "", err
	}
	return o, nil
}

// Delete implements server.StateStore. A node forgetting an idle thread
// keeps its state in Redis: other nodes, and this one after a restart,
// may still serve it, and the keys expire by themselves after the TTL.
func (s *State) Delete(context.Context, string) error { return nil }

// Forget deletes everything the engine keeps of a thread, now.
func (e *Engine) Forget(ctx context.Context, thread string) error {
	c := e.c
	return c.Do(ctx, c.B().Del().Key(e.key(thread, "state"), e.key(thread, "cps"), e.key(thread, "events"), e.key(thread, "writer"), e.key(thread, "producers"), e.key(thread, "record"), e.key(thread, "runs")).Build()).Error()
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

package redisstore

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/agentstream/agentstream/server"
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
}

var _ server.StateStore = (*State)(nil)

// State returns the engine's state store.
func (e *Engine) State() *State { return &State{e: e} }

func (s *State) ctx() (context.Context, context.CancelFunc) {
	t := s.Timeout
	if t <= 0 {
		t = 2 * time.Second
	}
	return context.WithTimeout(context.Background(), t)
}

func (s *State) fail(err error) {
	if err != nil && s.OnError != nil && !rueidis.IsRedisNil(err) {
		s.OnError(err)
	}
}

// Exists implements server.StateStore.
func (s *State) Exists(thread string) bool {
	ctx, cancel := s.ctx()
	defer cancel()
	c := s.e.c
	n, err := c.Do(ctx, c.B().Exists().Key(s.e.key(thread, "state"), s.e.key(thread, "cps")).Build()).AsInt64()
	s.fail(err)
	return n > 0
}

// Values implements server.StateStore.
func (s *State) Values(thread string) (map[string]any, bool) {
	ctx, cancel := s.ctx()
	defer cancel()
	c := s.e.c
	b, err := c.Do(ctx, c.B().Hget().Key(s.e.key(thread, "state")).Field("values").Build()).AsBytes()
	if err != nil {
		s.fail(err)
		return nil, false
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		s.fail(err)
		return nil, false
	}
	return v, true
}

// SetValues implements server.StateStore.
func (s *State) SetValues(thread string, values map[string]any) {
	b, err := json.Marshal(values)
	if err != nil {
		s.fail(err)
		return
	}
	ctx, cancel := s.ctx()
	defer cancel()
	c := s.e.c
	k := s.e.key(thread, "state")
	for _, r := range c.DoMulti(ctx,
		c.B().Hset().Key(k).FieldValue().FieldValue("values", rueidis.BinaryString(b)).Build(),
		c.B().Pexpire().Key(k).Milliseconds(s.e.ttlMillis()).Build(),
	) {
		s.fail(r.Error())
	}
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
func (s *State) AddCheckpoint(thread string, cp server.CheckpointRecord) {
	b, err := json.Marshal(checkpoint{ID: cp.ID, ParentID: cp.ParentID, Step: cp.Step, Source: cp.Source, Namespace: cp.Namespace,
		Node: cp.Node, Time: cp.Time, Values: cp.Values, Metadata: cp.Metadata})
	if err != nil {
		s.fail(err)
		return
	}
	max := s.MaxCheckpoints
	if max <= 0 {
		max = server.DefaultMaxCheckpoints
	}
	ctx, cancel := s.ctx()
	defer cancel()
	c := s.e.c
	k := s.e.key(thread, "cps")
	for _, r := range c.DoMulti(ctx,
		c.B().Rpush().Key(k).Element(rueidis.BinaryString(b)).Build(),
		c.B().Ltrim().Key(k).Start(int64(-max)).Stop(-1).Build(),
		c.B().Pexpire().Key(k).Milliseconds(s.e.ttlMillis()).Build(),
	) {
		s.fail(r.Error())
	}
}

// Checkpoints implements server.StateStore: newest first.
func (s *State) Checkpoints(thread string) []server.CheckpointRecord {
	ctx, cancel := s.ctx()
	defer cancel()
	c := s.e.c
	items, err := c.Do(ctx, c.B().Lrange().Key(s.e.key(thread, "cps")).Start(0).Stop(-1).Build()).AsStrSlice()
	if err != nil {
		s.fail(err)
		return nil
	}
	out := make([]server.CheckpointRecord, 0, len(items))
	for i := len(items) - 1; i >= 0; i-- {
		var cp checkpoint
		if err := json.Unmarshal([]byte(items[i]), &cp); err != nil {
			s.fail(err)
			continue
		}
		out = append(out, server.CheckpointRecord{ID: cp.ID, ParentID: cp.ParentID, Step: cp.Step, Source: cp.Source,
			Namespace: cp.Namespace, Node: cp.Node, Time: cp.Time, Values: cp.Values, Metadata: cp.Metadata})
	}
	return out
}

// Checkpoint implements server.StateStore.
func (s *State) Checkpoint(thread, id string) (server.CheckpointRecord, bool) {
	for _, cp := range s.Checkpoints(thread) {
		if cp.ID == id {
			return cp, true
		}
	}
	return server.CheckpointRecord{}, false
}

// Owner implements server.StateStore.
func (s *State) Owner(thread string) (string, bool) {
	ctx, cancel := s.ctx()
	defer cancel()
	c := s.e.c
	o, err := c.Do(ctx, c.B().Hget().Key(s.e.key(thread, "state")).Field("owner").Build()).ToString()
	if err != nil {
		s.fail(err)
		return "", false
	}
	return o, o != ""
}

// ClaimOwner implements server.StateStore, atomically (HSETNX).
func (s *State) ClaimOwner(thread, principal string) string {
	ctx, cancel := s.ctx()
	defer cancel()
	c := s.e.c
	k := s.e.key(thread, "state")
	rs := c.DoMulti(ctx,
		c.B().Hsetnx().Key(k).Field("owner").Value(principal).Build(),
		c.B().Pexpire().Key(k).Milliseconds(s.e.ttlMillis()).Build(),
		c.B().Hget().Key(k).Field("owner").Build(),
	)
	o, err := rs[2].ToString()
	if err != nil {
		s.fail(err)
		return ""
	}
	return o
}

// Delete implements server.StateStore. A node forgetting an idle thread
// keeps its state in Redis: other nodes, and this one after a restart,
// may still serve it, and the keys expire by themselves after the TTL.
func (s *State) Delete(thread string) {}

// Forget deletes everything the engine keeps of a thread, now.
func (e *Engine) Forget(ctx context.Context, thread string) error {
	c := e.c
	return c.Do(ctx, c.B().Del().Key(e.key(thread, "state"), e.key(thread, "cps"), e.key(thread, "events")).Build()).Error()
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

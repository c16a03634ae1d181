package redisstore

import (
	"context"
	"encoding/json"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/server"
	"github.com/redis/rueidis"
)

// Detached is the server.DetachedStore in Redis: a dropped session's
// subscription is the key PREFIX:{THREAD}:sub:ID, holding its filter and
// cursor as JSON, for the reconnect grace; subscription.reconnect on any
// node takes it (GETDEL), so that it is restored once.
type Detached struct {
	e     *Engine
	state *State // for its timeout and error reporting
}

var _ server.DetachedStore = (*Detached)(nil)

// Detached returns the engine's store of dropped sessions' subscriptions.
func (e *Engine) Detached() *Detached { return &Detached{e: e, state: e.State()} }

// detachedJSON is a detached subscription as Redis keeps it.
type detachedJSON struct {
	Channels   []string   `json:"c,omitempty"`
	Namespaces [][]string `json:"n,omitempty"`
	Depth      int        `json:"d"`
	Epoch      string     `json:"e,omitempty"`
	Seq        uint64     `json:"s"`
}

func (d *Detached) key(thread, id string) string { return d.e.key(thread, "sub:"+id) }

// Keep implements server.DetachedStore.
func (d *Detached) Keep(ctx context.Context, id string, s server.DetachedSubscription, ttl time.Duration) error {
	v := detachedJSON{Channels: s.Filter.Channels, Depth: s.Filter.Depth, Epoch: s.Last.Epoch, Seq: s.Last.Seq}
	for _, ns := range s.Filter.Namespaces {
		v.Namespaces = append(v.Namespaces, []string(ns))
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	ctx, cancel := d.state.bound(ctx)
	defer cancel()
	c := d.e.c
	return d.state.fail(c.Do(ctx, c.B().Set().Key(d.key(s.Thread, id)).Value(rueidis.BinaryString(b)).Px(max(ttl, time.Millisecond)).Build()).Error())
}

// Take implements server.DetachedStore.
func (d *Detached) Take(ctx context.Context, thread, id string) (server.DetachedSubscription, bool, error) {
	ctx, cancel := d.state.bound(ctx)
	defer cancel()
	c := d.e.c
	b, err := c.Do(ctx, c.B().Getdel().Key(d.key(thread, id)).Build()).AsBytes()
	if rueidis.IsRedisNil(err) {
		return server.DetachedSubscription{}, false, nil
	}
	if err != nil {
		return server.DetachedSubscription{}, false, d.state.fail(err)
	}
	var v detachedJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return server.DetachedSubscription{}, false, nil // not one of ours: as if absent
	}
	f := channels.Filter{Channels: v.Channels, Depth: v.Depth}
	for _, ns := range v.Namespaces {
		f.Namespaces = append(f.Namespaces, channels.Namespace(ns))
	}
	return server.DetachedSubscription{Thread: thread, Filter: f, Last: server.Cursor{Epoch: v.Epoch, Seq: v.Seq}}, true, nil
}

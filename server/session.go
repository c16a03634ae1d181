package server

import (
	"context"
	"sync"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
)

// Session is a connection's scope on one thread (a WebSocket, or an
// in-process client): it carries the subscription commands, holding the
// subscriptions it made, and passes every other command to [Server.Do].
// When the connection drops, [Session.Detach] keeps its subscriptions
// restorable by subscription.reconnect for Config.ReconnectGrace.
type Session struct {
	srv    *Server
	thread string

	mu     sync.Mutex
	subs   map[string]*SessionSub
	closed bool
}

// SessionSub is one subscription of a session.
type SessionSub struct {
	ID  string
	Sub *Subscription
}

// detachedSession remembers the subscriptions of a dropped session.
type detachedSession struct {
	thread  string
	filter  channels.Filter
	lastSeq uint64
	expires time.Time
}

// NewSession opens a connection scope on thread threadID.
func (s *Server) NewSession(threadID string) *Session {
	return &Session{srv: s, thread: threadID, subs: map[string]*SessionSub{}}
}

// Thread is the session's thread.
func (ss *Session) Thread() string { return ss.thread }

// Subscriptions lists the session's live subscriptions.
func (ss *Session) Subscriptions() []*SessionSub {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	out := make([]*SessionSub, 0, len(ss.subs))
	for _, s := range ss.subs {
		out = append(out, s)
	}
	return out
}

// Do carries out a command in this session. onSubscribe, when not nil, is
// called with each subscription the command creates, before the response
// is returned, so the transport can start reading it.
func (ss *Session) Do(ctx context.Context, cmd *protocol.ClientCommand, onSubscribe func(*SessionSub)) (*protocol.CommandResponse, *protocol.ErrorResponse) {
	switch c := cmd.Value.(type) {
	case *protocol.ClientCommandSubscriptionSubscribe:
		ss.srv.metrics.commands.Add(1)
		f := FilterOf(c.Params.Channels, c.Params.Namespaces, c.Params.Depth)
		applied := ss.srv.LastSeq(ss.thread)
		sub, replayed, err := ss.srv.Subscribe(ss.thread, f, nil)
		if err != nil {
			return nil, errorResponse(c.ID, protocol.ErrorCodeUnknownError, "%v", err)
		}
		s := ss.add(ss.srv.cfg.NewID("sub_"), sub)
		if onSubscribe != nil {
			onSubscribe(s)
		}
		n := protocol.JsUint(replayed)
		return success(c.ID, applied, protocol.SubscribeResult{SubscriptionID: s.ID, ReplayedEvents: &n}), nil
	case *protocol.ClientCommandSubscriptionUnsubscribe:
		ss.srv.metrics.commands.Add(1)
		ss.mu.Lock()
		s := ss.subs[c.Params.SubscriptionID]
		delete(ss.subs, c.Params.SubscriptionID)
		ss.mu.Unlock()
		if s == nil {
			return nil, errorResponse(c.ID, protocol.ErrorCodeNoSuchSubscription, "params.subscription_id: no subscription %q on this connection", c.Params.SubscriptionID)
		}
		s.Sub.Close()
		return success(c.ID, ss.srv.LastSeq(ss.thread), nil), nil
	case *protocol.ClientCommandSubscriptionReconnect:
		ss.srv.metrics.commands.Add(1)
		return ss.reconnect(c, onSubscribe)
	}
	return ss.srv.Do(ctx, ss.thread, cmd)
}

func (ss *Session) add(id string, sub *Subscription) *SessionSub {
	s := &SessionSub{ID: id, Sub: sub}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		sub.Close()
		return s
	}
	ss.subs[id] = s
	return s
}

// reconnect restores subscriptions of a dropped session by id and replays
// what they missed: after last_event_id when given, else after the last
// event each had read.
func (ss *Session) reconnect(c *protocol.ClientCommandSubscriptionReconnect, onSubscribe func(*SessionSub)) (*protocol.CommandResponse, *protocol.ErrorResponse) {
	p := c.Params
	var cursor *uint64
	if p.LastEventID != nil {
		if n, ok := parseSeq(*p.LastEventID); ok {
			cursor = &n
		} else {
			return nil, errorResponse(c.ID, protocol.ErrorCodeInvalidArgument, "params.last_event_id: %q is not an event id of this server", *p.LastEventID)
		}
	}
	applied := ss.srv.LastSeq(ss.thread)
	ss.srv.mu.Lock()
	var found []string
	var detached []*detachedSession
	now := ss.srv.cfg.Now()
	for _, id := range p.Subscriptions {
		d := ss.srv.sessions[id]
		if d == nil || d.thread != ss.thread || now.After(d.expires) {
			continue
		}
		delete(ss.srv.sessions, id)
		found = append(found, id)
		detached = append(detached, d)
	}
	ss.srv.mu.Unlock()
	missed := 0
	for i, d := range detached {
		from := d.lastSeq
		if cursor != nil {
			from = *cursor
		}
		sub, replayed, err := ss.srv.Subscribe(ss.thread, d.filter, &from)
		if err != nil {
			return nil, errorResponse(c.ID, protocol.ErrorCodeUnknownError, "%v", err)
		}
		missed += replayed
		s := ss.add(found[i], sub)
		if onSubscribe != nil {
			onSubscribe(s)
		}
	}
	restored := len(found) > 0 && len(found) == len(p.Subscriptions)
	n := protocol.JsUint(missed)
	res := protocol.ReconnectResult{Restored: restored, MissedEvents: &n, CurrentNamespaces: ss.srv.namespaces(ss.thread)}
	return success(c.ID, applied, res), nil
}

// namespaces lists every namespace of the thread with its status.
func (s *Server) namespaces(threadID string) []protocol.AgentStatusEntry {
	out := []protocol.AgentStatusEntry{}
	t, _ := s.thread(threadID, false)
	if t == nil {
		return out
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range t.tree {
		out = append(out, protocol.AgentStatusEntry{Namespace: nonNil(n.ns), Status: n.status})
	}
	return out
}

// Detach ends the session because its connection dropped: its
// subscriptions stop, but stay restorable by id, from the last event each
// read, for Config.ReconnectGrace.
func (ss *Session) Detach() {
	ss.mu.Lock()
	subs := ss.subs
	ss.subs, ss.closed = map[string]*SessionSub{}, true
	ss.mu.Unlock()
	expires := ss.srv.cfg.Now().Add(ss.srv.cfg.ReconnectGrace)
	ss.srv.mu.Lock()
	for id, s := range subs {
		ss.srv.sessions[id] = &detachedSession{thread: ss.thread, filter: s.Sub.Filter(), lastSeq: s.Sub.LastSeq(), expires: expires}
	}
	ss.srv.mu.Unlock()
	for _, s := range subs {
		s.Sub.Close()
	}
}

// Close ends the session and its subscriptions for good.
func (ss *Session) Close() {
	ss.mu.Lock()
	subs := ss.subs
	ss.subs, ss.closed = map[string]*SessionSub{}, true
	ss.mu.Unlock()
	for _, s := range subs {
		s.Sub.Close()
	}
}

// FilterOf builds a filter from the protocol's subscription parameters.
func FilterOf(chans []protocol.Channel, namespaces []protocol.Namespace, depth *protocol.JsUint) channels.Filter {
	f := channels.Filter{Depth: channels.Unlimited}
	for _, c := range chans {
		f.Channels = append(f.Channels, string(c))
	}
	for _, ns := range namespaces {
		f.Namespaces = append(f.Namespaces, channels.Namespace(ns))
	}
	if depth != nil {
		f.Depth = int(min(*depth, 1<<30))
	}
	return f
}

func parseSeq(s string) (uint64, bool) {
	var n uint64
	if s == "" {
		return 0, false
	}
	for _, c := range s {
		if c < '0' || c > '9' || n > (1<<63)/10 {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, true
}

package server

import (
	"encoding/json"
	"fmt"
	"sync/atomic"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/fxamacker/cbor/v2"
)

// Event is one event of a thread's stream. It is immutable once published:
// the same Event is handed to every subscriber, typed for in-process
// readers and encoded once per wire encoding for the others.
type Event struct {
	// Seq is the thread's sequence number of the event; 0 for
	// per-subscriber notices that are not in the stream.
	Seq uint64
	// Method is the event's method (its channel, or input.requested ...).
	Method string
	// Channel is the channel subscriptions select it by.
	Channel string
	// Name is the name of a custom event ("" otherwise).
	Name string
	// Namespace is where in the agent tree it happened.
	Namespace channels.Namespace
	// Payload is the event as the protocol types describe it. An event
	// replayed from a replay buffer (which keeps JSON only), read back
	// from a durable log or received from another node (DecodeEvent)
	// carries its JSON only, and Payload is nil but for
	// lifecycle events: the wire transports need no more, and decoding
	// every event was a third of a receiving node's CPU. WithPayload
	// returns it with its payload.
	Payload protocol.ServerEventVariant

	id   string // the event_id, "EPOCH-SEQ"
	json []byte
	cbor atomic.Pointer[cborForm] // made on first use
}

// cborForm is an event's CBOR encoding, kept apart so that the events of
// JSON readers (most) carry one pointer for it, not the encoding's fields.
type cborForm struct {
	b   []byte
	err error
}

// Sequence returns Seq (for the replay buffer).
func (e *Event) Sequence() uint64 { return e.Seq }

// Size is the event's encoded JSON size, which buffer and queue caps count.
func (e *Event) Size() int { return len(e.json) }

// JSON is the event encoded as JSON, computed once when it was published.
func (e *Event) JSON() []byte { return e.json }

// CBOR is the event encoded as CBOR, computed once on first use.
func (e *Event) CBOR() ([]byte, error) {
	if f := e.cbor.Load(); f != nil {
		return f.b, f.err
	}
	f := &cborForm{}
	if p, err := e.typed(); err != nil {
		f.err = err
	} else {
		f.b, f.err = cbor.Marshal(protocol.ServerEvent{Value: p})
	}
	if !e.cbor.CompareAndSwap(nil, f) {
		f = e.cbor.Load() // another reader made it first: one encoding for all
	}
	return f.b, f.err
}

// EventID is the event's id on the wire, "EPOCH-SEQ" (see [Cursor]); ""
// for notices.
func (e *Event) EventID() string { return e.id }

// eventData is what an emitter hands the thread to publish: everything of
// an event but its envelope (sequence number, event id) and its time,
// which publishing assigns.
type eventData struct {
	namespace channels.Namespace
	node      string
	name      string // custom events
	// data is the params' data member, which encodeEventJSON writes.
	data any
	// payload builds the typed event from its namespace, time and node.
	payload func(h header) protocol.ServerEventVariant
}

// rootNamespace is the namespace of the root agent's events, shared by
// all of them (never appended to).
var rootNamespace = protocol.Namespace{}

// header is what every event's params carry besides its data.
type header struct {
	ns   protocol.Namespace
	ts   protocol.Timestamp
	node *string
}

// buildEvent makes the Event for d with sequence number seq of the stream
// epoch (seq 0 for a notice) at time ts (milliseconds) and encodes it.
func buildEvent(d eventData, epoch string, seq uint64, ts uint64) (*Event, error) {
	h := header{ns: protocol.Namespace(d.namespace), ts: ts}
	if h.ns == nil {
		h.ns = rootNamespace
	}
	if d.node != "" {
		node := d.node // not &d.node: d would move to the heap for every event
		h.node = &node
	}
	p := d.payload(h)
	var id string
	if seq > 0 {
		// The typed event points at its id and seq: one allocation for
		// both rather than one each.
		env := &struct {
			id  string
			seq protocol.JsUint
		}{eventID(epoch, seq), seq}
		id = env.id
		p.SetEventID(&env.id)
		p.SetSeq(&env.seq)
	}
	method := p.Method()
	b, err := encodeEventJSON(method, id, seq, h, d.data)
	if err != nil {
		return nil, err
	}
	return &Event{
		Seq: seq, id: id, Method: method, Channel: channels.ChannelOf(method), Name: d.name,
		Namespace: d.namespace, Payload: p, json: b,
	}, nil
}

// The events the server publishes, one constructor per kind.

func lifecycleEvent(ns channels.Namespace, data protocol.LifecycleData) eventData {
	return eventData{namespace: ns, data: data, payload: func(h header) protocol.ServerEventVariant {
		return &protocol.ServerEventLifecycle{Params: protocol.EventLifecycleParams{Namespace: h.ns, Timestamp: h.ts, Data: data}}
	}}
}

func messagesEvent(node string, data protocol.MessagesDataVariant) eventData {
	return eventData{node: node, data: protocol.MessagesData{Value: data}, payload: func(h header) protocol.ServerEventVariant {
		return &protocol.ServerEventMessages{Params: protocol.EventMessagesParams{Namespace: h.ns, Timestamp: h.ts, Node: h.node, Data: protocol.MessagesData{Value: data}}}
	}}
}

func toolsEvent(node string, data protocol.ToolsDataVariant) eventData {
	return eventData{node: node, data: protocol.ToolsData{Value: data}, payload: func(h header) protocol.ServerEventVariant {
		return &protocol.ServerEventTools{Params: protocol.EventToolsParams{Namespace: h.ns, Timestamp: h.ts, Node: h.node, Data: protocol.ToolsData{Value: data}}}
	}}
}

func inputRequestedEvent(ns channels.Namespace, data protocol.InputRequestedData) eventData {
	return eventData{namespace: ns, data: data, payload: func(h header) protocol.ServerEventVariant {
		return &protocol.ServerEventInputRequested{Params: protocol.EventInputRequestedParams{Namespace: h.ns, Timestamp: h.ts, Data: data}}
	}}
}

func inputAnsweredEvent(data protocol.InputAnsweredData) eventData {
	return eventData{data: data, payload: func(h header) protocol.ServerEventVariant {
		return &protocol.ServerEventInputAnswered{Params: protocol.EventInputAnsweredParams{Namespace: h.ns, Timestamp: h.ts, Data: data}}
	}}
}

func valuesEvent(data any) eventData {
	return eventData{data: data, payload: func(h header) protocol.ServerEventVariant {
		return &protocol.ServerEventValues{Params: protocol.EventValuesParams{Namespace: h.ns, Timestamp: h.ts, Data: data}}
	}}
}

func updatesEvent(data protocol.UpdatesData) eventData {
	return eventData{data: data, payload: func(h header) protocol.ServerEventVariant {
		return &protocol.ServerEventUpdates{Params: protocol.EventUpdatesParams{Namespace: h.ns, Timestamp: h.ts, Data: data}}
	}}
}

func checkpointsEvent(data protocol.Checkpoint) eventData {
	return eventData{data: data, payload: func(h header) protocol.ServerEventVariant {
		return &protocol.ServerEventCheckpoints{Params: protocol.EventCheckpointsParams{Namespace: h.ns, Timestamp: h.ts, Data: data}}
	}}
}

func customEvent(name string, data protocol.CustomData) eventData {
	return eventData{name: name, data: data, payload: func(h header) protocol.ServerEventVariant {
		return &protocol.ServerEventCustom{Params: protocol.EventCustomParams{Namespace: h.ns, Timestamp: h.ts, Data: data}}
	}}
}

func tasksEvent(data any) eventData {
	return eventData{data: data, payload: func(h header) protocol.ServerEventVariant {
		return &protocol.ServerEventTasks{Params: protocol.EventTasksParams{Namespace: h.ns, Timestamp: h.ts, Data: data}}
	}}
}

// eventsMissedEvent is agentstream's notice to one subscriber that events
// it asked for are no longer buffered (an extension).
func eventsMissedEvent(data protocol.EventsMissedData) eventData {
	return eventData{data: data, payload: func(h header) protocol.ServerEventVariant {
		return &protocol.ServerEventEventsMissed{Params: protocol.ServerEventEventsMissedParams{Namespace: h.ns, Timestamp: h.ts, Data: data}}
	}}
}

// typed is the event's typed payload, decoded from its JSON when it has
// none.
func (e *Event) typed() (protocol.ServerEventVariant, error) {
	if e.Payload != nil {
		return e.Payload, nil
	}
	var se protocol.ServerEvent
	if err := se.UnmarshalJSON(e.json); err != nil {
		return nil, fmt.Errorf("server: decoding an event: %w", err)
	}
	return se.Value, nil
}

// WithPayload returns e when it has its typed payload, or else a copy of
// it that has it, decoded from its JSON (see Payload). The in-process
// transport hands events out through it.
func (e *Event) WithPayload() (*Event, error) {
	if e.Payload != nil {
		return e, nil
	}
	p, err := e.typed()
	if err != nil {
		return nil, err
	}
	return &Event{Seq: e.Seq, Method: e.Method, Channel: e.Channel, Name: e.Name, Namespace: e.Namespace, Payload: p, id: e.id, json: e.json}, nil
}

// DecodeEvent rebuilds an Event from the JSON the server published (its
// JSON method), for an EventLog that keeps events outside the process (a
// Redis stream) and reads them back: the same bytes, the same event id,
// sequence number and routing fields. Its typed payload is decoded for
// lifecycle events only (see Payload). The event keeps b, and its strings
// may share b's memory: b must not be modified afterwards.
func DecodeEvent(b []byte) (*Event, error) {
	e := &Event{}
	if err := e.decode(b); err != nil {
		return nil, err
	}
	return e, nil
}

// decode fills e, a zero Event, from b (see DecodeEvent).
func (e *Event) decode(b []byte) error {
	r, ok := decodeRouting(b)
	if !ok {
		var err error
		if r, err = decodeRoutingJSON(b); err != nil {
			return err
		}
	}
	if r.method == "" || !r.hasSeq {
		return fmt.Errorf("server: a stored event needs a method, an event_id and a seq")
	}
	e.Seq, e.id, e.Method, e.Channel, e.json = r.seq, r.id, r.method, channels.ChannelOf(r.method), b
	if len(r.namespace) > 0 {
		e.Namespace = channels.Namespace(r.namespace)
	}
	if e.Channel == channels.Lifecycle {
		p, err := e.typed()
		if err != nil {
			return err
		}
		e.Payload = p
	}
	if e.Channel == channels.Custom && r.hasName {
		e.Name = r.name
	}
	return nil
}

// decodeRoutingJSON is decodeRouting for any JSON, with encoding/json.
func decodeRoutingJSON(b []byte) (routing, error) {
	var probe struct {
		Method  string  `json:"method"`
		EventID *string `json:"event_id"`
		Seq     *uint64 `json:"seq"`
		Params  struct {
			Namespace []string `json:"namespace"`
			Data      struct {
				Name *string `json:"name"`
			} `json:"data"`
		} `json:"params"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return routing{}, fmt.Errorf("server: decoding a stored event: %w", err)
	}
	r := routing{method: probe.Method, namespace: probe.Params.Namespace}
	if probe.Params.Data.Name != nil {
		r.name, r.hasName = *probe.Params.Data.Name, true
	}
	if probe.Seq != nil && probe.EventID != nil {
		r.seq, r.id, r.hasSeq = *probe.Seq, *probe.EventID, true
	}
	return r, nil
}

// Epoch is the epoch part of the event's id ("" for a notice).
func (e *Event) Epoch() string {
	c, err := ParseCursor(e.id)
	if err != nil {
		return ""
	}
	return c.Epoch
}

// EndsRun reports whether e ends a run: the root agent's lifecycle,
// completed or failed.
func (e *Event) EndsRun() bool {
	if e.Channel != channels.Lifecycle || len(e.Namespace) != 0 {
		return false
	}
	l, ok := e.Payload.(*protocol.ServerEventLifecycle)
	return ok && (l.Params.Data.Event == protocol.AgentStatusCompleted || l.Params.Data.Event == protocol.AgentStatusFailed)
}

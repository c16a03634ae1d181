package server

import (
	"encoding/json"
	"strconv"
	"sync"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/fxamacker/cbor/v2"
)

// The event methods agentstream publishes.
const (
	MethodLifecycle      = "lifecycle"
	MethodMessages       = "messages"
	MethodTools          = "tools"
	MethodInputRequested = "input.requested"
	MethodInputAnswered  = "input.answered"
	MethodValues         = "values"
	MethodUpdates        = "updates"
	MethodCheckpoints    = "checkpoints"
	MethodCustom         = "custom"
	MethodTasks          = "tasks"
	// MethodEventsMissed is agentstream's notice to one subscriber that
	// events it asked for are no longer buffered (an extension).
	MethodEventsMissed = "events.missed"
)

// Event is one event of a thread's stream. It is immutable once published:
// the same Event is handed to every subscriber, typed for in-process
// readers and encoded once per wire encoding for the others.
type Event struct {
	// Seq is the thread's sequence number of the event (its event_id in
	// decimal); 0 for per-subscriber notices that are not in the stream.
	Seq uint64
	// Method is the event's method (its channel, or input.requested ...).
	Method string
	// Channel is the channel subscriptions select it by.
	Channel string
	// Name is the name of a custom event ("" otherwise).
	Name string
	// Namespace is where in the agent tree it happened.
	Namespace channels.Namespace
	// Payload is the event as the protocol types describe it.
	Payload protocol.ServerEventVariant

	json     []byte
	cborOnce sync.Once
	cbor     []byte
	cborErr  error
}

// Sequence returns Seq (for the replay buffer).
func (e *Event) Sequence() uint64 { return e.Seq }

// Size is the event's encoded JSON size, which buffer and queue caps count.
func (e *Event) Size() int { return len(e.json) }

// JSON is the event encoded as JSON, computed once when it was published.
func (e *Event) JSON() []byte { return e.json }

// CBOR is the event encoded as CBOR, computed once on first use.
func (e *Event) CBOR() ([]byte, error) {
	e.cborOnce.Do(func() {
		e.cbor, e.cborErr = cbor.Marshal(protocol.ServerEvent{Value: e.Payload})
	})
	return e.cbor, e.cborErr
}

// EventID is the event's id on the wire (the decimal Seq), "" for notices.
func (e *Event) EventID() string {
	if e.Seq == 0 {
		return ""
	}
	return strconv.FormatUint(e.Seq, 10)
}

// eventData is what an emitter hands the thread to publish: everything of
// an event but its sequence number, which publishing assigns.
type eventData struct {
	method    string
	namespace channels.Namespace
	node      string
	name      string // custom events
	data      any    // the typed data of the method
}

// buildEvent makes the Event for d with sequence number seq (0 for a
// notice) at time ts (milliseconds) and encodes it.
func buildEvent(d eventData, seq uint64, ts uint64) (*Event, error) {
	ns := protocol.Namespace(d.namespace)
	if ns == nil {
		ns = protocol.Namespace{}
	}
	var node *string
	if d.node != "" {
		node = &d.node
	}
	var eventID *string
	var seqp *protocol.JsUint
	if seq > 0 {
		id := strconv.FormatUint(seq, 10)
		eventID, seqp = &id, &seq
	}
	var p protocol.ServerEventVariant
	switch d.method {
	case MethodLifecycle:
		p = &protocol.ServerEventLifecycle{EventID: eventID, Seq: seqp, Params: protocol.EventLifecycleParams{
			Namespace: ns, Timestamp: ts, Data: d.data.(protocol.LifecycleData)}}
	case MethodMessages:
		p = &protocol.ServerEventMessages{EventID: eventID, Seq: seqp, Params: protocol.EventMessagesParams{
			Namespace: ns, Timestamp: ts, Node: node, Data: protocol.MessagesData{Value: d.data.(protocol.MessagesDataVariant)}}}
	case MethodTools:
		p = &protocol.ServerEventTools{EventID: eventID, Seq: seqp, Params: protocol.EventToolsParams{
			Namespace: ns, Timestamp: ts, Node: node, Data: protocol.ToolsData{Value: d.data.(protocol.ToolsDataVariant)}}}
	case MethodInputRequested:
		p = &protocol.ServerEventInputRequested{EventID: eventID, Seq: seqp, Params: protocol.EventInputRequestedParams{
			Namespace: ns, Timestamp: ts, Data: d.data.(protocol.InputRequestedData)}}
	case MethodInputAnswered:
		p = &protocol.ServerEventInputAnswered{EventID: eventID, Seq: seqp, Params: protocol.EventInputAnsweredParams{
			Namespace: ns, Timestamp: ts, Data: d.data.(protocol.InputAnsweredData)}}
	case MethodValues:
		p = &protocol.ServerEventValues{EventID: eventID, Seq: seqp, Params: protocol.EventValuesParams{
			Namespace: ns, Timestamp: ts, Data: d.data}}
	case MethodUpdates:
		p = &protocol.ServerEventUpdates{EventID: eventID, Seq: seqp, Params: protocol.EventUpdatesParams{
			Namespace: ns, Timestamp: ts, Data: d.data.(protocol.UpdatesData)}}
	case MethodCheckpoints:
		p = &protocol.ServerEventCheckpoints{EventID: eventID, Seq: seqp, Params: protocol.EventCheckpointsParams{
			Namespace: ns, Timestamp: ts, Data: d.data.(protocol.Checkpoint)}}
	case MethodCustom:
		p = &protocol.ServerEventCustom{EventID: eventID, Seq: seqp, Params: protocol.EventCustomParams{
			Namespace: ns, Timestamp: ts, Data: d.data.(protocol.CustomData)}}
	case MethodTasks:
		p = &protocol.ServerEventTasks{EventID: eventID, Seq: seqp, Params: protocol.EventTasksParams{
			Namespace: ns, Timestamp: ts, Data: d.data}}
	case MethodEventsMissed:
		p = &protocol.ServerEventEventsMissed{EventID: eventID, Seq: seqp, Params: protocol.ServerEventEventsMissedParams{
			Namespace: ns, Timestamp: ts, Data: d.data.(protocol.EventsMissedData)}}
	default:
		panic("server: unknown event method " + d.method) // a bug in the server, not client input
	}
	b, err := json.Marshal(protocol.ServerEvent{Value: p})
	if err != nil {
		return nil, err
	}
	return &Event{
		Seq: seq, Method: d.method, Channel: channels.ChannelOf(d.method), Name: d.name,
		Namespace: d.namespace, Payload: p, json: b,
	}, nil
}

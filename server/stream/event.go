package stream

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

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
	// Source names what a producer's event was ingested from (a Redis
	// Streams entry id: ProducerBatch.Sources); empty for the rest. A
	// durable log keeps it with the event, so that an entry taken up again
	// after a crash is known to be appended already.
	Source string

	id   string // the event_id, "EPOCH-SEQ"
	json []byte
	born time.Duration            // when this process made it, on liveClock's clock; 0: made elsewhere
	cbor atomic.Pointer[cborForm] // made on first use
	// views: what other wires made of the event (View), made on first use.
	views atomic.Pointer[viewForm]
}

// viewForm is one wire's view of an event (View): a short list, one entry
// per wire that read the event.
type viewForm struct {
	key  any
	v    any
	next *viewForm
}

// Viewed returns the view made under key, if one was.
func (e *Event) Viewed(key any) (any, bool) {
	for f := e.views.Load(); f != nil; f = f.next {
		if f.key == key {
			return f.v, true
		}
	}
	return nil, false
}

// View returns what a wire made of the event (its frame, say) under key,
// making it with make the first time any reader asks: the readers of one
// event share one view instead of each translating it. Two first readers
// may both call make; one value is kept for all. A wire that uses it
// must make the same value whichever of its readers asks first.
func (e *Event) View(key any, make func() any) any {
	head := e.views.Load()
	for f := head; f != nil; f = f.next {
		if f.key == key {
			return f.v
		}
	}
	nf := &viewForm{key: key, v: make()}
	for {
		nf.next = head
		if e.views.CompareAndSwap(head, nf) {
			return nf.v
		}
		head = e.views.Load()
		for f := head; f != nil; f = f.next {
			if f.key == key {
				return f.v // another reader made it first
			}
		}
	}
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

// Data is what Build makes an Event of: the typed event (a generated
// constructor's, protocol.NewServerEventX) without its envelope, and what
// routes it. Build completes Payload, which the Event keeps: a Data is
// built once.
type Data struct {
	Payload   protocol.ServerEventVariant
	Namespace channels.Namespace // where it happened
	Name      string             // a custom event's name, which routes it
	Source    string             // what a producer's event was ingested from (Event.Source)
}

// rootNamespace is the namespace of the root agent's events, shared by
// all of them (never appended to).
var rootNamespace = protocol.Namespace{}

// Build completes d's event with sequence number seq of the stream epoch
// (seq 0 for a notice) and time ts (milliseconds), and encodes it.
func Build(d Data, epoch string, seq uint64, ts uint64) (*Event, error) {
	p := d.Payload
	ns := protocol.Namespace(d.Namespace)
	if ns == nil {
		ns = rootNamespace
	}
	p.SetNamespace(ns)
	p.SetTimestamp(ts)
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
	b, err := encodeEvent(p)
	if err != nil {
		return nil, err
	}
	method := p.Method()
	return &Event{
		Seq: seq, id: id, Method: method, Channel: channels.ChannelOf(method), Name: d.Name,
		Namespace: d.Namespace, Payload: p, json: b, Source: d.Source, born: time.Since(liveClock),
	}, nil
}

// liveClock is the base of the monotonic clock events are stamped with
// when they are made (Event.Age).
var liveClock = time.Now()

// Age is how long ago this process made the event, and false for an
// event it did not make (read back from a replay buffer or a durable log,
// or received from another node): the time a live event has spent on its
// way to a subscriber, for the transports' delivery-latency metrics.
func (e *Event) Age() (time.Duration, bool) {
	if e.born == 0 {
		return 0, false
	}
	return time.Since(liveClock) - e.born, true
}

// scratch holds the buffers events are encoded in before they are copied
// into one of exactly their size.
var scratch = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// encodeEvent writes p as JSON with its generated AppendJSON, into a
// pooled buffer copied into one allocation of its exact size.
func encodeEvent(p protocol.ServerEventVariant) ([]byte, error) {
	sp := scratch.Get().(*[]byte)
	b, err := p.AppendJSON((*sp)[:0])
	if err != nil {
		scratch.Put(sp)
		return nil, err
	}
	out := append(make([]byte, 0, len(b)), b...)
	if cap(b) <= 64<<10 {
		*sp = b[:0]
		scratch.Put(sp)
	}
	return out, nil
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
	return &Event{Seq: e.Seq, Method: e.Method, Channel: e.Channel, Name: e.Name, Namespace: e.Namespace, Payload: p, id: e.id, json: e.json, born: e.born}, nil
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

// decode fills e, a zero Event, from b (see DecodeEvent) with the
// generated routing decoder, which reads what AppendJSON wrote without
// allocating but for the namespace.
func (e *Event) decode(b []byte) error {
	var r protocol.ServerEventRouting
	if err := protocol.DecodeServerEventRouting(b, &r); err != nil {
		return fmt.Errorf("server: decoding a stored event: %w", err)
	}
	if r.Method == "" || !r.HasSeq || !r.HasEventID {
		return fmt.Errorf("server: a stored event needs a method, an event_id and a seq")
	}
	e.Seq, e.id, e.Method, e.Channel, e.json = r.Seq, r.EventID, r.Method, channels.ChannelOf(r.Method), b
	if len(r.ParamsNamespace) > 0 {
		e.Namespace = channels.Namespace(r.ParamsNamespace)
	}
	if e.Channel == channels.Lifecycle {
		p, err := e.typed()
		if err != nil {
			return err
		}
		e.Payload = p
	}
	if e.Channel == channels.Custom && r.HasParamsDataName {
		e.Name = r.ParamsDataName
	}
	return nil
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
	s := e.rootStatus()
	return s == protocol.AgentStatusCompleted || s == protocol.AgentStatusFailed
}

// WaitsOnInterrupts reports whether e is the root agent's lifecycle
// saying the run waits on its interrupts.
func (e *Event) WaitsOnInterrupts() bool { return e.rootStatus() == protocol.AgentStatusInterrupted }

// rootStatus is the root agent's lifecycle status e says ("" for any
// other event).
func (e *Event) rootStatus() protocol.AgentStatus {
	if e.Channel != channels.Lifecycle || len(e.Namespace) != 0 {
		return ""
	}
	if l, ok := e.Payload.(*protocol.ServerEventLifecycle); ok {
		return l.Params.Data.Event
	}
	return ""
}

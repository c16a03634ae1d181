package server

import (
	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server/stream"
)

// eventData is what an emitter hands the thread to publish: the typed
// event (a generated constructor's, protocol.NewServerEventX) without
// its envelope (namespace, time, sequence number, event id), which
// publishing sets. Publishing completes p, which the published Event
// keeps: an eventData is published once.
type eventData struct {
	p         protocol.ServerEventVariant
	namespace channels.Namespace // where it happened; nil: the emitter's
	name      string             // a custom event's name, which routes it
	ts        uint64             // the time a producer gave it (ms); 0: now
	source    string             // what a producer's event was ingested from (Event.Source)
	by        *ProducedBy        // the producer's batch it is of (Publish); nil for the rest
}

// buildEvent completes d's event with sequence number seq of the stream
// epoch (seq 0 for a notice) and time ts (milliseconds), and encodes it
// (stream.Build).
func buildEvent(d eventData, epoch string, seq uint64, ts uint64) (*Event, error) {
	return stream.Build(stream.Data{Payload: d.p, Namespace: d.namespace, Name: d.name, Source: d.source}, epoch, seq, ts)
}

// lifecycleEvent is the lifecycle event of namespace ns.
func lifecycleEvent(ns channels.Namespace, data protocol.LifecycleData) eventData {
	return eventData{p: protocol.NewServerEventLifecycle(data), namespace: ns}
}

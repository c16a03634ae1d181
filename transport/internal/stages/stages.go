// Package stages owns the sampling of live events on their way out of a
// connection: how long after its publication on this node an event was
// taken by its connection's writer (queued: the hand-off from the
// publisher, the writer's wake-up, the pacing window) and how long after
// it the write that carried it returned (written: the encoding and the
// socket). The transports report both to a histogram, so that where the
// delivery latency goes can be read from /metrics on a live server, and
// `agentstream load` prints the breakdown of a run.
package stages

import (
	"time"

	"github.com/agentstream/agentstream/server"
)

// The stages a sample reports.
const (
	Queued  = "queued"
	Written = "written"
)

// Every is the sampling rate: one event in Every (by sequence number) is
// timed, so the clock reads cost nothing noticeable per delivery.
const Every = 16

// maxPerWrite bounds the samples kept for one write: a batch of many
// events is sampled by its first few.
const maxPerWrite = 4

// Batch times the sampled events of one write. The zero value with
// Observe nil samples nothing; a Batch is used by one writer at a time.
type Batch struct {
	// Observe receives each sample (from the writer's goroutine).
	Observe func(stage string, d time.Duration)
	taken   [maxPerWrite]*server.Event
	n       int
}

// Taken is called as the writer takes e from its queue: a sampled live
// event reports its queued time and is kept for Written.
func (b *Batch) Taken(e *server.Event) {
	if b.Observe == nil || e.Seq%Every != 0 || b.n == maxPerWrite {
		return
	}
	age, ok := e.Age()
	if !ok {
		return // replayed, or made on another node
	}
	b.Observe(Queued, age)
	b.taken[b.n] = e
	b.n++
}

// Written is called once the write that carried the events taken since
// the last call has returned (successfully): each reports its written
// time.
func (b *Batch) Written() {
	for i := range b.n {
		if age, ok := b.taken[i].Age(); ok {
			b.Observe(Written, age)
		}
		b.taken[i] = nil
	}
	b.n = 0
}

// Reset forgets the events taken (a write that failed).
func (b *Batch) Reset() {
	for i := range b.n {
		b.taken[i] = nil
	}
	b.n = 0
}

package redisstore

import (
	"fmt"
	"testing"

	"github.com/agentstream/agentstream/server"
	"github.com/stretchr/testify/require"
)

// TestSegmentsOf: a batch is regrouped so that each thread's events are
// together, threads in the order of their first event and each thread's
// events in their order; a segment is a thread's run of events with one
// src, and a producer's event is a segment of its own.
func TestSegmentsOf(t *testing.T) {
	ev := func(seq uint64, src string) *server.Event { return &server.Event{Seq: seq, Source: src} }
	by := &server.ProducedBy{Producer: "p"}
	batch := []entry{
		{thread: "a", e: ev(1, "")},
		{thread: "b", e: ev(1, "")},
		{thread: "a", e: ev(2, "")},
		{thread: "c", e: ev(1, "")},
		{thread: "b", e: ev(2, "")},
		{thread: "a", e: ev(3, "x")},
		{thread: "c", e: ev(2, ""), by: by},
		{thread: "c", e: ev(3, ""), by: by},
		{thread: "a", e: ev(4, "x")},
	}
	segs := segmentsOf(batch)
	var got []string
	for _, sg := range segs {
		s := batch[sg.from].thread + ":"
		for _, en := range batch[sg.from:sg.to] {
			require.Equal(t, batch[sg.from].thread, en.thread)
			s += fmt.Sprint(en.e.Seq)
		}
		got = append(got, s)
	}
	require.Equal(t, []string{"a:12", "a:34", "b:12", "c:1", "c:2", "c:3"}, got)
}

// BenchmarkSegmentsOf: a saturated writer's batch, 512 events of 400
// threads, regrouped by thread and cut into segments.
//
//	go test ./redisstore -run '^$' -bench SegmentsOf
func BenchmarkSegmentsOf(b *testing.B) {
	events := make([]*server.Event, 512)
	orig := make([]entry, 512)
	for i := range orig {
		events[i] = &server.Event{Seq: uint64(i)}
		orig[i] = entry{thread: fmt.Sprintf("thread-%d", i%400), e: events[i]}
	}
	batch := make([]entry, len(orig))
	b.ReportAllocs()
	for b.Loop() {
		copy(batch, orig)
		segmentsOf(batch)
	}
}

package stream

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/stretchr/testify/require"
)

func TestMemoryLogTotalBudgetDropsTheColdestFirst(t *testing.T) {
	ev := func(seq uint64) *Event {
		e, err := Build(customEvent("x", protocol.CustomData{Payload: "p"}), "e", seq, 0)
		require.NoError(t, err)
		return e
	}
	one := int64(ev(101).Size() + EventOverhead) // what one event counts (3-digit seqs all)
	l := NewMemoryLog(1000, 1<<20)
	l.SetTotalBytes(25 * one)
	for seq := uint64(101); seq <= 110; seq++ {
		l.Append(context.Background(), "a", ev(seq))
	}
	for seq := uint64(101); seq <= 110; seq++ {
		l.Append(context.Background(), "b", ev(seq))
	}
	require.Equal(t, 20*one, l.Used())
	for seq := uint64(111); seq <= 112; seq++ {
		l.Append(context.Background(), "a", ev(seq)) // a is the hot one again
	}
	for seq := uint64(101); seq <= 105; seq++ {
		l.Append(context.Background(), "c", ev(seq))
	}
	// 12 + 10 + 5 passed 25: b, the least recently active, went whole.
	require.Equal(t, 0, l.Len(context.Background(), "b"))
	require.Equal(t, uint64(0), oldestOf(l, "b"))
	require.Equal(t, 12, l.Len(context.Background(), "a"))
	require.Equal(t, 5, l.Len(context.Background(), "c"))
	require.Equal(t, uint64(10), l.Trimmed())
	require.Equal(t, 17*one, l.Used())

	// A thread alone over the budget loses its oldest events.
	for seq := uint64(106); seq <= 140; seq++ {
		l.Append(context.Background(), "c", ev(seq))
	}
	require.Equal(t, 0, l.Len(context.Background(), "a"))
	require.Equal(t, 25, l.Len(context.Background(), "c"))
	require.Equal(t, uint64(116), oldestOf(l, "c"))
	require.LessOrEqual(t, l.Used(), 25*one)

	l.Release(context.Background(), "c")
	require.Zero(t, l.Used())
	require.Zero(t, l.Len(context.Background(), "c"))
}

// TestBufferedEventCost measures what a buffered event keeps on the heap
// (a 100-byte custom payload, as the firehose publishes) and checks that
// EventOverhead covers it beyond the JSON, so that the total budget counts
// what the buffers really hold, and that the buffer keeps no more than its
// JSON and slot (the event's typed payload and struct are left to the
// collector once delivered).
func TestBufferedEventCost(t *testing.T) {
	const n = 20000
	pad := strings.Repeat("x", 60)
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	l := NewMemoryLog(n, 1<<30)
	var jsonBytes int
	before := heap()
	for i := 1; i <= n; i++ {
		e, err := Build(customEvent("firehose", protocol.CustomData{Payload: map[string]any{"i": i, "pad": pad}}), "0123456789abcdef", uint64(i), 1763950000000)
		require.NoError(t, err)
		jsonBytes += e.Size()
		l.Append(context.Background(), "t", e)
	}
	after := heap()
	runtime.KeepAlive(l)
	perEvent := float64(after-before) / n
	jsonPer := float64(jsonBytes) / n
	t.Logf("%.0f bytes of JSON, %.0f bytes on the heap per buffered event", jsonPer, perEvent)
	require.Greater(t, perEvent, jsonPer, "the JSON itself is held")
	require.LessOrEqual(t, perEvent, jsonPer+EventOverhead, "EventOverhead covers what a buffered event holds beyond its JSON")
	require.Equal(t, int64(jsonBytes)+n*EventOverhead, l.Used())
}

// TestMemoryLogReplaysWhatWasAppended: the log keeps JSON only, and the
// events it replays carry the same bytes, id, sequence number and routing
// fields as the ones appended; lifecycle events their typed payload too.
func TestMemoryLogReplaysWhatWasAppended(t *testing.T) {
	name := "tok\"en" // as RunContext.Custom builds it
	in := []Data{
		customEvent(name, protocol.CustomData{Name: &name, Payload: map[string]any{"text": "é\n\u2028"}}),
		lifecycleEvent(channels.Namespace{"agent:1"}, protocol.LifecycleData{Event: protocol.AgentStatusRunning}),
		valuesEvent(map[string]any{"n": 1}),
	}
	sub := customEvent(name, protocol.CustomData{Name: &name, Payload: map[string]any{"text": "é\n\u2028"}}) // a Data is built once
	sub.Namespace = channels.Namespace{"parent:2", "child:3"}
	in = append(in, sub)
	l := NewMemoryLog(100, 1<<20)
	var appended []*Event
	for i, d := range in {
		e, err := Build(d, "epoch", uint64(i+1), 1763950000000)
		require.NoError(t, err)
		l.Append(context.Background(), "t", e)
		appended = append(appended, e)
	}
	var replayed []*Event
	l.After(context.Background(), "t", 0, func(e *Event) bool { replayed = append(replayed, e); return true })
	require.Len(t, replayed, len(appended))
	for i, want := range appended {
		got := replayed[i]
		require.Equal(t, string(want.JSON()), string(got.JSON()))
		require.Equal(t, want.id, got.id)
		require.Equal(t, want.Seq, got.Seq)
		require.Equal(t, want.Method, got.Method)
		require.Equal(t, want.Channel, got.Channel)
		require.Equal(t, want.Name, got.Name)
		require.Equal(t, want.Namespace, got.Namespace)
		if want.Channel == channels.Lifecycle {
			require.Equal(t, want.Payload, got.Payload)
		} else {
			require.Nil(t, got.Payload, "the log keeps JSON only")
			full, err := got.WithPayload()
			require.NoError(t, err)
			wantJSON, err := json.Marshal(want.Payload)
			require.NoError(t, err)
			gotJSON, err := json.Marshal(full.Payload)
			require.NoError(t, err)
			require.JSONEq(t, string(wantJSON), string(gotJSON), "the typed payload decoded back (numbers as float64)")
		}
	}
	require.Zero(t, l.Undecodable())
	var after2 []uint64
	l.After(context.Background(), "t", 2, func(e *Event) bool { after2 = append(after2, e.Seq); return true })
	require.Equal(t, []uint64{3, 4}, after2)
}

// TestMemoryLogLowerBudgetDropsAtOnce: lowering the total budget drops
// the coldest threads' buffers at once, without waiting for an append,
// but never the hottest thread's.
func TestMemoryLogLowerBudgetDropsAtOnce(t *testing.T) {
	l := NewMemoryLog(1000, 1<<20)
	for _, th := range []string{"a", "b", "c"} { // c is the hottest
		for seq := uint64(1); seq <= 10; seq++ {
			e, err := Build(customEvent("x", protocol.CustomData{Payload: "p"}), "e", seq, 0)
			require.NoError(t, err)
			l.Append(context.Background(), th, e)
		}
	}
	per := l.Used() / 3
	l.SetTotalBytes(2 * per)
	require.Equal(t, int64(2*per), l.TotalBytes())
	require.Zero(t, l.Len(context.Background(), "a"), "the coldest went")
	require.Equal(t, 10, l.Len(context.Background(), "b"))
	require.Equal(t, 10, l.Len(context.Background(), "c"))
	require.Equal(t, uint64(10), l.Trimmed())
	l.SetTotalBytes(1)
	require.Zero(t, l.Len(context.Background(), "b"))
	require.Equal(t, 10, l.Len(context.Background(), "c"), "the hottest waits for its next append")
	require.Equal(t, per, l.Used())
}

// oldestOf is a MemoryLog's oldest sequence number (it never fails).
func oldestOf(l *MemoryLog, thread string) uint64 {
	n, _ := l.Oldest(context.Background(), thread)
	return n
}

// TestAfterHeldSaysWhatTheBufferLetGo: a log that keeps older events in
// a store of its own reads the buffer with AfterHeld, which stops and
// says so when appends made the buffer let go of the next event while it
// was read (so that the log reads it from its store), and otherwise
// passes on every event, a hole inside the buffer included.
func TestAfterHeldSaysWhatTheBufferLetGo(t *testing.T) {
	ev := func(seq uint64) *Event {
		e, err := Build(customEvent("x", protocol.CustomData{Payload: "p"}), "e", seq, 0)
		require.NoError(t, err)
		return e
	}
	ctx := context.Background()
	l := NewMemoryLog(2*replaySlab, 1<<20)
	for seq := uint64(1); seq <= 2*replaySlab; seq++ {
		require.NoError(t, l.Append(ctx, "t", ev(seq)))
	}
	var got []uint64
	trimmed, err := l.AfterHeld(ctx, "t", 0, func(e *Event) bool {
		got = append(got, e.Seq)
		if e.Seq == replaySlab { // the end of the first part read: the buffer moves on by a whole buffer
			for seq := uint64(2*replaySlab + 1); seq <= 4*replaySlab; seq++ {
				require.NoError(t, l.Append(ctx, "t", ev(seq)))
			}
		}
		return true
	})
	require.NoError(t, err)
	require.True(t, trimmed, "the events after %d went while the buffer was read", replaySlab)
	require.Len(t, got, replaySlab)
	require.Equal(t, uint64(replaySlab), got[len(got)-1])

	got = nil
	trimmed, err = l.AfterHeld(ctx, "t", 2*replaySlab, func(e *Event) bool { got = append(got, e.Seq); return true })
	require.NoError(t, err)
	require.False(t, trimmed)
	require.Len(t, got, 2*replaySlab, "everything the buffer holds after the cursor")

	holes := NewMemoryLog(100, 1<<20)
	for _, seq := range []uint64{1, 2, 5, 6} {
		require.NoError(t, holes.Append(ctx, "t", ev(seq)))
	}
	got = nil
	trimmed, err = holes.AfterHeld(ctx, "t", 0, func(e *Event) bool { got = append(got, e.Seq); return true })
	require.NoError(t, err)
	require.False(t, trimmed, "a hole the buffer had is the caller's to announce")
	require.Equal(t, []uint64{1, 2, 5, 6}, got)
}

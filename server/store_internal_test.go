package server

import (
	"testing"

	"github.com/agentstream/agentstream/protocol"
	"github.com/stretchr/testify/require"
)

func TestMemoryLogTotalBudgetDropsTheColdestFirst(t *testing.T) {
	ev := func(seq uint64) *Event {
		e, err := buildEvent(customEvent("x", protocol.CustomData{Payload: "p"}), "e", seq, 0)
		require.NoError(t, err)
		return e
	}
	one := int64(ev(101).Size() + EventOverhead) // what one event counts (3-digit seqs all)
	l := NewMemoryLog(1000, 1<<20)
	l.SetTotalBytes(25 * one)
	for seq := uint64(101); seq <= 110; seq++ {
		l.Append("a", ev(seq))
	}
	for seq := uint64(101); seq <= 110; seq++ {
		l.Append("b", ev(seq))
	}
	require.Equal(t, 20*one, l.Used())
	for seq := uint64(111); seq <= 112; seq++ {
		l.Append("a", ev(seq)) // a is the hot one again
	}
	for seq := uint64(101); seq <= 105; seq++ {
		l.Append("c", ev(seq))
	}
	// 12 + 10 + 5 passed 25: b, the least recently active, went whole.
	require.Equal(t, 0, l.Len("b"))
	require.Equal(t, uint64(0), l.Oldest("b"))
	require.Equal(t, 12, l.Len("a"))
	require.Equal(t, 5, l.Len("c"))
	require.Equal(t, uint64(10), l.Trimmed())
	require.Equal(t, 17*one, l.Used())

	// A thread alone over the budget loses its oldest events.
	for seq := uint64(106); seq <= 140; seq++ {
		l.Append("c", ev(seq))
	}
	require.Equal(t, 0, l.Len("a"))
	require.Equal(t, 25, l.Len("c"))
	require.Equal(t, uint64(116), l.Oldest("c"))
	require.LessOrEqual(t, l.Used(), 25*one)

	l.Release("c")
	require.Zero(t, l.Used())
	require.Zero(t, l.Len("c"))
}

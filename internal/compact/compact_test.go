package compact

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

func heap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func TestShrinkGivesMemoryBack(t *testing.T) {
	var tr Tracker
	m := map[int][64]byte{}
	before := heap()
	for i := range 100_000 {
		m[i] = [64]byte{}
		tr.Grew(len(m))
	}
	full := heap()
	for i := range 100_000 {
		if i%1000 != 0 {
			delete(m, i)
		}
		m = Shrink(m, &tr)
	}
	require.Len(t, m, 100)
	for i := 0; i < 100_000; i += 1000 {
		require.Contains(t, m, i, "what is left is kept")
	}
	after := heap()
	require.Greater(t, full-before, uint64(6<<20), "100,000 entries of 64 bytes")
	// Signed: the heap may end below where it began (other garbage freed).
	require.Less(t, int64(after)-int64(before), int64(full-before)/10, "the emptied map's space is given back")
}

func TestShrinkLeavesSmallAndFullMapsAlone(t *testing.T) {
	var tr Tracker
	m := map[int]int{}
	for i := range MinPeak - 1 {
		m[i] = i
		tr.Grew(len(m))
	}
	clear(m)
	m[1] = 1
	require.Len(t, Shrink(m, &tr), 1)
	tr.Grew(4 * MinPeak)
	big := map[int]int{}
	for i := range MinPeak + 1 {
		big[i] = i
	}
	same := Shrink(big, &tr)
	same[-1] = -1
	require.Contains(t, big, -1, "above a quarter of its peak: the same map")
}

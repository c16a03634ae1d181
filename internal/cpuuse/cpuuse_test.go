package cpuuse

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCPUGaugeReadsTheProcess: CPU the process spends between two reads
// shows in the figure, a sleep does not. (Compared as CPU time, since a
// loaded machine may give a busy loop only part of a core.)
func TestCPUGaugeReadsTheProcess(t *testing.T) {
	var g Gauge
	_, ok := g.Use()
	require.False(t, ok, "nothing to compare the first read with")
	spent := func(use float64, since time.Time) time.Duration {
		return time.Duration(use * float64(time.Since(since)) * float64(runtime.GOMAXPROCS(0)))
	}
	start := time.Now()
	begin, _ := Process()
	for now, _ := Process(); now-begin < 30*time.Millisecond && time.Since(start) < 5*time.Second; now, _ = Process() {
	}
	busy, ok := g.Use()
	require.True(t, ok)
	require.Greater(t, spent(busy, start), 20*time.Millisecond, "a busy loop's CPU is counted")
	start = time.Now()
	time.Sleep(100 * time.Millisecond)
	idle, ok := g.Use()
	require.True(t, ok)
	require.Less(t, spent(idle, start), 20*time.Millisecond, "a sleep's is not")
}

// TestShareCountsWhatItCouldHaveHad: a process that wanted its cores
// (used or waited for half of them or more) and leaves them no idle time
// is at its limit, whatever its own figure; one using little of them and
// hardly waiting is not, however busy the cores are.
func TestShareCountsWhatItCouldHaveHad(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name string
		w    Window
		want float64
	}{
		{"alone on its core, a tenth stolen by the hypervisor", Window{Used: 86 * ms, Capacity: 100 * ms, IdleKnown: true}, 1},
		{"alone with time to spare", Window{Used: 70 * ms, Capacity: 100 * ms, Idle: 30 * ms, IdleKnown: true}, 0.7},
		{"a small user of cores another process keeps busy", Window{Used: 2 * ms, Waited: 3 * ms, Capacity: 100 * ms, IdleKnown: true}, 0.02},
		{"sharing its core with a busy process: it waited as long as it ran", Window{Used: 45 * ms, Waited: 50 * ms, Capacity: 100 * ms, IdleKnown: true}, 1},
		{"the same, with time to spare", Window{Used: 45 * ms, Waited: 10 * ms, Capacity: 100 * ms, Idle: 20 * ms, IdleKnown: true}, 45.0 / 65},
		{"under a quota: idle cores it may not use", Window{Used: 190 * ms, Capacity: 200 * ms, Idle: 500 * ms, IdleKnown: true}, 0.95},
		{"idle time unknown", Window{Used: 86 * ms, Waited: 50 * ms, Capacity: 100 * ms}, 0.86},
	} {
		require.InDelta(t, c.want, Share(c.w), 1e-9, c.name)
	}
}

// BenchmarkGaugeUse is one read of the gauge (the pacer reads it every
// 100 ms at most, the disk store once a second).
func BenchmarkGaugeUse(b *testing.B) {
	var g Gauge
	b.ReportAllocs()
	for b.Loop() {
		g.Use()
	}
}

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

// TestCPUUseCountsWhatItCouldHaveHad: a process that is its cores' main
// user and leaves them no idle time is at its limit, whatever its own
// figure; one using little of them is not, however busy the cores are.
func TestCPUUseCountsWhatItCouldHaveHad(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name                 string
		used, capacity, idle time.Duration
		idleKnown            bool
		want                 float64
	}{
		{"alone on its core, a tenth stolen by the hypervisor", 86 * ms, 100 * ms, 0, true, 1},
		{"alone with time to spare", 70 * ms, 100 * ms, 30 * ms, true, 0.7},
		{"a small user of cores another process keeps busy", 2 * ms, 100 * ms, 0, true, 0.02},
		{"under a quota: idle cores it may not use", 190 * ms, 200 * ms, 500 * ms, true, 0.95},
		{"idle time unknown", 86 * ms, 100 * ms, 0, false, 0.86},
	} {
		require.InDelta(t, c.want, Share(c.used, c.capacity, c.idle, c.idleKnown), 1e-9, c.name)
	}
}

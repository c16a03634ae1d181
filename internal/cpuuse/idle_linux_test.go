package cpuuse

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestIdleOfTheProcessCores(t *testing.T) {
	stat := []byte(`cpu  66802 0 18493 87994 626 0 5173 1225 0 0
cpu0 43642 0 8923 32568 192 0 4296 576 0 0
cpu1 23159 0 9570 55425 433 0 877 649 0 0
cpu2 1 0 1 7 3 0 0 0 0 0
intr 1 2 3
cpu9 1 0 1 1000 1000 0 0 0 0 0
`)
	idle, ok := idleOf(stat, func(cpu int) bool { return cpu == 1 || cpu == 2 || cpu == 9 })
	require.True(t, ok)
	require.Equal(t, time.Duration(55425+433+7+3)*10*time.Millisecond, idle, "idle and iowait of cores 1 and 2; the total line and what follows the per-core lines not read")
	_, ok = idleOf(stat, func(cpu int) bool { return cpu == 5 })
	require.False(t, ok, "none of its cores listed")

	first, ok := CoresIdle()
	require.True(t, ok, "this machine's /proc/stat")
	time.Sleep(50 * time.Millisecond)
	second, ok := CoresIdle()
	require.True(t, ok)
	require.GreaterOrEqual(t, second, first, "idle time only grows")
}

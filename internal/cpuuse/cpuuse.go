// Package cpuuse owns how the process reads its own CPU use: its CPU time
// (getrusage), the idle time of the cores it may run on (/proc/stat), and
// the Gauge that turns two reads into a share of the CPU time it could
// have had. The writers' pacer and the disk store's choice of codec both
// ask it whether the process has CPU to spare.
package cpuuse

import (
	"runtime"
	"time"
)

// Gauge measures the process's CPU use between two reads, as a share of
// the CPU time it could have had: GOMAXPROCS cores, or, once it uses at
// least half of them (MainFor), its own time and what its cores left
// idle. On cores with no idle time left, a process that is their main
// user is at its limit even though its own figure is lower: the rest went
// to the kernel's work for it, to the hypervisor (steal time) or to other
// processes, and it could not have had more.
//
// The zero Gauge is ready; it is not safe for concurrent use.
type Gauge struct {
	cpu  time.Duration // user+system time at the last read
	idle time.Duration // its cores' idle time at the last read
	// whether the last read knew the idle time
	idleOK bool
	wall   time.Time
}

// MainFor is the share of GOMAXPROCS cores above which the process counts
// its cores' idle time as all it could have had more.
const MainFor = 0.5

// Use is the share since the last read, false on the first read (nothing
// to compare with), when no time has passed, or where the process's CPU
// time is unknown.
func (g *Gauge) Use() (float64, bool) {
	cpu, ok := Process()
	if !ok {
		return 0, false
	}
	idle, idleOK := CoresIdle()
	now := time.Now()
	prev := *g
	g.cpu, g.idle, g.idleOK, g.wall = cpu, idle, idleOK, now
	if prev.wall.IsZero() || !now.After(prev.wall) {
		return 0, false
	}
	return Share(cpu-prev.cpu, now.Sub(prev.wall)*time.Duration(runtime.GOMAXPROCS(0)), idle-prev.idle, idleOK && prev.idleOK), true
}

// Share is the share of capacity (GOMAXPROCS cores over the window) that
// used took, or, for a process using at least MainFor of it whose cores'
// idle time is known, of its own time and that idle time.
func Share(used, capacity, idle time.Duration, idleKnown bool) float64 {
	share := float64(used) / float64(capacity)
	if !idleKnown || share < MainFor || idle < 0 {
		return share
	}
	return float64(used) / float64(min(capacity, used+idle))
}

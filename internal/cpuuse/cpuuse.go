// Package cpuuse owns how the process reads its own CPU use: its CPU time
// (getrusage), the idle time of the cores it may run on (/proc/stat), the
// time its threads waited for a CPU (schedstat), and the Gauge that turns
// two reads into a share of the CPU time it could have had. The writers' pacer and the disk store's choice of codec both
// ask it whether the process has CPU to spare.
package cpuuse

import (
	"runtime"
	"time"
)

// Gauge measures the process's CPU use between two reads, as a share of
// the CPU time it could have had: GOMAXPROCS cores, or, once it wanted at
// least half of them (MainFor: what it used and what its threads waited
// for a CPU, runnable), its own time and what its cores left idle. On
// cores with no idle time left, a process that wanted them is at its
// limit even though its own figure is lower: the rest went to the
// kernel's work for it, to the hypervisor (steal time) or to other
// processes, and it could not have had more. A process that used little
// and hardly waited is not, however busy other processes keep its cores.
//
// The zero Gauge is ready; it is not safe for concurrent use.
type Gauge struct {
	cpu    time.Duration // user+system time at the last read
	idle   time.Duration // its cores' idle time at the last read
	waited time.Duration // its threads' time waiting for a CPU at the last read
	// whether the last read knew the idle and waiting times
	idleOK, waitedOK bool
	wall             time.Time
}

// Busy is the share of what it could have had (Gauge.Use) from which
// the process has no CPU to spare.
const Busy = 0.9

// MainFor is the share of GOMAXPROCS cores the process must have used or
// waited for before it counts its cores' idle time as all it could have
// had more.
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
	waited, waitedOK := Waited()
	now := time.Now()
	prev := *g
	g.cpu, g.idle, g.waited, g.idleOK, g.waitedOK, g.wall = cpu, idle, waited, idleOK, waitedOK, now
	if prev.wall.IsZero() || !now.After(prev.wall) {
		return 0, false
	}
	var wait time.Duration
	if waitedOK && prev.waitedOK {
		wait = max(waited-prev.waited, 0) // a thread that exited takes its figure along
	}
	return Share(Window{
		Used:      cpu - prev.cpu,
		Waited:    wait,
		Capacity:  now.Sub(prev.wall) * time.Duration(runtime.GOMAXPROCS(0)),
		Idle:      idle - prev.idle,
		IdleKnown: idleOK && prev.idleOK,
	}), true
}

// Window is what a Gauge reads between two reads.
type Window struct {
	Used     time.Duration // the process's CPU time
	Waited   time.Duration // its threads' time runnable, waiting for a CPU
	Capacity time.Duration // GOMAXPROCS cores' time
	Idle     time.Duration // what its cores left idle
	// whether Idle was read
	IdleKnown bool
}

// Share is the share of the window's capacity that the process used, or,
// for a process that used or waited for at least MainFor of it and whose
// cores' idle time is known, of its own time and that idle time.
func Share(w Window) float64 {
	share := float64(w.Used) / float64(w.Capacity)
	wanted := float64(w.Used+w.Waited) / float64(w.Capacity)
	if !w.IdleKnown || wanted < MainFor || w.Idle < 0 {
		return share
	}
	return float64(w.Used) / float64(min(w.Capacity, w.Used+w.Idle))
}

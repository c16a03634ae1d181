package loadtest

import "github.com/agentstream/agentstream/internal/cpuuse"

// SelfCPU is this process's user+system CPU time, in seconds (0 where it
// cannot be read: the client's CPU is not reported there).
func SelfCPU() float64 {
	cpu, _ := cpuuse.Process()
	return cpu.Seconds()
}

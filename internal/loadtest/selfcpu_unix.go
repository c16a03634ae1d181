//go:build unix

package loadtest

import "syscall"

// SelfCPU is this process's user+system CPU time, in seconds.
func SelfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

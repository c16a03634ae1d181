//go:build unix

package cpuuse

import (
	"syscall"
	"time"
)

// Process is the process's user+system CPU time (false where it cannot
// be read).
func Process() (time.Duration, bool) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

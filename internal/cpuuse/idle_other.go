//go:build !linux

package cpuuse

import "time"

// CoresIdle is unknown here: a Gauge reads the process's own share alone.
func CoresIdle() (time.Duration, bool) { return 0, false }

//go:build !unix

package cpuuse

import "time"

// Process is unknown here: getrusage is missing.
func Process() (time.Duration, bool) { return 0, false }

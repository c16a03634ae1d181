//go:build !linux

package server

// physicalMemory is the machine's memory in bytes (0: unknown here).
func physicalMemory() int64 { return 0 }

package cpuuse

import (
	"bytes"
	"os"
	"strconv"
	"time"
)

// Waited is the time the process's threads have spent runnable but
// waiting for a CPU (the second field of each thread's
// /proc/self/task/*/schedstat), summed over the threads alive now.
func Waited() (time.Duration, bool) {
	dir, err := os.Open("/proc/self/task")
	if err != nil {
		return 0, false
	}
	tids, err := dir.Readdirnames(-1)
	dir.Close()
	if err != nil {
		return 0, false
	}
	var sum time.Duration
	buf := make([]byte, 0, 64)
	found := false
	for _, tid := range tids {
		f, err := os.Open("/proc/self/task/" + tid + "/schedstat")
		if err != nil {
			continue // a thread that has exited since
		}
		n, err := f.Read(buf[:cap(buf)])
		f.Close()
		if err != nil {
			continue
		}
		if w, ok := waitOf(buf[:n]); ok {
			sum += w
			found = true
		}
	}
	return sum, found
}

// waitOf reads a schedstat line: time on the CPU, time waiting on a
// runqueue (both in nanoseconds), timeslices run.
func waitOf(line []byte) (time.Duration, bool) {
	f := bytes.Fields(line)
	if len(f) < 2 {
		return 0, false
	}
	ns, err := strconv.ParseUint(string(f[1]), 10, 63)
	return time.Duration(ns), err == nil
}

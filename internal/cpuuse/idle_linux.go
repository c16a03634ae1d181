package cpuuse

import (
	"bytes"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// userHZ is the unit of /proc/stat's times (USER_HZ, 100 on every Linux
// architecture Go runs on).
const userHZ = 100

// CoresIdle is the idle time (idle and waiting for I/O) of the cores the
// process may run on, from /proc/stat.
func CoresIdle() (time.Duration, bool) {
	var mask unix.CPUSet
	if unix.SchedGetaffinity(0, &mask) != nil {
		return 0, false
	}
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	return idleOf(stat, mask.IsSet)
}

// idleOf sums the idle and iowait columns of /proc/stat's per-core lines
// for the cores in (false when it finds none).
func idleOf(stat []byte, in func(cpu int) bool) (time.Duration, bool) {
	var ticks uint64
	found := false
	for line := range bytes.Lines(stat) {
		if !bytes.HasPrefix(line, []byte("cpu")) {
			break // the per-core lines come first, after the total
		}
		f := bytes.Fields(line)
		cpu, err := strconv.Atoi(string(f[0][3:]))
		if err != nil || len(f) < 6 || !in(cpu) {
			continue // the total line ("cpu"), or a core not ours
		}
		idle, err1 := strconv.ParseUint(string(f[4]), 10, 64)
		iowait, err2 := strconv.ParseUint(string(f[5]), 10, 64)
		if err1 != nil || err2 != nil {
			return 0, false
		}
		ticks += idle + iowait
		found = true
	}
	return time.Duration(ticks) * (time.Second / userHZ), found
}

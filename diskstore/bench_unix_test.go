//go:build unix

package diskstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentstream/agentstream/internal/cpuuse"
	"github.com/agentstream/agentstream/server"
)

// BenchmarkAppendCPU: the process's CPU time (the appends, the group
// commits and folds on the writer, Pebble's flushes and compactions) per
// event appended to 5,000 threads round robin, against the in-memory
// engine's log doing the same: the disk engine's cost at the
// many-conversations workload's saturation point, with chunks in zstd
// and, as a busy process folds them, in S2 (disk-busy). Appends pause briefly
// every 50 events, as a server's live path does between publishes, so
// that group commits stay the size they are in a server. Run it on one
// core (taskset -c 0) for the figure a one-core server sees.
func BenchmarkAppendCPU(b *testing.B) {
	const threads = 5000
	for _, engine := range []string{"disk", "disk-busy", "memory"} {
		b.Run(engine, func(b *testing.B) {
			var log server.EventLog = server.NewMemoryLog(server.DefaultBufferEvents, 0)
			var eng *Engine
			if engine != "memory" {
				eng = openBusy(b, b.TempDir(), engine == "disk-busy") // chunks in S2, not zstd
				log = eng.log
			}
			per := b.N/threads + 1
			names := make([]string, threads)
			evs := make([][]*server.Event, threads)
			for t := range evs {
				names[t] = fmt.Sprintf("thread-%05d-of-the-benchmark", t)
				evs[t] = benchEvents(b, names[t], 0, per)
			}
			start := selfCPU()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t := i % threads
				if err := log.Append(context.Background(), names[t], evs[t][i/threads]); err != nil {
					b.Fatal(err)
				}
				if i%50 == 49 {
					time.Sleep(50 * time.Microsecond)
				}
			}
			if eng != nil {
				if err := eng.Close(); err != nil { // everything committed and folded
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric((selfCPU()-start)*1e9/float64(b.N), "cpu-ns/event")
		})
	}
}

// selfCPU is this process's user+system CPU time, in seconds.
func selfCPU() float64 {
	cpu, _ := cpuuse.Process()
	return cpu.Seconds()
}

package diskstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/agentstream/agentstream/server"
)

// benchEvents makes n events of thread with 100-byte payloads of random
// words (compressible as text is, not as a repeated string).
func benchEvents(b *testing.B, thread string, from uint64, n int) []*server.Event {
	b.Helper()
	words := []string{"agent", "tool", "call", "result", "token", "stream", "thread", "the", "a", "of", "search", "weather", "Paris", "answer", "is", "42", "and", "then"}
	out := make([]*server.Event, n)
	for i := range out {
		seq := from + uint64(i) + 1
		var text []byte
		for len(text) < 100 {
			text = append(append(text, words[rand.IntN(len(words))]...), ' ')
		}
		js := fmt.Appendf(nil, `{"type":"event","event_id":"ep-%d","seq":%d,"method":"custom","params":{"namespace":[],"timestamp":%d,"data":{"name":"tick","payload":%q}}}`,
			seq, seq, time.Now().UnixMilli(), text[:100])
		e, err := server.DecodeEvent(js)
		if err != nil {
			b.Fatal(err)
		}
		out[i] = e
	}
	return out
}

// BenchmarkAppend: 1,000 threads appended round robin (the
// many-conversations workload's shape), through group commits and folds;
// reports events/s and the bytes on disk per event, with chunks in zstd
// (the process with CPU to spare) and in S2 (busy: Options.Busy).
func BenchmarkAppend(b *testing.B) {
	const threads = 1000
	for _, busy := range []bool{false, true} {
		name := map[bool]string{false: "zstd", true: "s2"}[busy]
		b.Run(name, func(b *testing.B) {
			eng := openBusy(b, b.TempDir(), busy)
			opts := eng.opts
			per := b.N/threads + 1
			evs := make([][]*server.Event, threads)
			for t := range evs {
				evs[t] = benchEvents(b, fmt.Sprint("t", t), 0, per)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t := i % threads
				if err := eng.log.Append(context.Background(), fmt.Sprint("t", t), evs[t][i/threads]); err != nil {
					b.Fatal(err)
				}
			}
			if err := eng.Close(); err != nil { // everything synced and folded
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			eng2, err := Open(opts)
			if err != nil {
				b.Fatal(err)
			}
			defer eng2.Close()
			b.ReportMetric(float64(eng2.Counters().ChunkBytes)/float64(b.N), "chunk-bytes/event")
		})
	}
}

// openBusy opens a store in dir whose Options.Busy always answers busy,
// and returns once its writer has asked (once a second): its chunks are
// S2 from the first when busy, zstd when not.
func openBusy(b *testing.B, dir string, busy bool) *Engine {
	eng, err := Open(Options{Dir: dir, Busy: func() bool { return busy }})
	if err != nil {
		b.Fatal(err)
	}
	for busy && !eng.log.fast.Load() {
		time.Sleep(10 * time.Millisecond)
	}
	return eng
}

// BenchmarkReplay100k: a thread of 100,000 events replayed in full from
// the disk after a restart.
func BenchmarkReplay100k(b *testing.B) {
	dir := b.TempDir()
	eng, err := Open(Options{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range benchEvents(b, "long", 0, 100_000) {
		if err := eng.log.Append(context.Background(), "long", e); err != nil {
			b.Fatal(err)
		}
	}
	if err := eng.Close(); err != nil {
		b.Fatal(err)
	}
	eng, err = Open(Options{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n := 0
		if err := eng.log.Stored(context.Background(), "long", 0, func(*server.Event) bool { n++; return true }); err != nil || n != 100_000 {
			b.Fatal(n, err)
		}
	}
}

// BenchmarkOpen10kThreads: opening a store of 10,000 threads (10 events
// each) and reading each one's head, as a server does when its clients
// come back.
func BenchmarkOpen10kThreads(b *testing.B) {
	dir := b.TempDir()
	eng, err := Open(Options{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	for t := 0; t < 10_000; t++ {
		for _, e := range benchEvents(b, fmt.Sprint("t", t), 0, 10) {
			if err := eng.log.Append(context.Background(), fmt.Sprint("t", t), e); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := eng.Close(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		eng, err := Open(Options{Dir: dir})
		if err != nil {
			b.Fatal(err)
		}
		for t := 0; t < 10_000; t++ {
			if _, seq, err := eng.log.Head(context.Background(), fmt.Sprint("t", t)); err != nil || seq != 10 {
				b.Fatal(seq, err)
			}
		}
		if err := eng.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

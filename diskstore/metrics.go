package diskstore

import "github.com/prometheus/client_golang/prometheus"

// Counters is what a store has done since it opened.
type Counters struct {
	// Written events are in the commit log (synced); Commits counts the
	// group commits that wrote them and Failures those the disk failed
	// (tried again).
	Written, Commits, Failures uint64
	// RefusedFull and RefusedBehind count events refused to their
	// publisher: the disk nearly full (MinFree), or MaxPending waiting
	// past QueueWait.
	RefusedFull, RefusedBehind uint64
	// Chunks written, FastChunks of them with S2 while the process was
	// busy (Options.Busy); events Dropped by the retention policy (whole
	// chunks).
	Chunks, FastChunks, Dropped uint64
	// ProducersForgotten counts producers' last batches the store let go
	// of, past Options.MaxProducers on a thread (a retry of one appends
	// again).
	ProducersForgotten uint64
	// Pending events wait for their commit; ChunkBytes is what the
	// threads' chunks hold (compressed); CommitLogBytes what the commit
	// log's files take.
	Pending                    int
	ChunkBytes, CommitLogBytes int64
	// AsyncSyncs are the store's syncs the kernel's AIO made while their
	// goroutine was parked; BlockingSyncs those made as blocking calls
	// (AIO refused them). Both zero where there is no AIO.
	AsyncSyncs, BlockingSyncs uint64
}

// Counters reads the store's counters.
func (e *Engine) Counters() Counters {
	l := e.log
	l.mu.Lock()
	pending, total := l.waiting(), l.total
	l.mu.Unlock()
	async, blocking := e.syncer.Counts()
	return Counters{AsyncSyncs: async, BlockingSyncs: blocking, Written: l.written.Load(), Commits: l.commits.Load(), Failures: l.failures.Load(),
		RefusedFull: l.refusedFull.Load(), RefusedBehind: l.refusedBehind.Load(), Chunks: l.chunksWritten.Load(), FastChunks: l.fastChunks.Load(),
		Dropped: l.dropped.Load(), ProducersForgotten: l.prunedProducers.Load(), Pending: pending, ChunkBytes: total, CommitLogBytes: l.wal.Bytes()}
}

// Collectors are the store's Prometheus metrics.
func (e *Engine) Collectors() []prometheus.Collector {
	counter := func(name, help string, f func(Counters) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f(e.Counters())) })
	}
	syncs := func(how string, f func(Counters) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "agentstream_data_syncs_total",
			Help:        "The store's file syncs, by how they were made: async (the kernel's AIO, the caller parked) or blocking (AIO refused them).",
			ConstLabels: prometheus.Labels{"how": how}}, func() float64 { return float64(f(e.Counters())) })
	}
	return []prometheus.Collector{
		counter("agentstream_data_events_written_total", "Events synced to the disk's commit log (--data-dir).", func(c Counters) uint64 { return c.Written }),
		counter("agentstream_data_commits_total", "Group commits synced to the disk.", func(c Counters) uint64 { return c.Commits }),
		counter("agentstream_data_commit_failures_total", "Group commits the disk failed (tried again at the next commit).", func(c Counters) uint64 { return c.Failures }),
		counter("agentstream_data_events_refused_full_total", "Events refused to their publisher while the disk had less free space than --data-min-free.", func(c Counters) uint64 { return c.RefusedFull }),
		counter("agentstream_data_events_refused_behind_total", "Events refused to their publisher because the disk was too far behind (its commits failing or slow).", func(c Counters) uint64 { return c.RefusedBehind }),
		counter("agentstream_data_chunks_written_total", "Chunks of a thread's events written (what replays read).", func(c Counters) uint64 { return c.Chunks }),
		counter("agentstream_data_fast_chunks_total", "Chunks compressed with S2 rather than zstd because the process had no CPU to spare (more bytes on disk until rewritten as zstd, once it has).", func(c Counters) uint64 { return c.FastChunks }),
		counter("agentstream_data_events_dropped_total", "Events the retention policy dropped from the disk (--data-max-events, --data-max-thread-bytes, --data-max-bytes, --data-max-age).", func(c Counters) uint64 { return c.Dropped }),
		counter("agentstream_data_producers_forgotten_total", "Producers' last batches the store let go of, past --max-producers-per-thread on a thread (a retry of one would append again).", func(c Counters) uint64 { return c.ProducersForgotten }),
		syncs("async", func(c Counters) uint64 { return c.AsyncSyncs }),
		syncs("blocking", func(c Counters) uint64 { return c.BlockingSyncs }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentstream_data_events_pending", Help: "Events waiting for their group commit."}, func() float64 { return float64(e.Counters().Pending) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentstream_data_chunk_bytes", Help: "What the threads' chunks hold on disk (compressed; --data-max-bytes caps it)."}, func() float64 { return float64(e.Counters().ChunkBytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentstream_data_commit_log_bytes", Help: "What the commit log's segment files take on disk (the group commits whose events are not all in chunks yet)."}, func() float64 { return float64(e.Counters().CommitLogBytes) }),
	}
}

// Package diskstore keeps threads on one machine's disk (`serve
// --data-dir DIR`): each thread's events, its values, checkpoints and
// owner, in an embedded Pebble store under DIR, so that they are all there
// after a restart and the next run continues the same stream, in the same
// epoch. The in-memory replay buffer stays in front of it as the hot
// cache; events are written behind the live path in group commits.
//
// An event is written twice, both times compressed: within CommitEvery
// into the commit log, one record per group commit in arrival order
// (synced: what a crash cannot lose; S2, since it is read back only after
// a crash), and later, a run of one thread's events at a time, into that
// thread's chunks (zstd; S2 while the process has no CPU to spare,
// rewritten as zstd once it has), which replays read. Until its events
// are in chunks a thread keeps them in memory (its tail), so no replay
// waits for the disk. The commit log is not in the tree: it is a
// directory of plain segment files (internal/commitlog), each commit
// appended and synced through the kernel's AIO, a segment let go of
// (and written over as a later one) once all its events are in chunks
// and the tree is synced, so that an event the tree holds for seconds
// does not pass through its write-ahead log, memtable, flushes and
// compactions. The chunks are written to the tree without a sync: the
// commit log holds their events until the tree is synced. Chunks hold 64
// events each, so the tree's compactions have little to rewrite (with
// one key per event they took a large share of the server's CPU and
// stalled deliveries).
//
// Pebble was chosen against bbolt and SQLite by measurement, and what the
// disk costs in CPU is measured by this package's benchmarks
// (BenchmarkAppend, BenchmarkAppendCPU): the figures are in
// docs/durability.md.
package diskstore

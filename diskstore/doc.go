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
// events each, so the tree's compactions have little to rewrite: with
// one key per event,
// thread-major, they took a tenth of the server's CPU and put 30-50 ms
// stalls into deliveries.
//
// The store was chosen by measurement (2026-11-27, this 2-core VM, ext4,
// an fsync per group commit, 100-byte events of random text, 1,000
// threads appended round robin, one key per event; tools/storebench):
//
//	                        Pebble          bbolt          SQLite (modernc, WAL)
//	appends, 100 a commit   324k/s          45k/s          31k/s
//	appends, 500 a commit   575k/s          79k/s          60k/s
//	replay 100,000 events   16 ms           4 ms           60 ms
//	bytes on disk per event 115             337            134
//	open + 10,000 heads     141 ms          29 ms          40 ms
//
// The many-conversations workload (5,000 threads x 20 events/s = 100,000
// events/s) is beyond what bbolt and SQLite commit here with an fsync per
// batch; Pebble does it with room to spare. With the commit log and
// chunks (this package's benchmarks, same day and machine: go test
// -bench . ./diskstore): 429k appends/s, 42 bytes on disk per event, a
// 100,000-event thread replayed from disk (decoded) in 47 ms, a store of
// 10,000 threads opened and every head read in 45 ms.
//
// What the disk costs in CPU at the workload's saturation point
// (BenchmarkAppendCPU, 5,000 threads, on one core: taskset -c 0 go test
// -run X -bench AppendCPU -benchtime 1000000x ./diskstore), against 1.3
// µs per event for the in-memory engine's buffer: 6.7-7.5 µs per event
// appended with zstd commits in the tree; 5.7-6.7 with S2 commits (four
// alternated pairs, 2026-11-28); 5.5 with a 16 MiB memtable (6.2-6.3
// with Pebble's 4); 4.3-4.7 with the commit log in files of its own
// (4.8-5.4 with it in the tree, three alternated pairs, 2026-11-28, later).
// What is left is mostly the chunks' zstd, the commits' S2 and copying.
package diskstore

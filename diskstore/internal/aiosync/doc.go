// Package aiosync syncs files to the disk without holding one of the Go
// runtime's processors while the disk works.
//
// An fsync or fdatasync is a blocking system call: the goroutine making
// it keeps its processor (P) until the runtime's monitor takes the P
// back, and the monitor, once the process has been busy without blocking
// calls for a while, looks only every 10 ms. On a server given one core
// (GOMAXPROCS=1) every goroutine waits behind a slow sync: measured with
// the disk engine, 8-11 ms fdatasyncs of the write-ahead log held back the
// event scheduler and every connection's writer for as long.
//
// A Syncer hands each sync to the kernel's native AIO (IOCB_CMD_FSYNC and
// IOCB_CMD_FDSYNC, Linux 4.18 and later), which runs it on a kernel
// worker; completions are announced on an eventfd that the runtime's
// network poller watches, so the waiting goroutine is parked like one
// waiting for a socket and the processor runs the others meanwhile. The
// guarantee is the kernel's own fsync or fdatasync: the same call, made
// by another thread. Where AIO refuses the operation, a Syncer makes
// the blocking call itself (Counts says how often); where there is no AIO
// at all, New fails and the caller syncs as before.
//
// FS wraps a Pebble file system so that its files sync through a Syncer.
package aiosync

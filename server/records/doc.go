// Package records owns what a server keeps beyond its threads' event
// streams, and the contracts of the stores that keep it: a thread's values
// and checkpoints (StateStore), the Platform API's thread records
// (ThreadCatalog, IndexedCatalog, ThreadDeleter), its run records
// (RunCatalog) and its store items (ItemStore); their JSON encodings for
// the engines; the in-memory store of all of them (MemoryState); and the
// core's coded errors (Error, CodeOf), the one table of protocol codes and
// reasons every wire answers by. It depends on nothing of the server: the
// core (package server), its resources (server/threads, server/items) and
// the engines (redisstore, diskstore) build on it, and package server
// names its types too.
package records

// Package stream owns the vocabulary of a thread's event stream: the Event
// (typed, encoded once, with the views the wires make of it), the Cursor a
// client resumes from and the epochs in its event ids, the contracts of the
// logs that keep a stream (EventLog and what a log can do beyond it:
// DurableLog, HeadsReader, TailClaimer, RoomWaiter, SyncedLog,
// WriteThroughLog, ProducerLog), the stores of detached subscriptions and a
// cluster's Watcher, and the in-memory log (MemoryLog). It depends on
// nothing of the server: the core (package server) publishes and replays
// through it, the engines (redisstore, diskstore) implement its contracts,
// and package server names its types too.
package stream

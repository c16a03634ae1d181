package server

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/agentstream/agentstream/server/stream"
)

// A thread's stream of events, its cursors, the contracts of the logs that
// keep it (and of producers' batches, detached subscriptions, a cluster's
// watcher) and the in-memory log are package stream's; the server names
// them too, for its users and engines.

type (
	// Event is stream.Event: one event of a thread's stream.
	Event = stream.Event
	// Cursor is stream.Cursor: a position in a thread's stream.
	Cursor = stream.Cursor
	// EventLog is stream.EventLog.
	EventLog = stream.EventLog
	// DurableLog is stream.DurableLog.
	DurableLog = stream.DurableLog
	// HeadsReader is stream.HeadsReader.
	HeadsReader = stream.HeadsReader
	// Head is stream.Head.
	Head = stream.Head
	// TailClaimer is stream.TailClaimer.
	TailClaimer = stream.TailClaimer
	// RoomWaiter is stream.RoomWaiter.
	RoomWaiter = stream.RoomWaiter
	// SyncedLog is stream.SyncedLog.
	SyncedLog = stream.SyncedLog
	// WriteThroughLog is stream.WriteThroughLog.
	WriteThroughLog = stream.WriteThroughLog
	// DetachedStore is stream.DetachedStore.
	DetachedStore = stream.DetachedStore
	// DetachedSubscription is stream.DetachedSubscription.
	DetachedSubscription = stream.DetachedSubscription
	// Watcher is stream.Watcher.
	Watcher = stream.Watcher
	// MemoryLog is stream.MemoryLog, the in-memory EventLog.
	MemoryLog = stream.MemoryLog
	// ProducerLog is stream.ProducerLog.
	ProducerLog = stream.ProducerLog
	// ProducedBy is stream.ProducedBy.
	ProducedBy = stream.ProducedBy
	// LastBatch is stream.LastBatch.
	LastBatch = stream.LastBatch
	// JSONAppender is stream.JSONAppender.
	JSONAppender = stream.JSONAppender
)

// EventOverhead is stream.EventOverhead.
const EventOverhead = stream.EventOverhead

// NewMemoryLog is stream.NewMemoryLog.
func NewMemoryLog(maxEvents, maxBytes int) *MemoryLog {
	return stream.NewMemoryLog(maxEvents, maxBytes)
}

// DecodeEvent is stream.DecodeEvent.
func DecodeEvent(b []byte) (*Event, error) { return stream.DecodeEvent(b) }

// ParseCursor is stream.ParseCursor.
func ParseCursor(s string) (Cursor, error) { return stream.ParseCursor(s) }

// SeqCursor is stream.SeqCursor.
func SeqCursor(seq uint64) *Cursor { return stream.SeqCursor(seq) }

// NewEpoch is stream.NewEpoch.
func NewEpoch() string { return stream.NewEpoch() }

// ProducerKey is stream.ProducerKey.
func ProducerKey(principal, producer string) string { return stream.ProducerKey(principal, producer) }

func newEpoch() string { return stream.NewEpoch() }

// randomID is prefix and 16 random hex digits.
func randomID(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

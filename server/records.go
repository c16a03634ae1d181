package server

import (
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server/records"
)

// The records a server keeps beyond its threads' streams (values and
// checkpoints, thread records, run records, store items), the stores that
// keep them, and the core's coded errors are package records'; the server
// names them too, for its users and engines.

type (
	// Error is records.Error: an error of the core with its protocol code
	// and reason.
	Error = records.Error
	// StateStore is records.StateStore.
	StateStore = records.StateStore
	// CheckpointRecord is records.CheckpointRecord.
	CheckpointRecord = records.CheckpointRecord
	// ThreadRecord is records.ThreadRecord.
	ThreadRecord = records.ThreadRecord
	// ThreadCatalog is records.ThreadCatalog.
	ThreadCatalog = records.ThreadCatalog
	// ThreadDeleter is records.ThreadDeleter.
	ThreadDeleter = records.ThreadDeleter
	// SyncedState is records.SyncedState.
	SyncedState = records.SyncedState
	// IndexedCatalog is records.IndexedCatalog.
	IndexedCatalog = records.IndexedCatalog
	// RecordIndex is records.RecordIndex.
	RecordIndex = records.RecordIndex
	// RunRecord is records.RunRecord.
	RunRecord = records.RunRecord
	// RunCatalog is records.RunCatalog.
	RunCatalog = records.RunCatalog
	// StoreItem is records.StoreItem.
	StoreItem = records.StoreItem
	// ItemStore is records.ItemStore.
	ItemStore = records.ItemStore
	// MemoryState is records.MemoryState, the in-memory StateStore.
	MemoryState = records.MemoryState
)

// Reasons an Error gives (records.ReasonThreadBusy and the others).
const (
	ReasonThreadBusy = records.ReasonThreadBusy
	ReasonConflict   = records.ReasonConflict
	ReasonTooLarge   = records.ReasonTooLarge
	ReasonNotServed  = records.ReasonNotServed
	ReasonNotFound   = records.ReasonNotFound
)

// A run record's statuses (records.RunPending and the others).
const (
	RunPending     = records.RunPending
	RunRunning     = records.RunRunning
	RunSuccess     = records.RunSuccess
	RunError       = records.RunError
	RunInterrupted = records.RunInterrupted
)

// The store's bounds (records.MaxItemNamespaceDepth and the others).
const (
	MaxItemNamespaceDepth = records.MaxItemNamespaceDepth
	MaxItemLabelLength    = records.MaxItemLabelLength
	MaxItemKeyLength      = records.MaxItemKeyLength
	DefaultMaxStoreItems  = records.DefaultMaxStoreItems
)

// The records' errors, for errors.Is (records.ErrNoCatalog and the others).
var (
	ErrNoCatalog     = records.ErrNoCatalog
	ErrThreadExists  = records.ErrThreadExists
	ErrThreadDeleted = records.ErrThreadDeleted
	ErrThreadBusy    = records.ErrThreadBusy
	ErrItemNamespace = records.ErrItemNamespace
	ErrNoNamespace   = records.ErrNoNamespace
	ErrTooManyItems  = records.ErrTooManyItems
	ErrNoItemStore   = records.ErrNoItemStore
)

// NewError is records.NewError.
func NewError(code protocol.ErrorCode, reason, msg string) *Error {
	return records.NewError(code, reason, msg)
}

// CodeOf is records.CodeOf: the protocol error code of err and its reason.
func CodeOf(err error) (protocol.ErrorCode, string) { return records.CodeOf(err) }

// NewMemoryState is records.NewMemoryState.
func NewMemoryState() *MemoryState { return records.NewMemoryState() }

// NewRecordIndex is records.NewRecordIndex.
func NewRecordIndex() *RecordIndex { return records.NewRecordIndex() }

// coded is records.NewError, for the core's own sentinel errors.
func coded(code protocol.ErrorCode, reason, msg string) *Error {
	return records.NewError(code, reason, msg)
}

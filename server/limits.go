package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server/records"
)

// Limit names a limit of the server; each refusal it causes is counted
// ([MetricsSnapshot.Refused]).
type Limit string

// The server's limits.
const (
	// LimitThreadID: a thread id longer than MaxThreadIDLength or with a
	// character outside [A-Za-z0-9._:-].
	LimitThreadID Limit = "thread_id"
	// LimitThreads: Config.MaxThreads live threads.
	LimitThreads Limit = "threads"
	// LimitQueuedRuns: Config.MaxQueuedRuns runs waiting on one thread.
	LimitQueuedRuns Limit = "queued_runs"
	// LimitSessionSubscriptions: Config.MaxSessionSubscriptions on one
	// connection.
	LimitSessionSubscriptions Limit = "session_subscriptions"
	// LimitAssistantInput: an assistant's InputValidator refused a run's
	// input.
	LimitAssistantInput Limit = "assistant_input"
	// LimitPrincipalThreads: Config.MaxThreadsPerPrincipal threads
	// created by one principal.
	LimitPrincipalThreads Limit = "principal_threads"
	// LimitPrincipalRuns: Config.MaxRunsPerMinute runs started by one
	// principal.
	LimitPrincipalRuns Limit = "principal_runs"
	// LimitQueueTotal: Config.QueueTotalBytes queued to all sessions.
	LimitQueueTotal Limit = "queue_total_bytes"
	// LimitProducers: a thread forgot a producer's last batch, having
	// Config.MaxProducersPerThread to remember (its retry would append
	// again).
	LimitProducers Limit = "producers_per_thread"
	// LimitWorkers: Config.MaxWorkers remote workers connected.
	LimitWorkers Limit = "workers"
	// LimitOwnedAssistants: MaxOwnedAssistants assistant ids one
	// principal owns by serving them first.
	LimitOwnedAssistants Limit = "owned_assistants"
	// LimitQueuedWorkerRuns: Config.MaxQueuedWorkerRuns runs of one
	// assistant waiting for a free worker.
	LimitQueuedWorkerRuns Limit = "queued_worker_runs"
	// LimitIngestAck: a producer's batch not synced within
	// Config.IngestAckTimeout.
	LimitIngestAck Limit = "ingest_ack"
	// LimitWriteAck: a Platform API write not kept (synced, on the disk
	// engine) within Config.IngestAckTimeout, answered 503.
	LimitWriteAck Limit = "write_ack"
	// LimitStoreItems: Config.MaxStoreItems items in the long-term store.
	LimitStoreItems Limit = "store_items"
	// LimitAssistants: Config.MaxAssistants assistants created by clients.
	LimitAssistants Limit = "assistants"
	// LimitThreadMetadata: Config.MaxThreadMetadataBytes of a thread's
	// metadata.
	LimitThreadMetadata Limit = "thread_metadata_bytes"
	// LimitState: Config.MaxStateBytes of a thread's values changed by a
	// client.
	LimitState Limit = "state_bytes"
)

// Defaults of the size limits.
const (
	DefaultMaxAssistants          = 100_000
	DefaultThreadExpiryCheck      = 30 * time.Second
	DefaultMaxThreadMetadataBytes = 64 << 10
	DefaultMaxStateBytes          = 4 << 20
)

var limits = [...]Limit{LimitThreadID, LimitThreads, LimitQueuedRuns, LimitSessionSubscriptions, LimitAssistantInput, LimitPrincipalThreads, LimitPrincipalRuns, LimitQueueTotal, LimitProducers, LimitWorkers, LimitOwnedAssistants, LimitQueuedWorkerRuns, LimitIngestAck, LimitStoreItems, LimitAssistants, LimitThreadMetadata, LimitState}

// MaxThreadIDLength is the longest thread id the server accepts.
const MaxThreadIDLength = 256

// Errors of the limits, for errors.Is.
var (
	ErrThreadID             = coded(protocol.ErrorCodeInvalidArgument, "", "server: bad thread id")
	ErrTooManyThreads       = records.ErrTooManyThreads
	ErrTooManySubscriptions = coded(protocol.ErrorCodeResourceExhausted, "", "server: too many subscriptions on one connection")
	// ErrQuota: the principal is over one of its quotas
	// (MaxThreadsPerPrincipal, MaxRunsPerMinute).
	ErrQuota = coded(protocol.ErrorCodeResourceExhausted, "", "server: over the principal's quota")
	// ErrTooLarge: a thread's metadata or values would be larger than
	// their limit (Config.MaxThreadMetadataBytes, MaxStateBytes).
	ErrTooLarge = coded(protocol.ErrorCodeResourceExhausted, ReasonTooLarge, "server: too large")
)

// sizeOK refuses v, as JSON, larger than max bytes: ErrTooLarge naming
// what and the flag, counted as limit.
func (s *Server) sizeOK(v any, max int, limit Limit, what, flag string) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if len(b) > max {
		s.metrics.refused.add(limit)
		return fmt.Errorf("%w: %s would be %d bytes as JSON, more than %d (%s)", ErrTooLarge, what, len(b), max, flag)
	}
	return nil
}

// Errors of authorization, for errors.Is.
var (
	// ErrUnauthenticated: authentication is on and the caller has no
	// valid credential.
	ErrUnauthenticated = coded(protocol.ErrorCodeUnauthenticated, "", "server: unauthenticated")
	// ErrPermissionDenied: the principal may not use the thread.
	ErrPermissionDenied = coded(protocol.ErrorCodePermissionDenied, "", "server: permission denied")
	// ErrNoSuchThread: a read of a thread the server does not have.
	ErrNoSuchThread = coded(protocol.ErrorCodeNoSuchThread, "", "server: no such thread")
)

// ValidThreadID reports whether id may name a thread: 1 to 256 bytes of
// A-Z, a-z, 0-9, '.', '_', ':' and '-' (UUIDs, and the ids the official
// SDK makes, qualify), other than "." and "..".
func ValidThreadID(id string) error {
	if id == "" || len(id) > MaxThreadIDLength {
		return fmt.Errorf("%w: it must be 1 to %d bytes long", ErrThreadID, MaxThreadIDLength)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return fmt.Errorf("%w: byte %d (%q) is not one of A-Z a-z 0-9 . _ : -", ErrThreadID, i, c)
		}
	}
	if id == "." || id == ".." {
		return fmt.Errorf("%w: %q names a directory in a URL's path", ErrThreadID, id)
	}
	return nil
}

// ErrName refuses a name (an assistant, a job, a worker, an owner) that
// ValidName does not take.
var ErrName = errors.New("server: not a valid name")

// ValidName reports whether s may name an assistant, a job, a worker or
// a principal given in a request: 1 to max bytes of UTF-8 without control
// characters, and not "." or ".." (which a URL's path would resolve).
// Thread ids are stricter (ValidThreadID).
func ValidName(s string, max int) error {
	switch {
	case s == "" || len(s) > max:
		return fmt.Errorf("%w: it must be 1 to %d bytes long", ErrName, max)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: it is not UTF-8", ErrName)
	case s == "." || s == "..":
		return fmt.Errorf("%w: %q names a directory in a URL's path", ErrName, s)
	}
	for i, r := range s {
		if r < 0x20 || r == 0x7f || 0x80 <= r && r < 0xa0 {
			return fmt.Errorf("%w: a control character at byte %d", ErrName, i)
		}
	}
	return nil
}

// refusals counts refusals by limit.
type refusals [len(limits)]atomic.Uint64

func (r *refusals) add(l Limit) {
	for i, k := range limits {
		if k == l {
			r[i].Add(1)
			return
		}
	}
}

func (r *refusals) snapshot() map[Limit]uint64 {
	out := make(map[Limit]uint64, len(limits))
	for i, k := range limits {
		out[k] = r[i].Load()
	}
	return out
}

// InputValidator is an [Assistant] that checks a new run's input and
// config before the run starts: run.start (and state.fork) answer
// invalid_argument with its error instead of starting the run. An
// assistant that takes sizes, counts or rates from its input bounds them
// here, so no request can make it exhaust the server.
type InputValidator interface {
	ValidateInput(input any, config map[string]any) error
}

// codeOf is the protocol error code for an error of the core (CodeOf).
func codeOf(err error) protocol.ErrorCode {
	code, _ := CodeOf(err)
	return code
}

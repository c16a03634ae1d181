package stream

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Cursor is a position in a thread's stream: the last event a client
// handled. Epoch names the stream it came from: a thread's stream gets a
// new epoch whenever it starts again from seq 1 (a restart of the
// in-memory engine, a thread forgotten after Config.ThreadTTL and used
// again), so a cursor from an earlier stream is recognised instead of
// silently taken for a position in the new one. Epoch is "" when a client
// gave only a number (the SSE body's `since`).
//
// On the wire a cursor is an event_id, "EPOCH-SEQ" (say "k3x9q2ab-20"),
// or a bare SEQ. The official SDK treats event_id as opaque and dedupes by
// it, so events of different epochs never collide there.
type Cursor struct {
	Epoch string
	Seq   uint64
}

// maxEpochLen caps the epoch a client may send back.
const maxEpochLen = 32

// ParseCursor reads an event_id (or a bare sequence number) as a cursor.
func ParseCursor(s string) (Cursor, error) {
	epoch, num := "", s
	if i := strings.LastIndexByte(s, '-'); i >= 0 {
		epoch, num = s[:i], s[i+1:]
		if epoch == "" || len(epoch) > maxEpochLen || !isEpoch(epoch) {
			return Cursor{}, fmt.Errorf("%q is not an event id of this server (EPOCH-SEQ or SEQ)", clip(s))
		}
	}
	n, ok := parseSeq(num)
	if !ok {
		return Cursor{}, fmt.Errorf("%q is not an event id of this server (EPOCH-SEQ or SEQ)", clip(s))
	}
	return Cursor{Epoch: epoch, Seq: n}, nil
}

// String is the cursor as an event_id.
func (c Cursor) String() string {
	if c.Epoch == "" {
		return strconv.FormatUint(c.Seq, 10)
	}
	return eventID(c.Epoch, c.Seq)
}

// SeqCursor is a cursor of a bare sequence number, for callers that have
// only that (its epoch is taken to be the thread's current one unless the
// number is beyond the stream's end).
func SeqCursor(seq uint64) *Cursor { return &Cursor{Seq: seq} }

func eventID(epoch string, seq uint64) string {
	b := make([]byte, 0, len(epoch)+1+20)
	b = append(b, epoch...)
	b = append(b, '-')
	return string(strconv.AppendUint(b, seq, 10))
}

// epochAlphabet spells epochs: lowercase letters and digits, no '-'.
const epochAlphabet = "0123456789abcdefghijklmnopqrstuv"

// NewEpoch returns a fresh stream epoch, for a store that starts a
// thread's stream anew (after a crash that may have lost its tail).
func NewEpoch() string { return newEpoch() }

// newEpoch returns a fresh stream epoch: 8 characters, 40 random bits.
func newEpoch() string {
	r := rand.Uint64()
	b := make([]byte, 8)
	for i := range b {
		b[i] = epochAlphabet[r&31]
		r >>= 5
	}
	return string(b)
}

func isEpoch(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// clip shortens what a client sent for an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

func parseSeq(s string) (uint64, bool) {
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

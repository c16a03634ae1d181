package stream

import (
	"context"
	"encoding/binary"
	"errors"
	"time"
)

// ProducerLog is an event log that keeps, with each event a producer
// published, which batch of which producer it belongs to, in the same
// write as the event, so that the batch is recognised when it is sent
// again after a restart or to another node (LastBatch): a retry appends
// nothing twice, and a batch a crash cut short is completed, not
// appended again. The disk and Redis engines' logs are ProducerLogs; the
// server falls back to what it remembers in memory with the others.
type ProducerLog interface {
	// AppendProduced appends e as Append does, keeping by with it.
	AppendProduced(ctx context.Context, thread string, e *Event, by ProducedBy) error
	// LastBatch returns what the log keeps of the producer's last batch
	// on the thread (ok false: none, or forgotten: the log keeps a
	// bounded number of producers per thread).
	LastBatch(ctx context.Context, thread, producer string) (b LastBatch, ok bool, err error)
}

// ProducedBy says which batch of which producer an event is: the
// Index-th (from 0) of the Count events of batch Batch.
type ProducedBy struct {
	// Producer names the producer together with its principal
	// (ProducerKey), so that two principals' producers of the same name
	// are two producers.
	Producer     string
	Batch        uint64
	Index, Count int
}

// ProducerKey is the name a producer's batches are kept under: its
// principal's and its own, so that producers of two principals never
// share one.
func ProducerKey(principal, producer string) string {
	return principal + "\x00" + producer
}

// LastBatch is what a log keeps of a producer's last batch on a thread.
type LastBatch struct {
	Batch uint64
	// Count is how many events the batch holds; Seqs and EventIDs are
	// those appended, in order: fewer than Count when a crash cut the
	// batch short.
	Count    int
	Seqs     []uint64
	EventIDs []string
	// Used is when the batch was appended (Unix ms), to forget the
	// producers used longest ago first.
	Used uint64
}

// Add records that the event seq (id) was appended as by: the first
// event of a batch starts it again.
func (b *LastBatch) Add(by ProducedBy, seq uint64, id string, now time.Time) {
	b.Used = uint64(now.UnixMilli())
	if by.Index != 0 && (by.Batch != b.Batch || len(b.Seqs) != by.Index || b.Count == 0) {
		// The batch's first events are not known (a log that lost
		// them): it is recognised as taken, not as cut short.
		b.Batch, b.Count, b.Seqs, b.EventIDs = by.Batch, 0, nil, nil
		return
	}
	if by.Index == 0 {
		b.Seqs, b.EventIDs = b.Seqs[:0], b.EventIDs[:0]
	}
	b.Batch, b.Count = by.Batch, by.Count
	b.Seqs = append(b.Seqs, seq)
	b.EventIDs = append(b.EventIDs, id)
}

// Complete reports whether every event of the batch was appended.
func (b *LastBatch) Complete() bool { return len(b.Seqs) >= b.Count }

// AppendBinary encodes by for a log's record.
func (by ProducedBy) AppendBinary(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(by.Producer)))
	dst = append(dst, by.Producer...)
	dst = binary.AppendUvarint(dst, by.Batch)
	dst = binary.AppendUvarint(dst, uint64(by.Index))
	return binary.AppendUvarint(dst, uint64(by.Count))
}

// errProducedBy refuses a record that is not a ProducedBy's encoding.
var errProducedBy = errors.New("server: not a producer mark")

// DecodeProducedBy reads what AppendBinary wrote.
func DecodeProducedBy(b []byte) (ProducedBy, error) {
	var by ProducedBy
	n, k := binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) < n {
		return by, errProducedBy
	}
	by.Producer, b = string(b[k:k+int(n)]), b[k+int(n):]
	var f [3]uint64
	for i := range f {
		v, k := binary.Uvarint(b)
		if k <= 0 {
			return by, errProducedBy
		}
		f[i], b = v, b[k:]
	}
	if f[1] >= f[2] || f[2] > 1<<20 {
		return by, errProducedBy
	}
	by.Batch, by.Index, by.Count = f[0], int(f[1]), int(f[2])
	return by, nil
}

// AppendBinary encodes the batch for a log's store.
func (b LastBatch) AppendBinary(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, b.Batch)
	dst = binary.AppendUvarint(dst, uint64(b.Count))
	dst = binary.AppendUvarint(dst, b.Used)
	dst = binary.AppendUvarint(dst, uint64(len(b.Seqs)))
	for i, s := range b.Seqs {
		dst = binary.AppendUvarint(dst, s)
		dst = binary.AppendUvarint(dst, uint64(len(b.EventIDs[i])))
		dst = append(dst, b.EventIDs[i]...)
	}
	return dst
}

// DecodeLastBatch reads what LastBatch.AppendBinary wrote.
func DecodeLastBatch(b []byte) (LastBatch, error) {
	var lb LastBatch
	var f [4]uint64
	for i := range f {
		v, k := binary.Uvarint(b)
		if k <= 0 {
			return lb, errProducedBy
		}
		f[i], b = v, b[k:]
	}
	if f[3] > f[1] || f[1] > 1<<20 {
		return lb, errProducedBy
	}
	lb.Batch, lb.Count, lb.Used = f[0], int(f[1]), f[2]
	lb.Seqs, lb.EventIDs = make([]uint64, 0, f[3]), make([]string, 0, f[3])
	for range f[3] {
		s, k := binary.Uvarint(b)
		if k <= 0 {
			return lb, errProducedBy
		}
		b = b[k:]
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			return lb, errProducedBy
		}
		lb.Seqs = append(lb.Seqs, s)
		lb.EventIDs = append(lb.EventIDs, string(b[k:k+int(n)]))
		b = b[k+int(n):]
	}
	return lb, nil
}

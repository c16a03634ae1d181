package diskstore

import (
	"context"
	"errors"
	"sort"

	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/stream"
	"github.com/cockroachdb/pebble/v2"
)

// The producers' last batches (server.ProducerLog). Each event a producer
// published is followed in its group commit by a record naming its batch
// (seq 0, then server.ProducedBy), so that a crash keeps or loses the two
// together; the last batch of each producer of a thread is kept in the
// tree ("p/" THREAD 0 PRODUCER), written with the group commit that holds
// its events (as the run marks are) and, after a crash, rebuilt from the
// commit log (recover).

// producerKey is where the tree keeps a producer's last batch on thread.
func producerKey(thread, producer string) []byte {
	return append(producerPrefix(thread), producer...)
}

func producerPrefix(thread string) []byte {
	return append(append([]byte("p/"), thread...), 0)
}

// markKey names a producer of a thread in the log's maps.
func markKey(thread, producer string) string { return thread + "\x00" + producer }

// AppendProduced implements server.ProducerLog: e is appended, and its
// batch recorded with it.
func (l *Log) AppendProduced(ctx context.Context, thread string, e *server.Event, by server.ProducedBy) error {
	return l.append(ctx, thread, e, &by)
}

// LastBatch implements server.ProducerLog.
func (l *Log) LastBatch(_ context.Context, thread, producer string) (server.LastBatch, bool, error) {
	l.mu.Lock()
	lb, ok, err := l.lastBatch(thread, producer)
	l.mu.Unlock()
	if err != nil || !ok {
		return server.LastBatch{}, ok, err
	}
	c := *lb
	c.Seqs, c.EventIDs = append([]uint64(nil), lb.Seqs...), append([]string(nil), lb.EventIDs...)
	return c, true, nil
}

// lastBatch finds the producer's last batch: recorded since the last
// commit, being written by it, or in the tree. l.mu held.
func (l *Log) lastBatch(thread, producer string) (*server.LastBatch, bool, error) {
	k := markKey(thread, producer)
	if lb, ok := l.marks[k]; ok {
		return lb, true, nil
	}
	if lb, ok := l.writing[k]; ok {
		return lb, true, nil
	}
	v, ok, err := l.get(producerKey(thread, producer))
	if err != nil || !ok {
		return nil, false, err
	}
	lb, err := stream.DecodeLastBatch(v)
	if err != nil {
		return nil, false, errors.Join(errCorrupt, err)
	}
	return &lb, true, nil
}

// markProduced records that e was appended as by, for the next commit.
// l.mu held.
func (l *Log) markProduced(thread string, e *server.Event, by server.ProducedBy) {
	k := markKey(thread, by.Producer)
	lb := l.marks[k]
	if lb == nil {
		lb = &server.LastBatch{}
		if by.Index > 0 { // the batch began before the last commit
			if prev, ok, err := l.lastBatch(thread, by.Producer); err == nil && ok {
				c := *prev
				c.Seqs, c.EventIDs = append([]uint64(nil), prev.Seqs...), append([]string(nil), prev.EventIDs...)
				lb = &c
			}
		}
		l.marks[k] = lb
	}
	lb.Add(by, e.Seq, e.EventID(), l.opts.Now())
}

// writeMarks puts the producers' batches into b, and counts them against
// each thread's cap (pruneProducers).
func (l *Log) writeMarks(b *pebble.Batch, marks map[string]*server.LastBatch) (threads map[string]int) {
	for k, lb := range marks {
		thread, producer, _ := cutMarkKey(k)
		_ = b.Set(producerKey(thread, producer), lb.AppendBinary(nil), nil)
		if threads == nil {
			threads = map[string]int{}
		}
		threads[thread]++
	}
	return threads
}

func cutMarkKey(k string) (thread, producer string, ok bool) {
	for i := 0; i < len(k); i++ {
		if k[i] == 0 {
			return k[:i], k[i+1:], true
		}
	}
	return k, "", false
}

// pruneProducers keeps at most Options.MaxProducers producers of each
// thread that had some written (n of them, maybe written before), the
// ones used longest ago forgotten. The tree is counted only when what
// was written could have passed the cap. l.flushing held.
func (l *Log) pruneProducers(written map[string]int) {
	max := l.opts.MaxProducers
	for thread, n := range written {
		l.mu.Lock()
		c, known := l.producers[thread]
		l.producers[thread] = c + n
		l.mu.Unlock()
		if known && c+n <= max {
			continue
		}
		prefix := producerPrefix(thread)
		it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper(prefix)})
		if err != nil {
			continue
		}
		type used struct {
			key []byte
			at  uint64
		}
		var all []used
		for it.First(); it.Valid(); it.Next() {
			lb, err := stream.DecodeLastBatch(it.Value())
			all = append(all, used{append([]byte(nil), it.Key()...), lb.Used})
			_ = err // one that cannot be read is the first to go (Used 0)
		}
		if err := errors.Join(it.Error(), it.Close()); err != nil {
			continue
		}
		if len(all) > max {
			sort.Slice(all, func(i, j int) bool { return all[i].at < all[j].at })
			b := l.db.NewBatch()
			for _, u := range all[:len(all)-max] {
				_ = b.Delete(u.key, nil)
			}
			if b.Commit(pebble.NoSync) == nil {
				l.prunedProducers.Add(uint64(len(all) - max))
				all = all[len(all)-max:]
			}
			_ = b.Close()
		}
		l.mu.Lock()
		l.producers[thread] = len(all)
		l.mu.Unlock()
	}
}

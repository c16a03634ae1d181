package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/agentstream/agentstream/server"
	"github.com/redis/rueidis"
)

// The producers' last batches (server.ProducerLog). A thread's producers
// are a hash beside its stream, PREFIX:{THREAD}:producers, one field per
// producer (server.ProducerKey) whose value names its last batch:
// "BATCH COUNT FIRST N EPOCH USED" (the batch's number and size, the seq
// of its first event, how many of its events the stream holds, their
// epoch, and when it was last used, Unix ms). A producer's event is
// written by producedScript, which adds it to the stream and updates the
// producer's field in one step, so that any node that reads the hash
// finds exactly the events the stream holds: a retry on another node,
// after this one died, appends nothing twice, and a batch cut short is
// completed from where it stopped. A batch's events have consecutive
// seqs (the server publishes a batch under the thread's lock), so the
// value stays small however large the batch.

// producedScript adds a producer's event to a thread's stream (KEYS[1]:
// XADD MINID ARGV[2] ARGV[3], id ARGV[1], field e ARGV[4], and src ARGV[5]
// when not empty) and records the producer's batch (KEYS[2], field
// ARGV[6], value ARGV[7]); past ARGV[8] producers the one used longest
// ago is forgotten; unless ARGV[9] is empty, the event is published on
// that channel, the thread's (see appendScript). It returns the stream
// entry's id, or XADD's error.
var producedScript = `
local add = {'XADD', KEYS[1], 'MINID', ARGV[2], ARGV[3], ARGV[1], 'e', ARGV[4]}
if ARGV[5] ~= '' then
  add[#add + 1] = 'src'
  add[#add + 1] = ARGV[5]
end
local id = redis.call(unpack(add))
if ARGV[9] ~= '' then
  redis.call('SPUBLISH', ARGV[9], ARGV[4])
end
if redis.call('HSET', KEYS[2], ARGV[6], ARGV[7]) == 1 and redis.call('HLEN', KEYS[2]) > tonumber(ARGV[8]) then
  local all = redis.call('HGETALL', KEYS[2])
  local oldest, at = nil, nil
  for i = 1, #all, 2 do
    local used = tonumber(string.match(all[i + 1], '(%d+)$')) or 0
    if at == nil or used < at then
      oldest, at = all[i], used
    end
  end
  redis.call('HDEL', KEYS[2], oldest)
end
return id`

// producedMark is the value of a producer's field once the stream holds
// e, event index by.Index of its batch.
func producedMark(e *server.Event, by *server.ProducedBy, usedMillis int64) string {
	first := e.Seq - uint64(by.Index)
	return fmt.Sprintf("%d %d %d %d %s %d", by.Batch, by.Count, first, by.Index+1, e.Epoch(), usedMillis)
}

// parseMark reads a producer's field.
func parseMark(v string) (server.LastBatch, error) {
	f := strings.Fields(v)
	if len(f) != 6 {
		return server.LastBatch{}, fmt.Errorf("redisstore: a producer's last batch reads %q", v)
	}
	var nums [5]uint64
	for i, j := range []int{0, 1, 2, 3, 5} {
		n, err := strconv.ParseUint(f[j], 10, 64)
		if err != nil {
			return server.LastBatch{}, fmt.Errorf("redisstore: a producer's last batch reads %q", v)
		}
		nums[i] = n
	}
	batch, count, first, n, used := nums[0], nums[1], nums[2], nums[3], nums[4]
	if n > count || count > 1<<20 {
		return server.LastBatch{}, fmt.Errorf("redisstore: a producer's last batch reads %q", v)
	}
	lb := server.LastBatch{Batch: batch, Count: int(count), Used: used}
	for i := uint64(0); i < n; i++ {
		lb.Seqs = append(lb.Seqs, first+i)
		lb.EventIDs = append(lb.EventIDs, f[4]+"-"+itoa(first+i))
	}
	return lb, nil
}

// AppendProduced implements server.ProducerLog: e is queued for Redis as
// Append does, and written with its producer's record.
func (l *Log) AppendProduced(ctx context.Context, thread string, e *server.Event, by server.ProducedBy) error {
	return l.append(thread, e, &by)
}

// LastBatch implements server.ProducerLog: what the thread's hash says of
// the producer's last batch (its events that the stream holds).
func (l *Log) LastBatch(ctx context.Context, thread, producer string) (server.LastBatch, bool, error) {
	c := l.e.c
	ctx, cancel := context.WithTimeout(ctx, l.opts.ReadTimeout)
	defer cancel()
	v, err := c.Do(ctx, c.B().Hget().Key(l.e.key(thread, "producers")).Field(producer).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return server.LastBatch{}, false, nil
	}
	if err != nil {
		l.fail(err)
		return server.LastBatch{}, false, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	lb, err := parseMark(v)
	if err != nil {
		return server.LastBatch{}, false, err
	}
	return lb, true, nil
}

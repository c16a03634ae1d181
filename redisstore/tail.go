package redisstore

import (
	"context"

	"github.com/redis/rueidis"
)

// A thread's stream is only as good as the Redis that holds it: a Redis
// that restarted from an older copy of its data (an append-only file
// missing its last second after a machine crash, a snapshot, a replica
// promoted behind its master) may have lost the tail of a stream whose
// events clients already saw under their ids. The node writing the thread
// still knows where it was and goes on above it; but a node that takes
// the thread over reads the stream's head from Redis and would give those
// ids to other events. So each writer records, in the thread's :writer
// hash, the run id of the Redis instance it writes to (INFO's run_id,
// new at every start of redis-server, read by a script on the instance
// itself: on a cluster, the master of the thread's slot, which a failover
// changes); a node taking a thread over compares it with the instance
// that holds the thread now (ClaimTail), and when they
// differ the thread goes on in a new epoch, which every later writer
// shares: its ids can name no event of the old one, and a cursor of the
// old epoch gets the reset notice.

// instanceID is the Lua that reads the run id of the Redis instance a
// script runs on (the master of the thread's slot on a cluster) into rid:
// nil for one that does not say.
const instanceID = `local rid = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
`

// recordWriterScript: KEYS[1] a thread's :writer hash, ARGV[1] its TTL
// (ms): records the instance the thread's events are written to now. A
// writer sends it with a thread's events once per renewal interval, and
// for every thread again after Redis could not be reached.
var recordWriterScript = instanceID + `if rid then redis.call('HSET', KEYS[1], 'rid', rid) end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1`

// claimTailScript: KEYS[1] the thread's :writer hash; ARGV a fresh
// epoch, the key's TTL (ms). When the hash names the instance the script
// runs on, the epoch a takeover set under it ("" if none); otherwise it
// records the instance and the fresh epoch and returns that. An instance
// that does not say its run id: "" (nothing to compare).
var claimTailScript = rueidis.NewLuaScript(instanceID + `
if not rid then
  return ''
end
if redis.call('HGET', KEYS[1], 'rid') == rid then
  return redis.call('HGET', KEYS[1], 'epoch') or ''
end
redis.call('HSET', KEYS[1], 'rid', rid, 'epoch', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return ARGV[1]
`)

// ClaimTail implements server.TailClaimer: a node that takes over writing
// thread learns the epoch to write it in: "" to go on in the stream's
// own, or a new one (proposed, or one another takeover set since the
// instance started) when the instance that holds the stream is not the
// one its last writer wrote to.
func (l *Log) ClaimTail(ctx context.Context, thread, proposed string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, l.opts.ReadTimeout)
	defer cancel()
	epoch, err := claimTailScript.Exec(ctx, l.e.c, []string{l.e.key(thread, "writer")}, []string{proposed, itoa(uint64(l.e.ttlMillis()))}).ToString()
	if err != nil {
		l.fail(err)
		return "", err
	}
	return epoch, nil
}

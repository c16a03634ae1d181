package redisstore

import (
	"context"
	"strings"

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
// new at every start of redis-server); a node taking a thread over
// compares it with the instance it talks to now (ClaimTail), and when they
// differ the thread goes on in a new epoch, which every later writer
// shares: its ids can name no event of the old one, and a cursor of the
// old epoch gets the reset notice.

// runID is the run id of the Redis the engine last asked, "" before it
// could ask.
func (e *Engine) runID() string {
	if p := e.rid.Load(); p != nil {
		return *p
	}
	return ""
}

// refreshRunID asks Redis for its run id (INFO server) and reports
// whether it changed.
func (e *Engine) refreshRunID(ctx context.Context) (string, bool, error) {
	info, err := e.c.Do(ctx, e.c.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return "", false, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(line, "run_id:"); ok {
			id := strings.TrimSpace(v)
			old := e.rid.Swap(&id)
			changed := old == nil || *old != id
			if changed {
				e.ridGen.Add(1)
			}
			return id, changed, nil
		}
	}
	return "", false, nil
}

// claimTailScript: KEYS[1] the thread's :writer hash; ARGV the current
// run id, a fresh epoch, the key's TTL (ms). When the hash names the
// current instance, the epoch a takeover set under it ("" if none);
// otherwise it records the instance and the fresh epoch and returns that.
var claimTailScript = rueidis.NewLuaScript(`
if redis.call('HGET', KEYS[1], 'rid') == ARGV[1] then
  return redis.call('HGET', KEYS[1], 'epoch') or ''
end
redis.call('HSET', KEYS[1], 'rid', ARGV[1], 'epoch', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return ARGV[2]
`)

// ClaimTail implements server.TailClaimer: a node that takes over writing
// thread learns the epoch to write it in: "" to go on in the stream's
// own, or a new one (proposed, or one another takeover set since the
// instance started) when the instance that holds the stream is not the
// one its last writer wrote to.
func (l *Log) ClaimTail(ctx context.Context, thread, proposed string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, l.opts.ReadTimeout)
	defer cancel()
	rid, _, err := l.e.refreshRunID(ctx)
	if err != nil {
		l.fail(err)
		return "", err
	}
	if rid == "" {
		return "", nil // a Redis that does not say: nothing to compare
	}
	epoch, err := claimTailScript.Exec(ctx, l.e.c, []string{l.e.key(thread, "writer")}, []string{rid, proposed, itoa(uint64(l.e.ttlMillis()))}).ToString()
	if err != nil {
		l.fail(err)
		return "", err
	}
	return epoch, nil
}

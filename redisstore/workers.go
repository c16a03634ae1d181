package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/agentstream/agentstream/server"
	"github.com/redis/rueidis"
)

// The worker directory (server.WorkerDirectory): which nodes have remote
// workers for an assistant, so that a run.start arriving at any node runs
// where a worker of its assistant is connected.
//
//   - PREFIX:{assistant:ID}:workers is a hash: a field per node whose
//     workers serve assistant ID, holding "ROOM EXPIRES": how many more
//     runs they take (less the runs waiting for one) and, in Redis's clock
//     (ms), when the entry lapses unless the node writes it again. A node
//     writes its entries every lease renewal and soon after its workers
//     change (one connects or is lost, takes or ends a run), deletes the
//     entries of assistants it no longer serves, and all of its entries
//     when it closes. A dead node's entries lapse within LeaseTTL.
//   - A run.start of an assistant the node has no worker for goes to the
//     live entry with the most room (ties at random): the run's lease is
//     taken there, so the worker's events go straight from its node to
//     the thread's stream, and cancels, answers and injected input reach
//     the run there as they reach any run (forwarded to its lease holder).
var _ server.WorkerDirectory = (*Cluster)(nil)

func (c *Cluster) workersKey(assistant string) string {
	return c.e.prefix + ":{assistant:" + assistant + "}:workers"
}

// publishWorkersScript writes a node's entry (ARGV[1] the node, ARGV[2]
// its room, ARGV[3] the entry's life in ms), dating it by Redis's clock.
var publishWorkersScript = rueidis.NewLuaScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. (now + tonumber(ARGV[3])))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1`)

// liveWorkersScript returns the live entries as node, room pairs, and
// deletes the lapsed ones.
var liveWorkersScript = rueidis.NewLuaScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local room, exp = string.match(all[i + 1], '^(%-?%d+) (%d+)$')
  if room and tonumber(exp) > now then
    out[#out + 1] = all[i]
    out[#out + 1] = room
  else
    redis.call('HDEL', KEYS[1], all[i])
  end
end
return out`)

// LocateWorkers implements server.WorkerDirectory.
func (c *Cluster) LocateWorkers(ctx context.Context, assistant string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	pairs, err := liveWorkersScript.Exec(ctx, c.e.c, []string{c.workersKey(assistant)}, nil).AsStrSlice()
	if err != nil {
		c.fail(err)
		return "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	best, bestRoom, ties := "", 0, 0
	for i := 0; i+1 < len(pairs); i += 2 {
		var room int
		if _, err := fmt.Sscan(pairs[i+1], &room); err != nil {
			continue
		}
		switch {
		case best == "" || room > bestRoom:
			best, bestRoom, ties = pairs[i], room, 1
		case room == bestRoom:
			ties++
			if rand.IntN(ties) == 0 {
				best = pairs[i]
			}
		}
	}
	return best, nil
}

// WorkersChanged implements server.WorkerDirectory: the node's entries
// are written again soon (by the cluster's loop).
func (c *Cluster) WorkersChanged() {
	select {
	case c.workersChanged <- struct{}{}:
	default:
	}
}

// workersLoop writes this node's entries every lease renewal interval and
// soon after its workers change, until the cluster closes. It is a
// goroutine of its own so that writing them (which may wait on a slow
// Redis) never delays the renewal of the run leases.
func (c *Cluster) workersLoop() {
	defer close(c.workersDone)
	tick := time.NewTicker(c.keyTTL() / 3)
	defer tick.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tick.C:
		case <-c.workersChanged:
		}
		c.publishWorkers()
	}
}

// publishWorkers writes this node's entries and deletes those of the
// assistants its workers no longer serve. A node without workers, which
// had none, sends nothing.
func (c *Cluster) publishWorkers() {
	if c.srv == nil {
		return
	}
	room := c.srv.WorkerRoom()
	if len(room) == 0 && len(c.published) == 0 {
		return
	}
	life := fmt.Sprint(c.opts.LeaseTTL.Milliseconds())
	var stmts []rueidis.LuaExec
	for a, n := range room {
		stmts = append(stmts, rueidis.LuaExec{Keys: []string{c.workersKey(a)}, Args: []string{c.opts.Node, fmt.Sprint(n), life}})
	}
	ctx, cancel := c.ctx()
	defer cancel()
	if len(stmts) > 0 {
		for _, r := range publishWorkersScript.ExecMulti(ctx, c.e.c, stmts...) {
			c.fail(r.Error())
		}
	}
	for a := range c.published {
		if _, ok := room[a]; !ok {
			c.fail(c.e.c.Do(ctx, c.e.c.B().Hdel().Key(c.workersKey(a)).Field(c.opts.Node).Build()).Error())
		}
	}
	c.published = room
}

// unpublishWorkers deletes this node's entries (it is closing; the
// workers loop has ended).
func (c *Cluster) unpublishWorkers() {
	ctx, cancel := c.ctx()
	defer cancel()
	for a := range c.published {
		c.fail(c.e.c.Do(ctx, c.e.c.B().Hdel().Key(c.workersKey(a)).Field(c.opts.Node).Build()).Error())
	}
	c.published = nil
}

// Yield implements server.WorkerDirectory.
func (c *Cluster) Yield(ctx context.Context, node, thread string) (bool, error) {
	if node == c.opts.Node {
		return c.yield(thread), nil
	}
	b, err := c.ask(ctx, node, thread, nil, true)
	if err != nil {
		return false, err
	}
	var y yieldReply
	if err := json.Unmarshal(b, &y); err != nil {
		return false, err
	}
	return y.Yielded, nil
}

// yieldReply answers a yield request.
type yieldReply struct {
	Yielded bool `json:"yielded"`
}

// yield gives up this node's lease on the thread unless it has a run or a
// queued run there, once its events are all in Redis (waiting a little
// for them), and reports whether the lease is free of this node.
func (c *Cluster) yield(thread string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.ForwardTimeout/2)
	defer cancel()
	if !awaitFlushed(ctx, c.opts.Flushed, thread) {
		return false
	}
	if c.srv.RunActive(thread) {
		return false
	}
	c.mu.Lock()
	delete(c.held, thread)
	c.mu.Unlock()
	c.release(thread)
	return true
}

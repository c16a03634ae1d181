package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/redis/rueidis"
)

// DefaultLeaseTTL is how long a node's run lease on a thread lasts without
// renewal (ClusterOptions.LeaseTTL's default): when a node dies, its runs
// end with a failed lifecycle this long after, at most.
const DefaultLeaseTTL = 10 * time.Second

// ClusterOptions configure a Cluster.
type ClusterOptions struct {
	// Node names this node (random when empty).
	Node string
	// LeaseTTL bounds how long a dead node's run lease lasts
	// (DefaultLeaseTTL): its key lives LeaseTTL less a reap interval,
	// renewed every third of that.
	LeaseTTL time.Duration
	// ForwardTimeout bounds a command forwarded to another node (5s).
	ForwardTimeout time.Duration
	// OnError, when set, hears of failed Redis commands.
	OnError func(error)
	// Flushed, when set, says whether the log has sent all of a thread's
	// events to Redis (Log.Flushed): a lease is given up only then, so
	// that the node that takes it next finds the run's end in the stream
	// (and does not take the run for one of a dead node).
	Flushed func(thread string) bool
}

// Cluster is the server.Cluster on Redis.
//
//   - A thread's run lease is the key PREFIX:{THREAD}:lease holding the
//     node's name, taken with SET NX PX (a Lua script that also renews it
//     for its holder), renewed while the node has a run or a queued run on
//     the thread, and deleted (only by its holder) once it has none. Its
//     expiry is LeaseTTL less a reap interval (LeaseTTL/5), renewed every
//     third of that; a lease found gone while its holder runs the thread
//     (Redis was away longer than that, or restarted empty) is taken again
//     by its holder: a run outlives an outage of any length unless another
//     node took the thread meanwhile (then it is fenced).
//   - The threads whose lease a node holds for a run are in the sorted set
//     PREFIX:running, scored by when their lease expires unrenewed.
//   - Commands for a run that arrive at another node are forwarded over
//     pub/sub: a request on the holder's channel PREFIX:{node:NAME}:cmd,
//     the answer on the asker's PREFIX:{node:NAME}:reply.
//   - Every LeaseTTL/5 a node looks at the threads of PREFIX:running whose
//     lease expired, and at those it follows whose run, on another node,
//     has not ended; when such a thread's lease is gone (its node died),
//     the first node to take the lease publishes the run's failed
//     lifecycle (server.FailLostRun), and the thread takes new runs. So a
//     dead node's runs fail within LeaseTTL of its last renewal, whether
//     or not anybody watches them. A node does this only once Redis has
//     answered it for a whole LeaseTTL: after an outage, the runs' own
//     nodes take their leases back first.
type Cluster struct {
	e    *Engine
	opts ClusterOptions
	srv  server.RunHost
	sub  *subscriber

	mu      sync.Mutex
	held    map[string]time.Time // threads whose lease this node holds, and when it last took it (Acquire)
	waiting map[string]chan []byte
	// failedAt is when a Redis command of the cluster last failed to
	// reach Redis: the reaper waits a LeaseTTL after it.
	failedAt time.Time
	wg       sync.WaitGroup // forwarded commands being carried out

	// The worker directory (workers.go): a poke when this node's workers
	// change, and the room last written (the loop's alone).
	workersChanged chan struct{}
	workersDone    chan struct{} // closed when workersLoop has ended
	published      map[string]int
	stop           chan struct{}
	done           chan struct{}
}

var _ server.Cluster = (*Cluster)(nil)

// Cluster returns the engine's run sharing for this node: a server's
// Cluster, started with the server's RunHost and closed with it (the
// engine New makes does both).
func (e *Engine) Cluster(opts ClusterOptions) *Cluster {
	if opts.Node == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		opts.Node = hex.EncodeToString(b[:])
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = DefaultLeaseTTL
	}
	if opts.ForwardTimeout <= 0 {
		opts.ForwardTimeout = 5 * time.Second
	}
	c := &Cluster{e: e, opts: opts, held: map[string]time.Time{}, waiting: map[string]chan []byte{},
		stop: make(chan struct{}), done: make(chan struct{}), workersChanged: make(chan struct{}, 1), workersDone: make(chan struct{})}
	c.sub = newSubscriber(e, c.message, opts.OnError)
	c.sub.change(c.cmdChannel(opts.Node), true)
	c.sub.change(c.replyChannel(), true)
	return c
}

// Start connects and starts renewing leases for the server srv.
func (c *Cluster) Start(srv server.RunHost) {
	c.srv = srv
	c.sub.start()
	go c.loop()
	go c.workersLoop() // apart from loop: a slow Redis must not delay the leases' renewal
}

// Close stops renewing, gives up the leases this node holds (so that the
// threads take runs elsewhere at once; runs still going are cancelled by
// the server's Close), and stops answering forwarded commands.
func (c *Cluster) Close() {
	close(c.stop)
	<-c.done
	<-c.workersDone
	c.unpublishWorkers()
	c.sub.close()
	c.wg.Wait()
	c.mu.Lock()
	held := c.held
	c.held = map[string]time.Time{}
	c.mu.Unlock()
	for th := range held {
		c.release(th)
	}
}

// Node implements server.Cluster.
func (c *Cluster) Node() string { return c.opts.Node }

func (c *Cluster) cmdChannel(node string) string { return c.e.prefix + ":{node:" + node + "}:cmd" }
func (c *Cluster) replyChannel() string          { return c.e.prefix + ":{node:" + c.opts.Node + "}:reply" }

func (c *Cluster) fail(err error) {
	if err != nil && c.opts.OnError != nil && !rueidis.IsRedisNil(err) {
		c.opts.OnError(err)
	}
}

func (c *Cluster) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 2*time.Second)
}

// acquireScript takes a free lease, renews it for its holder, and returns
// the holder. A lease with no expiry (set by hand, or by a deployment that
// does not expire its leases) is given the lease time from now, as if its
// holder had just taken it: it ends then unless renewed, never wedging
// its thread.
var acquireScript = rueidis.NewLuaScript(`
local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  v = ARGV[1]
elseif v == ARGV[1] or redis.call('PTTL', KEYS[1]) == -1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if v == ARGV[1] and ARGV[4] ~= 'publish' then
  local t = redis.call('TIME')
  redis.call('ZADD', KEYS[2], t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[2]), ARGV[3])
end
return v`)

// renewScript renews a lease for its holder, or takes it again when it
// is gone (Redis was away past its expiry, or lost it), and records the
// thread in the running set (KEYS[2]) until the lease would expire; 1 when
// renewed, 0 when another node holds it.
var renewScript = rueidis.NewLuaScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
elseif not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
else
  return 0
end
if ARGV[4] == 'idle' then
  redis.call('ZREM', KEYS[2], ARGV[3])
else
  local t = redis.call('TIME')
  redis.call('ZADD', KEYS[2], t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[2]), ARGV[3])
end
return 1`)

// releaseScript deletes a lease for its holder only, and takes the thread
// out of the running set (KEYS[2]) when it is not another node's.
var releaseScript = rueidis.NewLuaScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] or not v then
  redis.call('ZREM', KEYS[2], ARGV[2])
end
if v == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

// On one Redis a thread's lease is PREFIX:{THREAD}:lease and the running
// set, which the reaper reads, is PREFIX:running. A script that takes a
// lease also records the thread in the running set, and on a Redis
// Cluster both keys must be on one slot: there the threads are spread
// over runBuckets buckets, each with its own running set, and a thread's
// lease lives with its bucket's (PREFIX:{run:B}:lease:THREAD and
// PREFIX:{run:B}:running); the reaper reads every bucket's set.

// runBuckets is the number of running sets on a Redis Cluster: enough to
// spread them over the masters of a large cluster.
const runBuckets = 64

func (c *Cluster) sharded() bool { return c.e.c.Mode() == rueidis.ClientModeCluster }

func (c *Cluster) bucket(thread string) uint16 { return slotOf(thread) % runBuckets }

func (c *Cluster) leaseKey(thread string) string {
	if c.sharded() {
		return fmt.Sprintf("%s:{run:%d}:lease:%s", c.e.prefix, c.bucket(thread), thread)
	}
	return c.e.key(thread, "lease")
}

// runningKey is the running set thread is recorded in.
func (c *Cluster) runningKey(thread string) string {
	if c.sharded() {
		return fmt.Sprintf("%s:{run:%d}:running", c.e.prefix, c.bucket(thread))
	}
	return c.e.prefix + ":running"
}

// runningKeys is every running set.
func (c *Cluster) runningKeys() []string {
	if !c.sharded() {
		return []string{c.e.prefix + ":running"}
	}
	keys := make([]string, runBuckets)
	for b := range keys {
		keys[b] = fmt.Sprintf("%s:{run:%d}:running", c.e.prefix, b)
	}
	return keys
}

// keyTTL is how long a lease key lives unrenewed: LeaseTTL less a reap
// interval, so that a dead node's runs fail within LeaseTTL.
func (c *Cluster) keyTTL() time.Duration { return c.opts.LeaseTTL - c.reapEvery() }

// reapEvery is how often the reaper looks for the runs of dead nodes.
func (c *Cluster) reapEvery() time.Duration { return c.opts.LeaseTTL / 5 }

func (c *Cluster) ttlArg() string { return fmt.Sprint(c.keyTTL().Milliseconds()) }

// recentFailure reports whether a command failed to reach Redis within
// the last LeaseTTL.
func (c *Cluster) recentFailure() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Since(c.failedAt) < c.opts.LeaseTTL
}

// slow notes an answer asked for at asked that took longer than a lease
// renewal interval as a failure to reach Redis: a Redis that stalled that
// long may have let leases expire that their nodes could not renew.
func (c *Cluster) slow(asked time.Time) {
	if now := time.Now(); now.Sub(asked) > c.keyTTL()/3 {
		c.mu.Lock()
		c.failedAt = now
		c.mu.Unlock()
	}
}

// unreachable notes a command that did not reach Redis.
func (c *Cluster) unreachable(err error) {
	if _, isRedis := rueidis.IsRedisErr(err); err != nil && !isRedis && !rueidis.IsRedisNil(err) {
		c.mu.Lock()
		c.failedAt = time.Now()
		c.mu.Unlock()
	}
}

// Acquire implements server.Cluster.
func (c *Cluster) Acquire(thread string) (string, error) { return c.acquire(thread, "run") }

// AcquireToPublish implements server.PublishLeaser: the lease without an
// entry in the running set, so that a node that dies holding it for a
// producer's batches has no run failed on the thread.
func (c *Cluster) AcquireToPublish(thread string) (string, error) {
	return c.acquire(thread, "publish")
}

func (c *Cluster) acquire(thread, purpose string) (string, error) {
	ctx, cancel := c.ctx()
	defer cancel()
	keys, args := []string{c.leaseKey(thread), c.runningKey(thread)}, []string{c.opts.Node, c.ttlArg(), thread, purpose}
	holder, err := acquireScript.Exec(ctx, c.e.c, keys, args).ToString()
	if _, isRedis := rueidis.IsRedisErr(err); err != nil && !isRedis && ctx.Err() == nil {
		// A connection that died with a restarted Redis fails its first
		// command; taking the lease is idempotent for its taker: once more.
		holder, err = acquireScript.Exec(ctx, c.e.c, keys, args).ToString()
	}
	if err != nil {
		c.unreachable(err)
		c.fail(err)
		return "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if holder == c.opts.Node {
		// Kept at least a LeaseTTL from now (renew): a producer
		// publishing batch after batch keeps the lease while it publishes.
		c.mu.Lock()
		c.held[thread] = time.Now()
		c.mu.Unlock()
	}
	return holder, nil
}

// Holds implements server.LeaseHolder.
func (c *Cluster) Holds(thread string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.held[thread]
	return ok
}

// Holder implements server.Cluster.
func (c *Cluster) Holder(thread string) (string, error) {
	ctx, cancel := c.ctx()
	defer cancel()
	v, err := c.e.c.Do(ctx, c.e.c.B().Get().Key(c.leaseKey(thread)).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return "", nil
	}
	if err != nil {
		c.fail(err)
		return "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return v, nil
}

func (c *Cluster) release(thread string) {
	ctx, cancel := c.ctx()
	defer cancel()
	c.fail(releaseScript.Exec(ctx, c.e.c, []string{c.leaseKey(thread), c.runningKey(thread)}, []string{c.opts.Node, thread}).Error())
}

// loop renews and gives up leases, and looks for runs of dead nodes.
func (c *Cluster) loop() {
	defer close(c.done)
	renew := time.NewTicker(c.keyTTL() / 3)
	defer renew.Stop()
	reap := time.NewTicker(c.reapEvery())
	defer reap.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-renew.C:
			c.renew()
		case <-reap.C:
			c.reap()
		}
	}
}

// renew renews the leases of the threads with a run here, and gives up
// the others (after a lease's first TTL, so that a run being started
// keeps the lease it was given). All of it in pipelined batches: a node
// with thousands of runs renews them in a few round trips, well within a
// lease's life.
func (c *Cluster) renew() {
	c.mu.Lock()
	held := make(map[string]time.Time, len(c.held))
	for th, at := range c.held {
		held[th] = at
	}
	c.mu.Unlock()
	var keep, drop []string
	active := map[string]bool{}
	for th, at := range held {
		run := c.srv.RunActive(th)
		if run || time.Since(at) < c.opts.LeaseTTL || (c.opts.Flushed != nil && !c.opts.Flushed(th)) {
			keep = append(keep, th)
			active[th] = run
		} else {
			drop = append(drop, th)
		}
	}
	c.mu.Lock()
	for _, th := range drop {
		delete(c.held, th)
	}
	c.mu.Unlock()
	for i := 0; i < len(keep); i += 1000 {
		part := keep[i:min(i+1000, len(keep))]
		stmts := make([]rueidis.LuaExec, len(part))
		for j, th := range part {
			// Only a thread with a run is in the running set: a lease held
			// idle (a run just ended, a producer's batches) has no run for
			// the reaper to fail if this node dies.
			purpose := "idle"
			if active[th] {
				purpose = "run"
			}
			stmts[j] = rueidis.LuaExec{Keys: []string{c.leaseKey(th), c.runningKey(th)}, Args: []string{c.opts.Node, c.ttlArg(), th, purpose}}
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.keyTTL()/3)
		for j, r := range renewScript.ExecMulti(ctx, c.e.c, stmts...) {
			th := part[j]
			n, err := r.AsInt64()
			c.unreachable(err)
			c.fail(err)
			// Lost to another node, which may be running the thread now:
			// this node's run stops. A lease that could not be renewed
			// because Redis is away is kept: nobody can take it while
			// Redis is away, and once it is back this node takes it again
			// (renewScript) before any node reaps it.
			if err == nil && n == 0 {
				c.fail(fmt.Errorf("the run lease of thread %s is another node's now: its run here is stopped", th))
				c.mu.Lock()
				delete(c.held, th)
				c.mu.Unlock()
				c.srv.Fence(th)
			}
		}
		cancel()
	}
	for i := 0; i < len(drop); i += 1000 {
		part := drop[i:min(i+1000, len(drop))]
		stmts := make([]rueidis.LuaExec, len(part))
		for j, th := range part {
			stmts[j] = rueidis.LuaExec{Keys: []string{c.leaseKey(th), c.runningKey(th)}, Args: []string{c.opts.Node, th}}
		}
		ctx, cancel := c.ctx()
		for _, r := range releaseScript.ExecMulti(ctx, c.e.c, stmts...) {
			c.fail(r.Error())
		}
		cancel()
	}
}

// reap ends the runs of dead nodes: the threads of the running set whose
// lease expired, and the followed threads whose run has not ended, when
// their lease is gone. The leases are looked up in pipelined batches. It
// does nothing until Redis has answered this node for a whole LeaseTTL
// (the runs' own nodes take their leases back after an outage first).
func (c *Cluster) reap() {
	if c.recentFailure() {
		return
	}
	asked := time.Now()
	ctx, cancel := c.ctx()
	sets := c.runningKeys()
	reads := make(rueidis.Commands, len(sets))
	now := fmt.Sprint(time.Now().UnixMilli())
	for i, k := range sets {
		reads[i] = c.e.c.B().Zrangebyscore().Key(k).Min("-inf").Max(now).Limit(0, 1000).Build()
	}
	var expired []string
	var err error
	for _, r := range c.e.c.DoMulti(ctx, reads...) {
		ths, rerr := r.AsStrSlice()
		if rerr != nil {
			err = rerr
			break
		}
		expired = append(expired, ths...)
	}
	cancel()
	c.unreachable(err)
	c.fail(err)
	c.slow(asked)
	if err != nil || c.recentFailure() {
		return
	}
	threads := c.srv.RemoteRuns(0)
	seen := make(map[string]bool, len(threads))
	for _, th := range threads {
		seen[th] = true
	}
	for _, th := range expired {
		if !seen[th] {
			seen[th] = true
			threads = append(threads, th)
		}
	}
	for i := 0; i < len(threads); i += 1000 {
		part := threads[i:min(i+1000, len(threads))]
		cmds := make(rueidis.Commands, len(part))
		for j, th := range part {
			cmds[j] = c.e.c.B().Exists().Key(c.leaseKey(th)).Build()
		}
		asked := time.Now()
		ctx, cancel := c.ctx()
		res := c.e.c.DoMulti(ctx, cmds...)
		cancel()
		c.slow(asked)
		for _, r := range res {
			c.unreachable(r.Error())
		}
		if c.recentFailure() {
			return // the answers may be from a Redis that was away
		}
		for j, r := range res {
			n, err := r.AsInt64()
			if err != nil || n != 0 {
				continue
			}
			th := part[j]
			if h, err := c.Acquire(th); err == nil && h == c.opts.Node {
				found := c.srv.FailLostRun(th, c.keyTTL())
				if found == server.LostRunFailed {
					c.fail(fmt.Errorf("thread %s: its run's node stopped renewing its lease; the run is failed", th))
				}
				if !c.srv.RunActive(th) {
					// Taken to look, not to run: give it back at once, so
					// that the thread's next run starts where it is asked.
					c.mu.Lock()
					delete(c.held, th)
					c.mu.Unlock()
					c.release(th)
					if found == server.LostRunUnsure {
						c.lookAgain(th)
					}
				}
			}
		}
	}
}

// lookAgain puts a thread back in the running set, due now, for the next
// reap to look at it again: releasing the lease took it out, and a node
// that does not follow the thread's run (RemoteRuns) would otherwise never
// fail it.
func (c *Cluster) lookAgain(thread string) {
	ctx, cancel := c.ctx()
	defer cancel()
	c.fail(c.e.c.Do(ctx, c.e.c.B().Zadd().Key(c.runningKey(thread)).ScoreMember().ScoreMember(float64(time.Now().UnixMilli()), thread).Build()).Error())
}

// request is a command forwarded to another node; reply is its answer.
type request struct {
	ID      string          `json:"id"`
	Reply   string          `json:"reply"`
	Thread  string          `json:"thread"`
	Command json.RawMessage `json:"command,omitempty"` // absent: a run-state or yield request
	Yield   bool            `json:"yield,omitempty"`   // give up an idle lease (Yield)
}

// runState answers a run-state request.
type runState struct {
	Status     string                    `json:"status"`
	Interrupts []server.PendingInterrupt `json:"interrupts,omitempty"`
}

type reply struct {
	ID       string          `json:"id"`
	Response json.RawMessage `json:"response"`
}

// Forward implements server.Cluster.
func (c *Cluster) Forward(ctx context.Context, node, thread string, cmd *protocol.ClientCommand) (*protocol.CommandResponse, error) {
	id := cmd.Value.GetID()
	raw, err := json.Marshal(cmd)
	if err != nil {
		return nil, protocol.NewError(&id, protocol.ErrorCodeUnavailable, "forwarding the command: %v", err)
	}
	b, err := c.ask(ctx, node, thread, raw, false)
	if err != nil {
		return nil, protocol.NewError(&id, protocol.ErrorCodeUnavailable, "%v", err)
	}
	resp, e := decodeResponse(b, cmd)
	if e != nil {
		return nil, e
	}
	return resp, nil
}

// ForwardRunState implements server.Cluster.
func (c *Cluster) ForwardRunState(ctx context.Context, node, thread string) (string, []server.PendingInterrupt, error) {
	resp, err := c.ask(ctx, node, thread, nil, false)
	if err != nil {
		return "", nil, err
	}
	var rs runState
	if err := json.Unmarshal(resp, &rs); err != nil {
		return "", nil, err
	}
	return rs.Status, rs.Interrupts, nil
}

// ask sends a request to node (a command, a yield, or else a run-state
// request) and waits for its answer.
func (c *Cluster) ask(ctx context.Context, node, thread string, command json.RawMessage, yield bool) ([]byte, error) {
	var rid [8]byte
	_, _ = rand.Read(rid[:])
	req := request{ID: hex.EncodeToString(rid[:]), Reply: c.replyChannel(), Thread: thread, Command: command, Yield: yield}
	b, _ := json.Marshal(req)
	ch := make(chan []byte, 1)
	c.mu.Lock()
	c.waiting[req.ID] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiting, req.ID)
		c.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(ctx, c.opts.ForwardTimeout)
	defer cancel()
	n, err := c.e.c.Do(ctx, c.e.c.B().Spublish().Channel(c.cmdChannel(node)).Message(rueidis.BinaryString(b)).Build()).AsInt64()
	if err != nil {
		return nil, fmt.Errorf("forwarding to node %s: %w", node, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("node %s, which runs the thread, is not listening (it may have stopped; its lease expires within %s)", node, c.opts.LeaseTTL)
	}
	select {
	case resp := <-ch:
		return resp, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("node %s, which runs the thread, did not answer within %s", node, c.opts.ForwardTimeout)
	}
}

// decodeResponse reads a forwarded command's answer, with its result in
// the type the command's result has here.
func decodeResponse(b []byte, cmd *protocol.ClientCommand) (*protocol.CommandResponse, *protocol.ErrorResponse) {
	var probe struct {
		Type   string          `json:"type"`
		Result json.RawMessage `json:"result"`
	}
	id := cmd.Value.GetID()
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, protocol.NewError(&id, protocol.ErrorCodeUnknownError, "a forwarded command's answer: %v", err)
	}
	if probe.Type == "error" {
		var e protocol.ErrorResponse
		if err := json.Unmarshal(b, &e); err != nil {
			return nil, protocol.NewError(&id, protocol.ErrorCodeUnknownError, "a forwarded command's answer: %v", err)
		}
		return nil, &e
	}
	var resp protocol.CommandResponse
	if err := json.Unmarshal(b, &resp); err != nil {
		return nil, protocol.NewError(&id, protocol.ErrorCodeUnknownError, "a forwarded command's answer: %v", err)
	}
	var typed any
	switch cmd.Value.(type) {
	case *protocol.ClientCommandRunStart:
		typed = &protocol.RunResult{}
	case *protocol.ClientCommandRunCancel:
		typed = &protocol.RunCancelResult{}
	case *protocol.ClientCommandStateFork:
		typed = &protocol.StateForkResult{}
	case *protocol.ClientCommandAgentGetTree:
		typed = &protocol.AgentResult{}
	}
	if typed != nil {
		if err := json.Unmarshal(probe.Result, typed); err == nil {
			switch v := typed.(type) {
			case *protocol.RunResult:
				resp.Result = *v
			case *protocol.RunCancelResult:
				resp.Result = *v
			case *protocol.StateForkResult:
				resp.Result = *v
			case *protocol.AgentResult:
				resp.Result = *v
			}
		}
	}
	return &resp, nil
}

func (c *Cluster) message(m rueidis.PubSubMessage) {
	switch m.Channel {
	case c.replyChannel():
		var r reply
		if err := json.Unmarshal([]byte(m.Message), &r); err != nil {
			c.fail(err)
			return
		}
		c.mu.Lock()
		ch := c.waiting[r.ID]
		c.mu.Unlock()
		if ch != nil {
			select {
			case ch <- r.Response:
			default:
			}
		}
	default:
		var req request
		if err := json.Unmarshal([]byte(m.Message), &req); err != nil {
			c.fail(err)
			return
		}
		select {
		case <-c.stop:
			return
		default:
		}
		c.wg.Add(1)
		go func() { // a command may wait on the thread; the subscription must not
			defer c.wg.Done()
			c.serve(req)
		}()
	}
}

// serve carries out a forwarded command and sends its answer back.
func (c *Cluster) serve(req request) {
	var out any
	if req.Yield {
		out = yieldReply{Yielded: c.yield(req.Thread)}
	} else if len(req.Command) == 0 {
		var rs runState
		rs.Status, rs.Interrupts = c.srv.RunState(req.Thread)
		out = rs
	} else if cmd, errResp := protocol.DecodeCommand(req.Command); errResp == nil {
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.ForwardTimeout)
		resp, err := c.srv.DoForwarded(ctx, req.Thread, cmd)
		cancel()
		if err != nil {
			id := cmd.Value.GetID()
			out = protocol.ErrorResponseOf(&id, err)
		} else {
			out = resp
		}
	} else {
		out = errResp
	}
	b, err := json.Marshal(out)
	if err != nil {
		c.fail(err)
		return
	}
	r, _ := json.Marshal(reply{ID: req.ID, Response: b})
	ctx, cancel := c.ctx()
	defer cancel()
	c.fail(c.e.c.Do(ctx, c.e.c.B().Spublish().Channel(req.Reply).Message(rueidis.BinaryString(r)).Build()).Error())
}

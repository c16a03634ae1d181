// Package redisstore is agentstream's Redis engine: the threads of every
// node that shares one Redis kept there, so that they survive a restart
// and any node serves any thread (`agentstream serve --redis
// redis://HOST:PORT/DB`). [New] returns an [Engine], a server.Engine:
// server.New(server.Config{Engine: eng}) takes its stores and starts it.
//
// What it owns:
//   - [Log], a server.DurableLog: each thread's events in a Redis Stream
//     (entry id "SEQ-0", the event's JSON in field "e", and for an
//     ingested event the ingest entry's id in field "src"), trimmed to about
//     the per-thread caps, in events and in bytes, and published on the
//     thread's sharded channel. The newest events are also kept in memory
//     (a server.MemoryLog, under the total buffer budget), so live replays
//     cost no round trip; appends reach Redis from a few writer goroutines
//     (LogOptions.Writers), each serving a share of the threads, in
//     pipelined batches, each thread's in order, without making the
//     publisher wait but for a full write queue. Replays older than what
//     memory holds are read from the stream. A thread created again (a
//     restart) continues its stream: same epoch, next sequence number.
//   - [State], a server.StateStore: values (JSON) and the owner in a hash,
//     checkpoints in a list capped at MaxCheckpoints; its errors reach the
//     caller.
//   - [Live], a server.Watcher: the node follows the threads it holds on
//     their sharded channels and ingests what other nodes publish.
//   - [Cluster], a server.Cluster: one node at a time runs a thread's
//     runs, under a lease; commands for the run are forwarded to it; the
//     runs of a node that died are ended as failed by another. It is also
//     the server.WorkerDirectory (workers.go): which nodes have remote
//     workers for an assistant, so a run starts where its worker is.
//   - [Ingest]: producers' events XADDed to an ingest stream, read through
//     one consumer group by one node at a time and appended to their
//     threads once each, in order (ingest.go).
//   - [Health]: a Redis that stops answering makes the server unavailable
//     (streams end, commands are refused) until it answers again.
//
// Every key of a thread starts with PREFIX:{THREAD}: (the braces make a
// Redis Cluster keep them on one slot) and expires after the engine's TTL
// unless written again, which is how idle threads are evicted from Redis;
// a node forgetting a thread (--thread-ttl) drops only its memory.
//
// The client is github.com/redis/rueidis, chosen against go-redis by
// measurement (tools/redisbench; the figures are in docs/redis.md): its
// automatic pipelining of concurrent commands is what the engine's many
// threads publishing at once need.
//
// # Caveats
//
// The engine's behaviour under faults (a Redis outage during a run, a node
// killed with events not yet written) is documented in the README: events
// published while Redis is unreachable can reach only the running node's
// own clients.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// DefaultTTL is how long a thread's keys live after their last write.
const DefaultTTL = 24 * time.Hour

// Engine is a connection to Redis and the key layout the log and the
// state share.
type Engine struct {
	c      rueidis.Client
	prefix string
	ttl    time.Duration
	opts   Options       // New's
	parts  parts         // what Stores made and Start started
	ridGen atomic.Uint64 // counts the writes that recovered: every thread records its instance again (tail.go)
}

// Open connects to the Redis at rawURL: redis://[user:password@]HOST:PORT/DB
// (rediss:// for TLS), with an optional ?prefix=NAME for the keys
// (default "agentstream"). It fails unless Redis answers a PING within
// ctx. ttl is how long an idle thread's keys live (DefaultTTL when 0).
func Open(ctx context.Context, rawURL string, ttl time.Duration) (*Engine, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Parse's error holds the URL, password and all.
		return nil, errors.New("redis URL: it does not parse as redis://[user:password@]HOST:PORT/DB (not shown: it may hold a password)")
	}
	prefix := u.Query().Get("prefix")
	if prefix == "" {
		prefix = "agentstream"
	}
	q := u.Query()
	q.Del("prefix")
	u.RawQuery = q.Encode()
	// A Redis Cluster is named by several seed nodes, comma separated:
	// the client learns the rest from them.
	seeds := strings.Split(u.Host, ",")
	u.Host = seeds[0]
	opt, err := rueidis.ParseURL(u.String())
	if err != nil {
		msg := err.Error()
		if pw, ok := u.User.Password(); ok && pw != "" {
			msg = strings.ReplaceAll(msg, pw, "REDACTED")
			msg = strings.ReplaceAll(msg, url.UserPassword("", pw).String()[1:], "REDACTED")
		}
		return nil, fmt.Errorf("redis URL: %s", msg)
	}
	for _, s := range seeds[1:] {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return nil, fmt.Errorf("redis URL: seed %q: %w", s, err)
		}
		opt.InitAddress = append(opt.InitAddress, s)
	}
	opt.DisableCache = true // no client-side caching: the engine reads what it wrote
	opt.Dialer.Timeout = 5 * time.Second
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("redis %s: %w", u.Host, err)
	}
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis %s: %w", u.Host, err)
	}
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	e := &Engine{c: c, prefix: prefix, ttl: ttl}
	return e, nil
}

// Ping reports whether Redis answers (for readiness). On a Redis
// Cluster it asks every node the client knows and reports an error only
// when none answers: a shard failing over makes its own threads' commands
// fail and retry until its replica takes over, and does not make the
// whole server unavailable (which would end every stream of every
// thread); a dead node stays in the client's map until it refreshes it.
func (e *Engine) Ping(ctx context.Context) error {
	if e.c.Mode() != rueidis.ClientModeCluster {
		return e.c.Do(ctx, e.c.B().Ping().Build()).Error()
	}
	nodes := e.c.Nodes()
	errs := make(chan error, len(nodes))
	for _, n := range nodes {
		go func() { errs <- n.Do(ctx, n.B().Ping().Build()).Error() }()
	}
	var err error
	for range nodes {
		if err = <-errs; err == nil {
			return nil
		}
	}
	if err == nil {
		err = errors.New("no node of the cluster is known")
	}
	return err
}

func (e *Engine) key(thread, what string) string {
	return e.prefix + ":{" + thread + "}:" + what
}

// ErrUnavailable wraps the errors of a Redis that cannot be reached.
var ErrUnavailable = errors.New("redis unavailable")

func (e *Engine) ttlMillis() int64 { return e.ttl.Milliseconds() }

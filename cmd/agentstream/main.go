// Command agentstream runs the agentstream server, and the tools that go
// with it.
//
// Usage:
//
//	agentstream serve [flags]
//	agentstream tail [flags] URL THREAD
//	agentstream load --url http://127.0.0.1:2024 [flags]
//	agentstream token --secret-file F --sub alice [--admin] [--ttl 1h]
//	agentstream version
//	agentstream probe [URL]
//
// serve runs the server (in memory, or on Redis with --redis); tail follows
// a thread in the terminal, as a person reads it; load measures a running
// server over loopback (see its package internal/loadtest); token mints an HS256 JWT
// for a server run with --auth-hs256-secret-file (for development).
//
// Every flag can also be set with an environment variable: --addr is
// AGENTSTREAM_ADDR, --log-level is AGENTSTREAM_LOG_LEVEL, and so on. Run
// `agentstream serve -h` for the list.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/cmd/agentstream/internal/loadtest"
	"github.com/agentstream/agentstream/diskstore"
	"github.com/agentstream/agentstream/edge"
	"github.com/agentstream/agentstream/internal/termsafe"
	"github.com/agentstream/agentstream/playground"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/redisstore"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/agentstream/agentstream/transport/langgraph"
	"github.com/agentstream/agentstream/transport/sse"
	"github.com/agentstream/agentstream/transport/ws"
	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil))
}

// config is what `serve` is told.
type config struct {
	addr           string
	bufferEvents   int
	bufferBytes    int
	bufferTotal    int64
	memoryLimit    int64
	gcBuffers      bool
	memoryTarget   int64
	queueBytes     int
	queueTotal     int64
	heartbeat      time.Duration
	writeInterval  time.Duration
	allowedOrigins string
	maxAssistants  int
	// The Platform API's run webhooks.
	webhookAllowPrivate bool
	webhookTimeout      time.Duration
	maxPendingWebhooks  int
	threadExpiryCheck   time.Duration
	tlsCert             string
	tlsKey              string
	logLevel            string
	logFormat           string
	builtins            bool
	shutdownTimeout     time.Duration
	idleRelease         time.Duration
	pprof               bool

	maxThreads, maxQueuedRuns, maxSubscriptions, maxCheckpoints      int
	maxThreadsPerPrincipal, maxRunsPerMinute, maxStreamsPerPrincipal int
	authFailureRate                                                  float64
	authFailureBurst                                                 int
	threadTTL, readHeaderTimeout, idleTimeout, bodyTimeout           time.Duration
	allowedHosts                                                     string
	trustedProxies                                                   string
	proxies                                                          transport.TrustedProxies // --trusted-proxies, read
	commandRate                                                      float64
	commandBurst                                                     int
	httpCommandRate                                                  float64
	httpCommandBurst                                                 int
	httpStreamRate                                                   float64
	httpStreamBurst                                                  int
	commandBytesRate                                                 float64
	commandMaxDepth, commandMaxValues                                int
	ingestMaxEvents, ingestMaxEventBytes, ingestBurst                int
	ingestMaxBatchBytes                                              int64
	ingestRate                                                       float64
	maxProducersPerThread                                            int
	maxStoreItems                                                    int
	maxThreadMetadataBytes, maxStateBytes                            int
	upstreamTimeout                                                  time.Duration
	ingestAckTimeout                                                 time.Duration
	ingestFastAck                                                    bool
	maxWorkers, maxRunsPerWorker, maxQueuedWorkerRuns                int
	workerLease                                                      time.Duration
	insecure                                                         bool
	auth                                                             authFlags
	metricsAddr                                                      string
	redisURL                                                         string
	ingestStream, ingestGroup, ingestDeadLetter                      string
	profiles, instanceAIAssistant                                    string
	upstream, upstreamAPIKey, upstreamIdentity                       string
	dataDir                                                          string
	dataMinFree, dataMaxEvents, dataMaxThreadBytes, dataMaxBytes     int64
	dataVerify                                                       bool
	dataMaxAge, dataCommitEvery                                      time.Duration
	dataMaxPending                                                   int
	dataRepair                                                       bool
	bufferEventsSet                                                  bool // --buffer-events was given
	upstreamHeaders                                                  []string
	ingestMaxWait                                                    time.Duration
	nodeID                                                           string
	leaseTTL                                                         time.Duration
	playground                                                       bool
	redisWriteQueue                                                  int
	redisWriteQueueBytes                                             int64
	redisWriters                                                     int
	redisQueueWait                                                   time.Duration
	redisWriteGather                                                 time.Duration
	redisWriteThrough                                                bool
}

// run is the command; ready, when not nil, receives the listening address.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, ready chan<- string) int {
	if len(args) > 0 && (args[0] == "version" || args[0] == "--version" || args[0] == "-version") {
		fmt.Fprintln(stdout, version())
		return 0
	}
	if len(args) > 0 && args[0] == "probe" {
		return probe(ctx, args[1:], stderr)
	}
	if len(args) > 0 && args[0] == "load" {
		return load(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "token" {
		return token(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "tail" {
		return tail(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "data" {
		return data(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "bare" {
		return bare(ctx, args[1:], stderr)
	}
	if len(args) == 0 || args[0] != "serve" {
		fmt.Fprintln(stderr, "usage: agentstream serve [flags] | agentstream version | agentstream probe [URL] | agentstream tail URL THREAD [flags] | agentstream load [flags] | agentstream token [flags] | agentstream data --data-dir DIR stats|compact|export THREAD | agentstream bare [--addr]   (-h for the flags)")
		return 2
	}
	var c config
	fs := flag.NewFlagSet("agentstream serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:2024", "listen address (LangGraph's local server port)")
	fs.IntVar(&c.bufferEvents, "buffer-events", server.DefaultBufferEvents, "replay buffer per thread, in events")
	fs.IntVar(&c.bufferBytes, "buffer-bytes", server.DefaultBufferBytes, "replay buffer per thread, in bytes")
	fs.Int64Var(&c.bufferTotal, "buffer-total-bytes", server.DefaultBufferTotalBytes(), "all replay buffers together, in bytes, each event counting its JSON plus "+fmt.Sprint(server.EventOverhead)+
		" (default: an eighth of this machine's memory, 64 MiB to 2 GiB); past it the least recently active threads' buffers are dropped first")
	fs.Int64Var(&c.memoryLimit, "memory-limit", 0, "the Go runtime's soft memory limit, in bytes (0: none, or GOMEMLIMIT's): past it the runtime collects more often, which bounds the resident memory a growing heap leaves; set it above --buffer-total-bytes plus what the connections take")
	fs.BoolVar(&c.gcBuffers, "gc-exclude-buffers", true, "let the heap grow between collections by GOGC percent of what is live outside the replay buffers only, not of the buffers too, so that resident memory is about the buffers plus the rest of the process rather than twice both (the collector runs more often when the buffers are large; false: GOGC as given)")
	fs.Int64Var(&c.memoryTarget, "memory-target", 0, "hold the process's memory to this many bytes (0: no target), as Redis's maxmemory does: the runtime's soft memory limit is set to it, and the replay buffers' budget is lowered below --buffer-total-bytes while the process would need more, dropping the least recently active threads' history first; needs --gc-exclude-buffers")
	fs.IntVar(&c.queueBytes, "queue-bytes", server.DefaultQueueBytes, "unread events (replays included) a connection may hold, in bytes, before it is cut off")
	fs.Int64Var(&c.queueTotal, "queue-total-bytes", server.DefaultQueueTotalBytes, "unread events all connections together may hold, in bytes; past it the connections holding more than their share are cut off first")
	fs.DurationVar(&c.heartbeat, "heartbeat", sse.DefaultHeartbeat, "SSE heartbeat interval")
	c.writeInterval = ws.DefaultWriteInterval
	fs.Var((*intervalFlag)(&c.writeInterval), "write-interval", "least time between two writes of events to one connection; events arriving meanwhile go out together; while the server uses over 90% of its CPU and falls behind it doubles, up to 400ms, and it halves once the halved interval would fit in the CPU (\"off\": no pacing)")
	fs.StringVar(&c.allowedOrigins, "allowed-origins", transport.LoopbackOrigins, "comma-separated host patterns (\"*\": all; \"loopback\": pages served from localhost, 127.0.0.1 or [::1] on any port) whose browser pages may use the server across origins: WebSockets, and CORS for the HTTP routes; empty: the server's own origin only")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "serve HTTPS (and HTTP/2) with this PEM certificate chain; needs --tls-key")
	fs.StringVar(&c.tlsKey, "tls-key", "", "the PEM private key of --tls-cert")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "console", "console or json")
	fs.BoolVar(&c.playground, "playground", true, "serve the playground page at / (a page to watch and steer threads, embedded in the binary)")
	fs.BoolVar(&c.builtins, "builtins", true, "register the built-in assistants (echo, demo, firehose)")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", defaultShutdownTimeout, "how long a graceful shutdown may take")
	fs.DurationVar(&c.idleRelease, "idle-release", server.DefaultIdleRelease, "how long an idle thread keeps its replay buffer")
	fs.BoolVar(&c.pprof, "pprof", false, "serve Go's profiler at /debug/pprof/ (for diagnosing; do not expose)")
	fs.IntVar(&c.maxThreads, "max-threads", server.DefaultMaxThreads, "threads held at once; more are refused (resource_exhausted)")
	fs.IntVar(&c.maxThreadsPerPrincipal, "max-threads-per-principal", 0, "threads one principal may have created that this node holds, admins exempt (0: a tenth of --max-threads); more are refused (429 resource_exhausted)")
	fs.IntVar(&c.maxRunsPerMinute, "max-runs-per-minute", server.DefaultMaxRunsPerMinute, "runs one principal may start a minute on this node (bursts of as many), admins exempt; more are refused (resource_exhausted)")
	fs.IntVar(&c.maxStreamsPerPrincipal, "max-streams-per-principal", transport.DefaultMaxStreamsPerPrincipal, "SSE streams and WebSockets one principal may have open at once, admins exempt; more get 429 resource_exhausted")
	fs.Float64Var(&c.authFailureRate, "auth-failure-rate", transport.DefaultAuthFailureRate, "failed authentications a second one IP address may make on average; past it its requests get 429 before their credential is read")
	fs.IntVar(&c.authFailureBurst, "auth-failure-burst", transport.DefaultAuthFailureBurst, "failed authentications one IP address may make at once above --auth-failure-rate")
	fs.DurationVar(&c.threadTTL, "thread-ttl", server.DefaultThreadTTL, "how long a thread with no run and no subscriber is kept at all (in memory: its state and checkpoints go with it)")
	fs.IntVar(&c.maxQueuedRuns, "max-queued-runs", server.DefaultMaxQueuedRuns, "runs queued behind a thread's active run (multitask_strategy enqueue)")
	fs.IntVar(&c.maxSubscriptions, "max-subscriptions", server.DefaultMaxSessionSubscriptions, "subscriptions on one WebSocket or in-process connection")
	fs.IntVar(&c.maxCheckpoints, "max-checkpoints", server.DefaultMaxCheckpoints, "checkpoints kept per thread, oldest dropped first")
	fs.DurationVar(&c.readHeaderTimeout, "read-header-timeout", 10*time.Second, "time to read a request's headers")
	fs.DurationVar(&c.bodyTimeout, "body-timeout", transport.DefaultBodyTimeout, "time to read a command's or stream request's body (408 after)")
	fs.DurationVar(&c.idleTimeout, "idle-timeout", 2*time.Minute, "how long a kept-alive HTTP connection may wait for its next request")
	fs.StringVar(&c.trustedProxies, "trusted-proxies", "", "comma-separated addresses and CIDR prefixes of reverse proxies whose Forwarded or X-Forwarded-For header names the client, for per-client limits, the failed-authentication throttle and logs (from any other peer those headers are ignored; default: none)")
	fs.StringVar(&c.allowedHosts, "allowed-hosts", "", "comma-separated Host name patterns served besides the loopback names, on a loopback address (protects against DNS rebinding; \"*\": any)")
	fs.Float64Var(&c.commandRate, "command-rate", ws.DefaultCommandRate, "commands a second one WebSocket may send on average; more are answered rate_limited")
	fs.IntVar(&c.commandBurst, "command-burst", ws.DefaultCommandBurst, "commands one WebSocket may send at once above --command-rate")
	fs.Float64Var(&c.commandBytesRate, "command-bytes-rate", ws.DefaultCommandBytesRate, "bytes of commands a second one WebSocket may send on average (bursts of four times as much, and of one frame at least); more are answered rate_limited before they are decoded")
	fs.IntVar(&c.commandMaxDepth, "command-max-depth", protocol.DefaultMaxDepth, "the deepest nesting of arrays and maps in one command or stream request, on every route; deeper is refused before decoding")
	fs.IntVar(&c.commandMaxValues, "command-max-values", protocol.DefaultMaxValues, "the most values (arrays, maps, keys and scalars) in one command or stream request, on every route; more are refused before decoding")
	fs.Float64Var(&c.httpStreamRate, "http-stream-rate", transport.DefaultHTTPStreamRate, "streams a second one client (its principal with auth on, its IP address without) may open (SSE and WebSocket) on average; more get 429 rate_limited")
	fs.IntVar(&c.httpStreamBurst, "http-stream-burst", transport.DefaultHTTPStreamBurst, "streams one client may open at once above --http-stream-rate")
	fs.Float64Var(&c.httpCommandRate, "http-command-rate", transport.DefaultHTTPCommandRate, "commands a second one client (its principal with auth on, its IP address without) may send to POST /threads/{id}/commands on average; more get 429 rate_limited")
	fs.IntVar(&c.httpCommandBurst, "http-command-burst", transport.DefaultHTTPCommandBurst, "commands one client may send at once above --http-command-rate")
	fs.IntVar(&c.ingestMaxEvents, "ingest-max-events", transport.DefaultIngestMaxEvents, "the most events in one batch a producer publishes (POST /threads/{id}/events); more get 413")
	fs.IntVar(&c.ingestMaxEventBytes, "ingest-max-event-bytes", transport.DefaultIngestMaxEventBytes, "the largest event in a producer's batch; larger gets 413")
	fs.Int64Var(&c.ingestMaxBatchBytes, "ingest-max-batch-bytes", transport.DefaultIngestMaxBatchBytes, "the largest body of a producer's batch; larger gets 413")
	fs.Float64Var(&c.ingestRate, "ingest-rate", transport.DefaultIngestRate, "events a second one producer (its principal with auth on, its IP address without) may publish on average; a batch over it gets 429 and is not appended")
	fs.IntVar(&c.ingestBurst, "ingest-burst", transport.DefaultIngestBurst, "events one producer may publish at once above --ingest-rate (at least --ingest-max-events)")
	fs.DurationVar(&c.workerLease, "worker-lease", server.DefaultWorkerLease, "how long a remote worker may send nothing (a batch or a heartbeat) before it is lost and its runs fail")
	fs.IntVar(&c.maxWorkers, "max-workers", server.DefaultMaxWorkers, "remote workers connected at once")
	fs.IntVar(&c.maxRunsPerWorker, "max-runs-per-worker", server.DefaultMaxRunsPerWorker, "runs one remote worker serves at once, whatever it asks for")
	fs.IntVar(&c.maxQueuedWorkerRuns, "max-queued-worker-runs", server.DefaultMaxQueuedWorkerRuns, "runs of one assistant waiting for a free remote worker; past it run.start is refused")
	fs.DurationVar(&c.ingestAckTimeout, "ingest-ack-timeout", server.DefaultIngestAckTimeout, "with --data-dir: how long a producer's batch waits for its group commit to be synced before it is answered; past it 503 (retry with the same producer and batch number: nothing is appended twice), and a Platform API write for its sync before its 2xx (past it 503)")
	fs.BoolVar(&c.ingestFastAck, "ingest-fast-ack", false, "with --data-dir: answer a producer's batch once it is appended, before it is synced (lower latency; a crash may lose batches that were acknowledged)")
	fs.BoolVar(&c.webhookAllowPrivate, "webhook-allow-private", false, "let runs' webhooks (the LangGraph Platform API's) reach loopback, private and link-local addresses; without it such a webhook is refused")
	fs.DurationVar(&c.webhookTimeout, "webhook-timeout", langgraph.DefaultWebhookTimeout, "time for each attempt of a run's webhook (tried again after a 5xx, a 429 or no answer, 1 s, 2 s, 4 s apart)")
	fs.IntVar(&c.maxPendingWebhooks, "max-pending-webhooks", langgraph.DefaultMaxPendingWebhooks, "runs' webhooks waiting for their run's end or their delivery; a run asking for one past it is refused")
	fs.DurationVar(&c.threadExpiryCheck, "thread-expiry-check", server.DefaultThreadExpiryCheck, "how often the threads whose ttl (the LangGraph Platform API's thread ttl) ran out are deleted")
	fs.IntVar(&c.maxAssistants, "max-assistants", server.DefaultMaxAssistants, "assistants the LangGraph Platform API's clients create (/assistants), of every principal; a new one past it is refused")
	fs.IntVar(&c.maxStoreItems, "max-store-items", server.DefaultMaxStoreItems, "items the long-term store (the LangGraph Platform API's /store) holds, of every principal; a new item past it is refused")
	fs.IntVar(&c.maxThreadMetadataBytes, "max-thread-metadata-bytes", server.DefaultMaxThreadMetadataBytes, "the largest a thread's metadata may grow, as JSON, through the LangGraph Platform API (creations, copies, PATCH); past it the change is refused (413)")
	fs.IntVar(&c.maxStateBytes, "max-state-bytes", server.DefaultMaxStateBytes, "the largest a thread's values may grow, as JSON, through a client's state update (the LangGraph Platform API's POST /threads/{id}/state, a run's command.update); past it the update is refused (413)")
	fs.IntVar(&c.maxProducersPerThread, "max-producers-per-thread", server.DefaultMaxProducersPerThread, "producers a thread remembers the last batch of, so that a batch sent again appends nothing; past it the one used longest ago is forgotten")
	fs.BoolVar(&c.insecure, "insecure", false, "allow listening on a non-loopback address although nothing authenticates clients (no --auth-* flag)")
	c.auth.register(fs)
	fs.StringVar(&c.nodeID, "node-id", "", "with --redis: this node's name among the nodes that share the Redis (random when empty)")
	fs.IntVar(&c.redisWriters, "redis-writers", redisstore.DefaultWriters, "with --redis: how many pipelined batches of events may be on their way to Redis at once, each from a writer serving a share of the threads")
	fs.IntVar(&c.redisWriteQueue, "redis-write-queue", redisstore.DefaultWriteQueue, "with --redis: how many events may wait to be written to Redis; past it publishers wait (--redis-queue-wait), then their events are refused (agentstream_redis_events_dropped_total)")
	fs.Int64Var(&c.redisWriteQueueBytes, "redis-write-queue-bytes", redisstore.DefaultWriteQueueBytes, "with --redis: how many bytes of events (their JSON) may wait to be written to Redis; past it publishers wait as past --redis-write-queue")
	fs.DurationVar(&c.redisWriteGather, "redis-write-gather", 0, "with --redis: the least time between two batches of one writer: a busy node gathers events this long and sends fewer, larger batches (each costs Redis and the nodes system calls, whatever it carries), less CPU for more latency; a quiet one sends at once; 0 (the default) sends every batch at once")
	fs.BoolVar(&c.redisWriteThrough, "redis-write-through", true, "with --redis: deliver an event to clients, this node's too, only once Redis holds it, so no client sees an event Redis lost or gave to another writer; =false delivers to this node's clients first (one Redis round trip less latency, without that guarantee)")
	fs.DurationVar(&c.redisQueueWait, "redis-queue-wait", redisstore.DefaultQueueWait, "with --redis: how long a publisher waits, while Redis fails its writes or the write queue is full, before its event is refused and the run's emitter gets unavailable (the run then ends failed, which every client sees once Redis is back); the longest Redis outage a run outlives")
	fs.DurationVar(&c.leaseTTL, "lease-ttl", redisstore.DefaultLeaseTTL, "with --redis: how long a node's lease on a thread's runs lasts unrenewed; when a node dies, its runs end as failed this long after, at most")
	fs.StringVar(&c.profiles, "profiles", "", "other wires to serve beside the protocol's, comma-separated: minimal (POST /minimal/stream, the minimal token stream), jobs (/jobs/..., the job stream), instance-ai (/instance-ai/..., n8n's Instance AI chat), openai (/v1/chat/completions, /v1/responses, /v1/models: the OpenAI SDKs' wires, the model an assistant), langgraph (/threads, /assistants, /runs, /store...: the LangGraph Platform API, its threads, assistants, runs and their streams, and store, for the LangGraph SDKs and useStream); none by default")
	fs.BoolVar(&c.dataVerify, "data-verify", true, "with --data-dir: read every table of the store at start, so that damage in one is refused then, naming the file (costs a read of the whole store; data check does the same offline)")
	fs.Int64Var(&c.dataMinFree, "data-min-free", diskstore.DefaultMinFree, "with --data-dir: the free space, in bytes, below which no more events are taken (refused, /readyz says why) until space returns")
	fs.Int64Var(&c.dataMaxEvents, "data-max-events", diskstore.DefaultMaxEvents, "with --data-dir: each thread keeps at most this many events on disk, the oldest dropped first (-1: no cap)")
	fs.Int64Var(&c.dataMaxThreadBytes, "data-max-thread-bytes", 0, "with --data-dir: each thread keeps at most this many bytes of events on disk (compressed), the oldest dropped first (0: no cap)")
	fs.Int64Var(&c.dataMaxBytes, "data-max-bytes", 0, "with --data-dir: all threads together keep at most this many bytes of events on disk (compressed), the oldest of any thread dropped first (0: no cap)")
	fs.DurationVar(&c.dataCommitEvery, "data-commit-every", diskstore.DefaultCommitEvery, "with --data-dir: the longest an event waits for its group commit, one synced write of every event since the last; a crash (kill -9, power lost) loses at most this much (shorter: more syncs, more disk traffic beside the live path)")
	fs.BoolVar(&c.dataRepair, "data-repair", false, "with --data-dir: start on a store whose commit log the disk damaged, keeping every commit that can be read (the others' events are lost; the log says which); without it such a store is refused")
	fs.IntVar(&c.dataMaxPending, "data-max-pending", diskstore.DefaultMaxPending, "with --data-dir: the most events appended and not yet synced; past it a publisher waits up to 2 s for the disk, then is refused (a producer's batch: 503 with Retry-After; counted in agentstream_data_events_refused_behind_total)")
	fs.DurationVar(&c.dataMaxAge, "data-max-age", 0, "with --data-dir: events older than this are dropped (0: kept as long as their thread, --thread-ttl)")
	fs.StringVar(&c.dataDir, "data-dir", "", "keep threads (events, values, checkpoints, owners) on disk under this directory, so that they outlive a restart; empty: in memory")
	fs.StringVar(&c.upstream, "upstream", "", "edge mode: the LangGraph server (http://host:port) whose assistants run the threads; commands go to it and each thread in use holds one stream of it, fanned out here")
	fs.StringVar(&c.upstreamAPIKey, "upstream-api-key", "", "with --upstream: sent to it as X-Api-Key")
	fs.DurationVar(&c.upstreamTimeout, "upstream-timeout", edge.DefaultResponseTimeout, "with --upstream: how long a passed-through request waits for the head of the upstream's answer before it is answered 504 (a join waits for its run)")
	fs.StringVar(&c.upstreamIdentity, "upstream-identity-header", "", "with --upstream and authentication: the header that carries the caller's principal (its subject) with each command forwarded")
	fs.Func("upstream-header", "with --upstream: a header 'Name: value' sent with every request to it (repeatable)", func(v string) error {
		if name, _, ok := strings.Cut(v, ":"); !ok || strings.TrimSpace(name) == "" {
			return fmt.Errorf("%q is not Name: value", v)
		}
		c.upstreamHeaders = append(c.upstreamHeaders, v)
		return nil
	})
	fs.StringVar(&c.instanceAIAssistant, "instance-ai-assistant", "demo", "with --profiles instance-ai: the assistant a chat message runs (a built-in, or a remote worker's)")
	fs.StringVar(&c.ingestStream, "ingest-stream", "", "with --redis: a Redis stream producers XADD events to (fields thread and event); the nodes read it through one consumer group and append each event to its thread, once, in order; empty: none")
	fs.StringVar(&c.ingestGroup, "ingest-group", redisstore.DefaultIngestGroup, "with --ingest-stream: the consumer group the nodes read it through")
	fs.StringVar(&c.ingestDeadLetter, "ingest-dead-letter", "", "with --ingest-stream: the stream refused entries go to, with their reason (default: the ingest stream's name + \":dead\")")
	fs.DurationVar(&c.ingestMaxWait, "ingest-max-wait", redisstore.DefaultIngestMaxWait, "with --ingest-stream: how long an entry waits for its thread (written by another node's run, or Redis away) before it goes to the dead-letter stream")
	fs.StringVar(&c.redisURL, "redis", "", "keep threads in Redis so that they survive a restart: redis://[user:password@]HOST:PORT/DB (rediss:// for TLS; ?prefix=NAME for the keys, default agentstream); a Redis Cluster: its seed nodes, redis://HOST:PORT,HOST:PORT,...; empty: in memory")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "serve /metrics (and /healthz, /readyz) on this separate address, open; with auth on, /metrics on the main address is then for admins only as before")
	configPath := fs.String("config", "", "a TOML file setting these flags by name (AGENTSTREAM_CONFIG too); the command line wins over the environment, which wins over the file")
	printCfg := fs.Bool("print-config", false, "print the configuration in effect (every flag, from the file, the environment and the command line) as a config file, and exit")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	set, err := applySources(fs, *configPath)
	if err != nil {
		fmt.Fprintln(stderr, "agentstream:", err)
		return 2
	}
	if *printCfg {
		printConfig(stdout, fs, set)
		return 0
	}
	c.bufferEventsSet = set.given["buffer-events"]
	if err := c.check(); err != nil {
		fmt.Fprintln(stderr, "agentstream:", err)
		return 2
	}
	if c.proxies, err = transport.ParseTrustedProxies(c.trustedProxies); err != nil {
		fmt.Fprintln(stderr, "agentstream: --trusted-proxies:", err)
		return 2
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		fmt.Fprintln(stderr, "agentstream: --tls-cert and --tls-key go together")
		return 2
	}
	if c.upstream != "" && slices.Contains(splitList(c.profiles), transport.ProfileLangGraph) {
		fmt.Fprintln(stderr, "agentstream: --profiles langgraph serves agentstream's own threads; with --upstream the LangGraph Platform API's routes go to the upstream already")
		return 2
	}
	log, err := newLogger(c.logLevel, c.logFormat, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "agentstream:", err)
		return 2
	}
	if err := serve(ctx, c, log, ready); err != nil {
		var ns notStarted
		if errors.As(err, &ns) {
			log.Error().Err(ns.error).Msg("server did not start")
		} else {
			log.Error().Err(err).Msg("server stopped")
		}
		return 1
	}
	return 0
}

// isTerminal reports whether w is a terminal (NO_COLOR set says no).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && os.Getenv("NO_COLOR") == "" && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

func newLogger(level, format string, w io.Writer) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		return zerolog.Logger{}, fmt.Errorf("log level %q: %w", level, err)
	}
	switch format {
	case "json":
	case "console":
		// Colour only on a terminal: not in files, pipes or journald.
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339, NoColor: !isTerminal(w)}
	default:
		return zerolog.Logger{}, fmt.Errorf("log format %q is not console or json", format)
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

// logRedisHealth logs Redis lost (err) and back (nil).
func logRedisHealth(log zerolog.Logger, err error) {
	if err != nil {
		log.Error().Err(err).Msg("redis lost: streams end, commands are refused as unavailable until it is back")
	} else {
		log.Info().Msg("redis is back")
	}
}

// load runs the load tool against a running server.
func load(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("agentstream load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c loadtest.Config
	idle := fs.Int("idle", 0, "instead: open this many idle connections and report the server's memory per connection")
	settle := fs.Duration("settle", 3*time.Second, "with --idle: how long the connections stay idle before the server's memory is read")
	fs.StringVar(&c.URL, "url", "http://127.0.0.1:2024", "server base URL")
	fs.StringVar(&c.Transport, "transport", "sse", "sse or ws; with --wire, wire (the wire's own stream) or sse (the protocol's, on the same events)")
	fs.StringVar(&c.Wire, "wire", "", "measure another wire against the protocol's SSE: jobs (envelopes posted to /jobs/{id}/envelopes, read from /jobs/{id}/stream) or instance-ai (status events posted to /threads/{id}/events, read from /instance-ai/events/{id}); needs --source http and the server's --profiles")
	fs.IntVar(&c.Subscribers, "subs", 1000, "subscribers of the one thread")
	// With --threads, --rate is per thread.
	fs.IntVar(&c.Count, "count", 1000, "events to publish")
	fs.Float64Var(&c.Rate, "rate", 0, "events per second (0: as fast as possible)")
	fs.IntVar(&c.Size, "size", 100, "payload size in bytes")
	fs.IntVar(&c.ServerPID, "pid", 0, "server process id, for CPU and memory figures")
	fs.StringVar(&c.Source, "source", loadtest.SourceFirehose, "what publishes the events: firehose (the built-in assistant), worker (a remote worker this tool runs) or http (batches this tool posts to /threads/{id}/events)")
	subURLs := fs.String("sub-urls", "", "comma-separated base URLs of the nodes the subscribers connect to, spread over them (runs start at --url); default --url")
	sourceAddrs := fs.String("source-addrs", "", "comma-separated local addresses the subscribers connect from, spread over them (127.0.0.2,127.0.0.3,...: each gives another range of ephemeral ports, for more than about 28,000 connections to one server); default: the system's choice")
	otherPIDs := fs.String("other-pids", "", "comma-separated ids of more processes whose CPU counts as the server's (other nodes, redis-server)")
	threads := fs.Int("threads", 0, "instead: the many-conversations workload, this many threads (with --subs-per-thread, --rate per thread, --duration)")
	perThread := fs.Int("subs-per-thread", 2, "with --threads: subscribers of each thread")
	duration := fs.Duration("duration", 10*time.Second, "with --threads: how long each thread's run publishes")
	bareURL := fs.String("bare-url", "", "with --threads: also run the workload against the bare reference server at this URL (agentstream bare), alternated with --url, --rounds times each, and print both with their ratios")
	barePID := fs.Int("bare-pid", 0, "with --bare-url: the bare server's process id, for its CPU")
	centrifugo := fs.Bool("centrifugo", false, "with --threads: the nodes are Centrifugo's (v6, JSON protocol, insecure client mode): each thread a channel, its subscribers WebSocket clients of --sub-urls, its events published through the HTTP API at --url (POST /api/batch); see tools/centrifugo")
	rounds := fs.Int("rounds", 3, "with --bare-url: alternated runs against each")
	idleWait := fs.Duration("idle-wait", 0, "with --threads: wait this long after the runs, connections closed, and read the server's RSS and live heap per thread again (the heap needs --pprof, and a short --idle-release to see buffers go)")
	chat := fs.String("chat", "", "instead: runs of --model, each streamed to the client that started it, through openai (POST /v1/chat/completions; the server's --profiles openai) or sse (the protocol's stream and run.start): time to first token and server CPU per token")
	model := fs.String("model", "echo", "with --chat: the assistant (echo streams the input's words)")
	tokens := fs.Int("tokens", 200, "with --chat: words each run streams")
	runs := fs.Int("runs", 200, "with --chat: runs in all")
	concurrency := fs.Int("concurrency", 4, "with --chat: runs under way at once")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *chat != "" {
		r, err := loadtest.RunChat(ctx, loadtest.ChatConfig{URL: c.URL, Via: *chat, Model: *model, Tokens: *tokens, Runs: *runs, Concurrency: *concurrency, ServerPID: c.ServerPID})
		fmt.Fprintf(stdout, "chat through %s, %s: %s\n", *chat, *model, r)
		if err != nil {
			fmt.Fprintln(stderr, "agentstream load:", termsafe.String(err.Error()))
			return 1
		}
		return 0
	}
	c.SubscribeURLs = splitList(*subURLs)
	c.SourceAddrs = splitList(*sourceAddrs)
	for _, a := range c.SourceAddrs {
		if net.ParseIP(a) == nil {
			fmt.Fprintf(stderr, "agentstream load: --source-addrs: %q is not an IP address\n", termsafe.String(a))
			return 2
		}
	}
	for _, p := range splitList(*otherPIDs) {
		pid, err := strconv.Atoi(p)
		if err != nil {
			fmt.Fprintln(stderr, "agentstream load: --other-pids:", err)
			return 2
		}
		c.OtherPIDs = append(c.OtherPIDs, pid)
	}
	if *centrifugo && (*threads <= 0 || *bareURL != "") {
		fmt.Fprintln(stderr, "agentstream load: --centrifugo runs the many-conversations workload: it needs --threads, and no --bare-url")
		return 2
	}
	if *threads > 0 && *bareURL != "" {
		many := loadtest.ManyConfig{URL: c.URL, Transport: c.Transport, Threads: *threads, SubsPerThread: *perThread,
			Rate: c.Rate, Duration: *duration, Size: c.Size, ServerPID: c.ServerPID}
		cmp, err := loadtest.AgainstBare(ctx, many, *bareURL, *barePID, *rounds, func(name string, r loadtest.ManyResult) {
			fmt.Fprintf(stdout, "%s: %s\n", name, r)
		})
		if err != nil {
			fmt.Fprintln(stderr, "agentstream load:", termsafe.String(err.Error()))
			return 1
		}
		fmt.Fprintln(stdout, cmp)
		return 0
	}
	if *threads > 0 {
		r, err := loadtest.RunMany(ctx, loadtest.ManyConfig{URL: c.URL, Transport: c.Transport, Threads: *threads, SubsPerThread: *perThread,
			Rate: c.Rate, Duration: *duration, Size: c.Size, ServerPID: c.ServerPID, IdleWait: *idleWait, SubscribeURLs: c.SubscribeURLs, OtherPIDs: c.OtherPIDs, Centrifugo: *centrifugo})
		fmt.Fprintf(stdout, "%s, %d threads × %d subscribers, %g events/s each for %v: %s\n", c.Transport, *threads, *perThread, c.Rate, *duration, r)
		if err != nil {
			fmt.Fprintln(stderr, "agentstream load:", termsafe.String(err.Error()))
			return 1
		}
		return 0
	}
	if *idle > 0 {
		per, err := loadtest.IdleMemory(ctx, c.URL, c.Transport, *idle, c.ServerPID, *settle, c.SourceAddrs...)
		if err != nil {
			fmt.Fprintln(stderr, "agentstream load:", termsafe.String(err.Error()))
			return 1
		}
		fmt.Fprintf(stdout, "%s: %d idle connections: %.1f KB resident per connection\n", c.Transport, *idle, float64(per)/1024)
		return 0
	}
	r, err := loadtest.Run(ctx, c)
	if err != nil {
		fmt.Fprintln(stderr, "agentstream load:", termsafe.String(err.Error()))
		return 1
	}
	through := c.Transport
	if c.Wire != "" {
		through = c.Wire + " through " + c.Transport
	}
	fmt.Fprintf(stdout, "%s, %d subscribers, %d events of %d bytes from %s: %s\n", through, c.Subscribers, c.Count, c.Size, c.Source, r)
	return 0
}

// bare is `agentstream bare`: the reference server the many-conversations
// workload is measured against (loadtest.Bare).
func bare(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("agentstream bare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:2099", "listen address")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(stderr, "agentstream bare:", err)
		return 1
	}
	if err := loadtest.ServeBare(ctx, ln); err != nil {
		fmt.Fprintln(stderr, "agentstream bare:", err)
		return 1
	}
	return 0
}

// data is `agentstream data`: what an operator does with a --data-dir
// store while no server runs on it.
func data(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("agentstream data", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("data-dir", os.Getenv("AGENTSTREAM_DATA_DIR"), "the store (serve --data-dir)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: agentstream data --data-dir DIR stats [THREAD] | compact | export THREAD | check | repair")
		fs.PrintDefaults()
	}
	// Flags may come before the command, after it, or between its words.
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if *dir == "" || len(rest) == 0 || len(rest) > 2 || (rest[0] == "export" && len(rest) != 2) || ((rest[0] == "compact" || rest[0] == "check" || rest[0] == "repair") && len(rest) != 1) {
		fs.Usage()
		return 2
	}
	if _, err := os.Stat(*dir); err != nil {
		fmt.Fprintln(stderr, "agentstream data:", err)
		return 1
	}
	eng, err := diskstore.Open(diskstore.Options{Dir: *dir, MinFree: 1, Repair: rest[0] == "repair", Existing: true})
	switch {
	case errors.Is(err, diskstore.ErrTableDamaged):
		fmt.Fprintf(stderr, "agentstream data: %v\n%s\n", err, tableDamageHint)
		return 1
	case errors.Is(err, diskstore.ErrNotAStore):
		fmt.Fprintf(stderr, "agentstream data: %v\n", err)
		return 1
	case errors.Is(err, diskstore.ErrDamaged):
		fmt.Fprintf(stderr, "agentstream data: %v\n(agentstream data --data-dir %s repair keeps every commit that can be read)\n", err, *dir)
		return 1
	case err != nil:
		fmt.Fprintf(stderr, "agentstream data: %v (is a server running on it?)\n", err)
		return 1
	}
	defer eng.Close()
	switch rest[0] {
	case "stats":
		if len(rest) == 2 {
			st, err := eng.ThreadStats(rest[1])
			if err != nil {
				fmt.Fprintln(stderr, "agentstream data:", err)
				return 1
			}
			fmt.Fprintf(stdout, "events %d\nfirst %d\nlast %d\n", st.Events, st.First, st.Last)
			return 0
		}
		st, err := eng.Stats()
		if err != nil {
			fmt.Fprintln(stderr, "agentstream data:", err)
			return 1
		}
		fmt.Fprintf(stdout, "threads %d\nevents %d\nbytes %d\n", st.Threads, st.Events, st.Bytes)
	case "check":
		if err := eng.Check(); err != nil {
			fmt.Fprintf(stderr, "agentstream data: %v\n%s\n", err, tableDamageHint)
			return 1
		}
		fmt.Fprintln(stdout, "no damage found")
	case "repair":
		if err := eng.Check(); err != nil {
			fmt.Fprintf(stderr, "agentstream data: %v\n%s\n", err, tableDamageHint)
			return 1
		}
		if r := eng.Repaired(); r != "" {
			fmt.Fprintln(stdout, "repaired, these could not be read and are lost:", r)
		} else {
			fmt.Fprintln(stdout, "no damage found")
		}
	case "compact":
		if err := eng.Compact(ctx); err != nil {
			fmt.Fprintln(stderr, "agentstream data:", err)
			return 1
		}
	case "export":
		n, err := eng.Export(rest[1], stdout)
		if err != nil {
			fmt.Fprintln(stderr, "agentstream data:", err)
			return 1
		}
		if n == 0 {
			fmt.Fprintf(stderr, "agentstream data: thread %q has no events in %s\n", rest[1], *dir)
			return 1
		}
	default:
		fs.Usage()
		return 2
	}
	return 0
}

// tableDamageHint is what a data command says after a damaged table.
const tableDamageHint = "(repair writes the tree again without the keys that cannot be read, keeping the damaged files aside; or restore the store from a backup)"

// upstreamProxy passes the routes the edge does not serve to its
// upstream, or is nil without one.
func upstreamProxy(up *edge.Edge) http.Handler {
	if up == nil {
		return nil
	}
	return up.Proxy()
}

// upstreamState is the edge's state route, or nil without one.
func upstreamState(up *edge.Edge) func(context.Context, string, url.Values) (int, []byte, error) {
	if up == nil {
		return nil
	}
	return up.State
}

// logRequests logs each request at debug level.
func logRequests(next http.Handler, log zerolog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		next.ServeHTTP(w, r)
		log.Debug().Str("client", r.RemoteAddr).Str("method", r.Method).Str("path", r.URL.Path).Str("query", auth.Redact(r.URL.RawQuery)).Dur("took", time.Since(start)).Msg("request")
	})
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// isLoopback reports whether a listener's address is on loopback only.
func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// defaultShutdownTimeout is --shutdown-timeout's default.
const defaultShutdownTimeout = 10 * time.Second

// check refuses a zero or negative size or duration: in the libraries'
// options zero means "the default", which a command line states instead.
func (c config) check() error {
	if c.memoryTarget < 0 {
		return fmt.Errorf("--memory-target must be 0 (none) or more")
	}
	if c.memoryTarget > 0 && !c.gcBuffers {
		return fmt.Errorf("--memory-target needs --gc-exclude-buffers")
	}
	if c.maxThreadsPerPrincipal < 0 {
		return fmt.Errorf("--max-threads-per-principal must be 0 (a tenth of --max-threads) or more")
	}
	if c.memoryLimit < 0 {
		return fmt.Errorf("--memory-limit must be 0 (none) or more")
	}
	if c.redisWriters > 256 {
		return fmt.Errorf("--redis-writers must be at most 256")
	}
	if c.redisWriteGather < 0 || c.redisWriteGather > 100*time.Millisecond {
		return fmt.Errorf("--redis-write-gather must be between 0 and 100ms")
	}
	if c.dataCommitEvery > time.Second {
		return fmt.Errorf("--data-commit-every must be at most 1s")
	}
	for _, p := range splitList(c.profiles) {
		if !slices.Contains(transport.Profiles, p) {
			return fmt.Errorf("--profiles: unknown wire %q (known: %s)", p, strings.Join(transport.Profiles, ", "))
		}
	}
	if c.ingestStream != "" && c.redisURL == "" {
		return fmt.Errorf("--ingest-stream needs --redis: the stream is read from the Redis the threads are kept in")
	}
	for _, n := range []struct {
		flag string
		v    int64
	}{
		{"--buffer-events", int64(c.bufferEvents)}, {"--buffer-bytes", int64(c.bufferBytes)}, {"--buffer-total-bytes", c.bufferTotal}, {"--queue-bytes", int64(c.queueBytes)}, {"--queue-total-bytes", c.queueTotal},
		{"--heartbeat", int64(c.heartbeat)}, {"--idle-release", int64(c.idleRelease)}, {"--shutdown-timeout", int64(c.shutdownTimeout)},
		{"--max-threads", int64(c.maxThreads)}, {"--thread-ttl", int64(c.threadTTL)}, {"--max-queued-runs", int64(c.maxQueuedRuns)},
		{"--max-subscriptions", int64(c.maxSubscriptions)}, {"--command-burst", int64(c.commandBurst)}, {"--command-rate", int64(c.commandRate * 1000)}, {"--max-checkpoints", int64(c.maxCheckpoints)},
		{"--http-command-rate", int64(c.httpCommandRate * 1000)}, {"--http-command-burst", int64(c.httpCommandBurst)},
		{"--http-stream-rate", int64(c.httpStreamRate * 1000)}, {"--http-stream-burst", int64(c.httpStreamBurst)}, {"--command-bytes-rate", int64(c.commandBytesRate)},
		{"--command-max-depth", int64(c.commandMaxDepth)}, {"--command-max-values", int64(c.commandMaxValues)},
		{"--ingest-max-events", int64(c.ingestMaxEvents)}, {"--ingest-max-event-bytes", int64(c.ingestMaxEventBytes)}, {"--ingest-max-batch-bytes", c.ingestMaxBatchBytes},
		{"--ingest-rate", int64(c.ingestRate * 1000)}, {"--ingest-burst", int64(c.ingestBurst)}, {"--max-producers-per-thread", int64(c.maxProducersPerThread)}, {"--max-store-items", int64(c.maxStoreItems)}, {"--max-assistants", int64(c.maxAssistants)}, {"--webhook-timeout", int64(c.webhookTimeout)}, {"--max-pending-webhooks", int64(c.maxPendingWebhooks)}, {"--thread-expiry-check", int64(c.threadExpiryCheck)},
		{"--max-thread-metadata-bytes", int64(c.maxThreadMetadataBytes)}, {"--max-state-bytes", int64(c.maxStateBytes)}, {"--upstream-timeout", int64(c.upstreamTimeout)},
		{"--worker-lease", int64(c.workerLease)}, {"--max-workers", int64(c.maxWorkers)}, {"--max-runs-per-worker", int64(c.maxRunsPerWorker)}, {"--max-queued-worker-runs", int64(c.maxQueuedWorkerRuns)},
		{"--max-runs-per-minute", int64(c.maxRunsPerMinute)}, {"--max-streams-per-principal", int64(c.maxStreamsPerPrincipal)},
		{"--auth-failure-rate", int64(c.authFailureRate * 1000)}, {"--auth-failure-burst", int64(c.authFailureBurst)},
		{"--read-header-timeout", int64(c.readHeaderTimeout)}, {"--lease-ttl", int64(c.leaseTTL)}, {"--redis-write-queue", int64(c.redisWriteQueue)}, {"--redis-write-queue-bytes", c.redisWriteQueueBytes}, {"--redis-writers", int64(c.redisWriters)}, {"--redis-queue-wait", int64(c.redisQueueWait)}, {"--body-timeout", int64(c.bodyTimeout)}, {"--idle-timeout", int64(c.idleTimeout)},
		{"--data-commit-every", int64(c.dataCommitEvery)}, {"--ingest-ack-timeout", int64(c.ingestAckTimeout)}, {"--data-max-pending", int64(c.dataMaxPending)},
	} {
		if n.v <= 0 {
			return fmt.Errorf("%s must be more than 0", n.flag)
		}
	}
	return nil
}

// intervalFlag is --write-interval: a positive duration, or "off" for no
// pacing (the transports' NoPacing).
type intervalFlag time.Duration

func (f *intervalFlag) String() string {
	if time.Duration(*f) < 0 {
		return "off"
	}
	return time.Duration(*f).String()
}

func (f *intervalFlag) Set(s string) error {
	if s == "off" {
		*f = intervalFlag(ws.NoPacing)
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return fmt.Errorf("%q is not a positive duration or \"off\"", s)
	}
	*f = intervalFlag(d)
	return nil
}

func playgroundHandler(on bool) http.Handler {
	if !on {
		return nil
	}
	return playground.Handler()
}

// version says which build this is, from the build information Go keeps
// in the binary: the module's version ("(devel)" for a build from a
// checkout), the VCS revision and time with "+dirty" for uncommitted
// changes, and the Go version.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "agentstream (no build information)"
	}
	v := "agentstream " + bi.Main.Version
	var rev, at string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" && !strings.Contains(bi.Main.Version, rev) { // a pseudo-version names it already
		v += " " + rev
		if dirty {
			v += "+dirty"
		}
	}
	if at != "" {
		v += " " + at
	}
	return v + " " + bi.GoVersion
}

// notStarted is an error that kept the server from starting (an address
// it could not listen on), said as such rather than as a stop.
type notStarted struct{ error }

func (e notStarted) Unwrap() error { return e.error }

// probe asks URL (the local server's /readyz by default) and exits 0 on a
// 200, 1 otherwise: a container's health check, where the image holds
// nothing but this binary.
func probe(ctx context.Context, args []string, stderr io.Writer) int {
	target := "http://127.0.0.1:2024/readyz"
	if len(args) == 1 {
		target = args[0]
	} else if len(args) > 1 {
		fmt.Fprintln(stderr, "usage: agentstream probe [URL]")
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", target, nil)
	if err != nil {
		fmt.Fprintln(stderr, "agentstream probe:", err)
		return 2
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintln(stderr, "agentstream probe:", err)
		return 1
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		fmt.Fprintf(stderr, "agentstream probe: %s answered %d %s\n", target, resp.StatusCode, strings.TrimSpace(string(b)))
		return 1
	}
	return 0
}

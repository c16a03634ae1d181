package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/agentstream/agentstream/assistants"
	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/diskstore"
	"github.com/agentstream/agentstream/edge"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/redisstore"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/memgov"
	"github.com/agentstream/agentstream/transport"
	"github.com/agentstream/agentstream/transport/jobs"
	"github.com/agentstream/agentstream/transport/langgraph"
	"github.com/agentstream/agentstream/transport/sse"
	"github.com/agentstream/agentstream/transport/ws"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// closers are what serve opened, closed in reverse order by run.
type closers []func()

func (cs *closers) add(f func()) { *cs = append(*cs, f) }

// run closes everything added, the last first, once.
func (cs *closers) run() {
	for i := len(*cs) - 1; i >= 0; i-- {
		(*cs)[i]()
	}
	*cs = nil
}

// engine is the engine serve opened (nil: in memory), what /readyz asks
// it, and what it reports, by its own functions (openRedis, openDisk).
type engine struct {
	server.Engine
	ready func(context.Context) error
	// redis is the Redis engine, for --ingest-stream (nil on disk).
	redis *redisstore.Engine
	// disk is the disk engine, for what its start found.
	disk *diskstore.Engine
}

// serve runs the server until ctx ends: the engine, the edge and the
// server are built by their own functions, then the ingest and the HTTP
// handler; the listener is opened last. What was opened is closed in
// reverse order from one list on every return.
func serve(ctx context.Context, c config, log zerolog.Logger, ready chan<- string) error {
	if c.memoryLimit > 0 {
		debug.SetMemoryLimit(c.memoryLimit)
	}
	var open closers
	defer open.run()
	tlsConfig, err := c.tlsConfig()
	if err != nil {
		return err
	}
	actx, stopAuth := context.WithCancel(context.Background())
	open.add(stopAuth)
	authn, err := c.auth.build(actx)
	if err != nil {
		return err
	}
	loopback, err := addrIsLoopback(c.addr)
	if err != nil {
		return notStarted{fmt.Errorf("--addr %s: %w", c.addr, err)}
	}
	if !loopback && !c.insecure && authn == nil {
		return fmt.Errorf("%s is not a loopback address and clients are not authenticated: anyone who reaches it can read and steer every thread; turn authentication on (--auth-hs256-secret-file, --auth-public-key-file, --auth-jwks-url or --auth-api-keys-file), or pass --insecure to serve it anyway", c.addr)
	}
	registry := prometheus.NewRegistry()
	eng, err := openEngine(ctx, c, log, registry)
	if err != nil {
		return err
	}
	serverOwnsEngine := false
	if eng.Engine != nil {
		open.add(func() {
			if !serverOwnsEngine {
				_ = eng.Close()
			}
		})
	}
	up, err := openEdge(c)
	if err != nil {
		return err
	}
	cfg := c.serverConfig()
	cfg.Engine = eng.Engine
	if up != nil {
		cfg.Upstream = up
	}
	srv := server.New(cfg)
	serverOwnsEngine = true                                  // its Close closes the engine
	open.add(func() { _ = srv.Close(context.Background()) }) // a second Close does nothing
	if eng.disk != nil && eng.disk.CutRuns() > 0 {
		log.Warn().Int("runs", eng.disk.CutRuns()).Msg("runs the last stop cut short were ended (failed, run cut)")
	}
	if up != nil {
		if err := startEdge(ctx, up, srv); err != nil {
			return err
		}
		open.add(up.Close)
		registry.MustRegister(up.Collectors()...)
		log.Info().Str("upstream", auth.RedactURL(c.upstream)).Msg("edge mode: the assistants are the upstream's")
	}
	stopIngest := func() {}
	if c.ingestStream != "" {
		ingest, err := startIngest(c, eng.redis, srv, log)
		if err != nil {
			return err
		}
		open.add(ingest.Close)    // on an early return
		stopIngest = ingest.Close // before the server's Close: entries it holds stay pending for the next reader
		registry.MustRegister(ingest.Collectors()...)
		log.Info().Str("stream", c.ingestStream).Str("group", c.ingestGroup).Msg("ingesting a redis stream")
	}
	if b := srv.Buffers(); c.gcBuffers && b != nil {
		gov := memgov.Start(b, memgov.Options{Target: c.memoryTarget})
		open.add(gov.Stop)
	}
	if c.builtins {
		assistants.Register(srv)
	}
	h := transport.New(srv, c.transportOptions(loopback, authn, eng.ready, registry, up))
	if c.metricsAddr != "" {
		mln, err := net.Listen("tcp", c.metricsAddr)
		if err != nil {
			return notStarted{fmt.Errorf("--metrics-addr %s: %w", c.metricsAddr, err)}
		}
		ms := &http.Server{Handler: h.MetricsHandler(), ReadHeaderTimeout: c.readHeaderTimeout}
		go func() { _ = ms.Serve(mln) }()
		open.add(func() { _ = ms.Close() })
		log.Info().Str("addr", mln.Addr().String()).Msg("metrics listening")
	}
	ln, err := listen(c.addr, loopback)
	if err != nil {
		return err
	}
	open.add(func() { _ = ln.Close() }) // Serve closes it too; a second Close does nothing
	hs := &http.Server{Handler: c.proxies.Wrap(logRequests(c.withPprof(h), log)), ReadHeaderTimeout: c.readHeaderTimeout, IdleTimeout: c.idleTimeout, TLSConfig: tlsConfig}
	errc := make(chan error, 1) // Serve's one result; buffered so it never blocks
	go func() {
		if tlsConfig != nil {
			errc <- hs.ServeTLS(ln, "", "") // HTTP/2 by ALPN; WebSockets upgrade over HTTP/1.1
		} else {
			errc <- hs.Serve(ln)
		}
	}()
	logListening(ctx, c, log, ln.Addr().String(), tlsConfig != nil, authn != nil, up, srv)
	if ready != nil {
		ready <- ln.Addr().String()
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info().Msg("shutting down")
	stopIngest()
	err = shutdown(c.shutdownTimeout, hs, h, srv, errc)
	log.Info().Msg("stopped")
	return err
}

// tlsConfig is --tls-cert and --tls-key's, nil without them.
func (c config) tlsConfig() (*tls.Config, error) {
	if c.tlsCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert, --tls-key: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}}, nil
}

// addrIsLoopback reports whether --addr listens on loopback only: its
// host is a loopback IP, or a name all of whose addresses are.
func addrIsLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	if host == "" {
		return false, nil // every interface
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback(), nil
	}
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return false, nil // what it cannot resolve, Listen refuses
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return false, nil
		}
	}
	return true, nil
}

// listen opens --addr, and checks that it is on loopback as addr said
// when the server was built for it (loopback: the host names it accepts).
func listen(addr string, loopback bool) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, notStarted{fmt.Errorf("%s is in use (another server?): choose another address with --addr HOST:PORT or AGENTSTREAM_ADDR (%w)", addr, err)}
	}
	if err != nil {
		return nil, notStarted{fmt.Errorf("--addr %s: %w", addr, err)}
	}
	if loopback && !isLoopback(ln.Addr()) {
		ln.Close()
		return nil, notStarted{fmt.Errorf("--addr %s: resolved to %s, not a loopback address", addr, ln.Addr())}
	}
	return ln, nil
}

// serverConfig is the core's configuration from the flags.
func (c config) serverConfig() server.Config {
	return server.Config{
		BufferEvents: c.bufferEvents, BufferBytes: c.bufferBytes, BufferTotalBytes: c.bufferTotal, QueueBytes: c.queueBytes, QueueTotalBytes: c.queueTotal, IdleRelease: c.idleRelease,
		MaxThreads: c.maxThreads, ThreadTTL: c.threadTTL, MaxQueuedRuns: c.maxQueuedRuns,
		MaxThreadsPerPrincipal: c.maxThreadsPerPrincipal, MaxRunsPerMinute: c.maxRunsPerMinute,
		MaxSessionSubscriptions: c.maxSubscriptions, MaxCheckpoints: c.maxCheckpoints,
		MaxProducersPerThread: c.maxProducersPerThread, MaxStoreItems: c.maxStoreItems, MaxAssistants: c.maxAssistants, ThreadExpiryCheck: c.threadExpiryCheck, MaxThreadMetadataBytes: c.maxThreadMetadataBytes, MaxStateBytes: c.maxStateBytes, IngestAckTimeout: c.ingestAckTimeout, IngestFastAck: c.ingestFastAck,
		WorkerLease: c.workerLease, MaxWorkers: c.maxWorkers, MaxRunsPerWorker: c.maxRunsPerWorker, MaxQueuedWorkerRuns: c.maxQueuedWorkerRuns,
	}
}

// openEngine opens the engine the flags name (--redis or --data-dir;
// none: in memory) and registers its metrics.
func openEngine(ctx context.Context, c config, log zerolog.Logger, registry *prometheus.Registry) (engine, error) {
	switch {
	case c.redisURL != "" && c.dataDir != "":
		return engine{}, errors.New("--data-dir and --redis: one engine or the other")
	case c.redisURL != "":
		e, err := openRedis(ctx, c, log)
		if err != nil {
			return engine{}, err
		}
		registry.MustRegister(e.Collectors()...)
		log.Info().Str("redis", auth.RedactURL(c.redisURL)).Str("node", e.Node()).Msg("threads kept in redis")
		return engine{Engine: e, ready: e.Ping, redis: e}, nil
	case c.dataDir != "":
		e, err := openDisk(c, log)
		if err != nil {
			return engine{}, err
		}
		registry.MustRegister(e.Collectors()...)
		log.Info().Str("data_dir", c.dataDir).Msg("threads kept on disk")
		return engine{Engine: e, ready: e.Ready, disk: e}, nil
	}
	return engine{}, nil
}

// openRedis opens --redis.
func openRedis(ctx context.Context, c config, log zerolog.Logger) (*redisstore.Engine, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	e, err := redisstore.New(rctx, redisstore.Options{
		URL: c.redisURL, TTL: c.threadTTL, MaxCheckpoints: c.maxCheckpoints,
		Log: redisstore.LogOptions{MaxEvents: c.bufferEvents, MaxBytes: c.bufferBytes, TotalBytes: c.bufferTotal,
			WriteQueue: c.redisWriteQueue, WriteQueueBytes: c.redisWriteQueueBytes, Writers: c.redisWriters, WriteGather: c.redisWriteGather, QueueWait: c.redisQueueWait, DeliverFirst: !c.redisWriteThrough, MaxProducers: c.maxProducersPerThread},
		Cluster:  redisstore.ClusterOptions{Node: c.nodeID, LeaseTTL: c.leaseTTL},
		OnError:  func(err error) { log.Warn().Err(err).Msg("redis") },
		OnHealth: func(err error) { logRedisHealth(log, err) },
	})
	if err != nil {
		return nil, fmt.Errorf("--redis: %w", err)
	}
	return e, nil
}

// openDisk opens --data-dir.
func openDisk(c config, log zerolog.Logger) (*diskstore.Engine, error) {
	if c.dataMinFree < 0 || c.dataMaxThreadBytes < 0 || c.dataMaxBytes < 0 {
		return nil, errors.New("--data-min-free, --data-max-thread-bytes, --data-max-bytes: not negative")
	}
	// The hot cache of a thread on disk is small unless --buffer-events
	// says otherwise: the rest of its history is a disk read away.
	hot := 0
	if c.bufferEventsSet {
		hot = c.bufferEvents
	}
	e, err := diskstore.Open(diskstore.Options{Dir: c.dataDir, BufferEvents: hot, BufferBytes: c.bufferBytes, MinFree: uint64(c.dataMinFree),
		MaxEvents: c.dataMaxEvents, MaxThreadBytes: c.dataMaxThreadBytes, MaxBytes: c.dataMaxBytes, MaxAge: c.dataMaxAge, CommitEvery: c.dataCommitEvery,
		MaxPending: c.dataMaxPending, Repair: c.dataRepair, MaxProducers: c.maxProducersPerThread, Verify: c.dataVerify})
	switch {
	case errors.Is(err, diskstore.ErrTableDamaged):
		return nil, fmt.Errorf("--data-dir: %w (agentstream data --data-dir %s repair writes the tree again without what cannot be read; or restore the store from a backup)", err, c.dataDir)
	case errors.Is(err, diskstore.ErrDamaged):
		return nil, fmt.Errorf("--data-dir: %w (agentstream data --data-dir %s check reports it; serve --data-repair starts keeping every commit that can be read)", err, c.dataDir)
	case err != nil:
		return nil, fmt.Errorf("--data-dir: %w", err)
	}
	if r := e.Repaired(); r != "" {
		log.Warn().Str("data_dir", c.dataDir).Str("lost", r).Msg("the store's commit log was damaged: started with what could be read (--data-repair)")
	}
	if e.Crashed() {
		log.Warn().Str("data_dir", c.dataDir).Msg("the store was not closed cleanly: its threads go on in new epochs")
	}
	return e, nil
}

// openEdge is --upstream's edge (nil without it), not started yet.
func openEdge(c config) (*edge.Edge, error) {
	if c.upstream == "" {
		return nil, nil
	}
	hdr := http.Header{}
	for _, h := range c.upstreamHeaders {
		name, value, _ := strings.Cut(h, ":")
		hdr.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	if c.upstreamAPIKey != "" {
		hdr.Set("X-Api-Key", c.upstreamAPIKey)
	}
	up, err := edge.New(edge.Options{URL: c.upstream, Header: hdr, IdentityHeader: c.upstreamIdentity, ResponseTimeout: c.upstreamTimeout})
	if err != nil {
		return nil, fmt.Errorf("--upstream: %w", err)
	}
	return up, nil
}

// startEdge starts the edge on srv, within 10 s.
func startEdge(ctx context.Context, up *edge.Edge, srv *server.Server) error {
	uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := up.Start(uctx, srv); err != nil {
		return fmt.Errorf("--upstream: %w", err)
	}
	return nil
}

// startIngest starts reading --ingest-stream from the Redis engine
// (config.check asks for --redis with it).
func startIngest(c config, e *redisstore.Engine, srv *server.Server, log zerolog.Logger) (*redisstore.Ingest, error) {
	if e == nil {
		return nil, errors.New("--ingest-stream needs --redis")
	}
	var entries func(map[string]string) (string, protocol.ProducerEvent, bool, string)
	if slices.Contains(splitList(c.profiles), transport.ProfileJobs) {
		entries = jobs.IngestEntry // entries naming a job: its envelopes and its end
	}
	ingest, err := e.Ingest(srv, redisstore.IngestOptions{Stream: c.ingestStream, Group: c.ingestGroup, DeadLetter: c.ingestDeadLetter,
		MaxEventBytes: c.ingestMaxEventBytes, LeaseTTL: c.leaseTTL, MaxWait: c.ingestMaxWait, Entries: entries,
		Decoder: protocol.Decoder{Limits: protocol.DecodeLimits{MaxDepth: c.commandMaxDepth, MaxValues: c.commandMaxValues}},
		OnError: func(err error) { log.Warn().Err(err).Msg("ingest") }})
	if err != nil {
		return nil, fmt.Errorf("--ingest-stream: %w", err)
	}
	return ingest, nil
}

// transportOptions are the HTTP handler's options from the flags.
func (c config) transportOptions(loopback bool, authn *auth.Authenticator, ready func(context.Context) error, registry *prometheus.Registry, up *edge.Edge) transport.Options {
	var hosts []string
	if loopback {
		hosts = append(hosts, transport.LoopbackHosts...)
		hosts = append(hosts, splitList(c.allowedHosts)...)
		if slices.Contains(hosts, "*") {
			hosts = nil
		}
	} else if c.allowedHosts != "" && c.allowedHosts != "*" {
		hosts = splitList(c.allowedHosts)
	}
	origins := transport.ExpandOrigins(splitList(c.allowedOrigins))
	return transport.Options{
		SSE:             sse.Options{Heartbeat: c.heartbeat, WriteInterval: c.writeInterval, BodyTimeout: c.bodyTimeout},
		WS:              ws.Options{OriginPatterns: origins, WriteInterval: c.writeInterval, CommandRate: c.commandRate, CommandBurst: c.commandBurst, CommandBytesRate: c.commandBytesRate},
		CORSOrigins:     origins,
		Webhooks:        langgraph.WebhookOptions{AllowPrivate: c.webhookAllowPrivate, Timeout: c.webhookTimeout, MaxPending: c.maxPendingWebhooks},
		Hosts:           hosts,
		BodyTimeout:     c.bodyTimeout,
		Auth:            authn,
		Ready:           ready,
		Registry:        registry,
		Playground:      playgroundHandler(c.playground),
		HTTPCommandRate: c.httpCommandRate, HTTPCommandBurst: c.httpCommandBurst,
		HTTPStreamRate: c.httpStreamRate, HTTPStreamBurst: c.httpStreamBurst,
		AuthFailureRate: c.authFailureRate, AuthFailureBurst: c.authFailureBurst, MaxStreamsPerPrincipal: c.maxStreamsPerPrincipal,
		Decode:   protocol.DecodeLimits{MaxDepth: c.commandMaxDepth, MaxValues: c.commandMaxValues},
		Profiles: splitList(c.profiles), InstanceAIAssistant: c.instanceAIAssistant,
		UpstreamState: upstreamState(up), UpstreamProxy: upstreamProxy(up),
		Ingest: transport.IngestOptions{MaxEvents: c.ingestMaxEvents, MaxEventBytes: c.ingestMaxEventBytes, MaxBatchBytes: c.ingestMaxBatchBytes, Rate: c.ingestRate, Burst: c.ingestBurst},
	}
}

// withPprof is h, and /debug/pprof/ beside it with --pprof.
func (c config) withPprof(h http.Handler) http.Handler {
	if !c.pprof {
		return h
	}
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// logListening logs the listening line: the address, and the assistants
// (in edge mode the upstream's graphs, as it lists them now).
func logListening(ctx context.Context, c config, log zerolog.Logger, addr string, tlsOn, authOn bool, up *edge.Edge, srv *server.Server) {
	ev := log.Info().Str("addr", addr).Bool("tls", tlsOn).Bool("auth", authOn).Strs("profiles", splitList(c.profiles))
	if up != nil {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		graphs, err := up.Assistants(actx)
		cancel()
		if err != nil {
			log.Warn().Err(err).Msg("could not list the upstream's assistants")
		}
		ev = ev.Str("upstream", auth.RedactURL(c.upstream)).Strs("assistants", graphs)
	} else {
		ev = ev.Strs("assistants", srv.Assistants())
	}
	if c.playground {
		scheme := "http"
		if tlsOn {
			scheme = "https"
		}
		ev = ev.Str("playground", scheme+"://"+addr+"/")
	}
	ev.Msg("agentstream listening")
}

// shutdown stops accepting, ends the streams so that their handlers
// return, then waits for the rest and stops the runs, within timeout.
func shutdown(timeout time.Duration, hs *http.Server, h *transport.Handler, srv *server.Server, errc <-chan error) error {
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var errs []error
	go func() { _ = h.Shutdown(sctx) }()
	if err := hs.Shutdown(sctx); err != nil {
		errs = append(errs, fmt.Errorf("http: %w", err))
	}
	if err := h.Shutdown(sctx); err != nil {
		errs = append(errs, fmt.Errorf("streams: %w", err))
	}
	if err := srv.Close(sctx); err != nil {
		errs = append(errs, err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("shutdown took longer than --shutdown-timeout %s: %w", timeout, errors.Join(errs...))
	}
	return nil
}

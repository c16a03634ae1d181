package transport

import (
	"sync"
	"time"

	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport/internal/stages"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Prometheus series the handler exports. They are the
// wire.Observer every stream handler and wire reports to.
type metrics struct {
	sseStreams   prometheus.Gauge
	wsConns      prometheus.Gauge
	delivered    prometheus.Counter  // events written
	writes       prometheus.Counter  // writes that carried them
	queued       prometheus.Observer // sampled delivery latencies, by stage (package stages)
	written      prometheus.Observer
	commandTimes *prometheus.HistogramVec
	refusals     *refusals
	authFailures *prometheus.CounterVec
	webhooks     *prometheus.CounterVec
}

// refusals counts what the transports refused, by limit, and exports it
// with the core's refusals as agentstream_refusals_total{limit}.
type refusals struct {
	srv  *server.Server
	desc *prometheus.Desc
	mu   sync.Mutex
	n    map[string]uint64
}

func (r *refusals) Describe(ch chan<- *prometheus.Desc) { ch <- r.desc }

func (r *refusals) Collect(ch chan<- prometheus.Metric) {
	all := map[string]uint64{}
	for l, n := range r.srv.Metrics().Refused {
		all[string(l)] += n
	}
	r.mu.Lock()
	for l, n := range r.n {
		all[l] += n
	}
	r.mu.Unlock()
	for l, n := range all {
		ch <- prometheus.MustNewConstMetric(r.desc, prometheus.CounterValue, float64(n), l)
	}
}

// Refused counts one refusal because of limit.
func (m *metrics) Refused(limit string) {
	m.refusals.mu.Lock()
	m.refusals.n[limit]++
	m.refusals.mu.Unlock()
}

func newMetrics(reg *prometheus.Registry, srv *server.Server) *metrics {
	m := &metrics{
		sseStreams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "agentstream_sse_streams", Help: "Open SSE streams."}),
		wsConns:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "agentstream_websocket_connections", Help: "Open WebSocket connections."}),
		commandTimes: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "agentstream_command_duration_seconds", Help: "Time to carry out a command over HTTP, by method and outcome.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 4, 10),
		}, []string{"method", "outcome"}),
	}
	m.authFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentstream_auth_refusals_total",
		Help: "Requests and commands refused by authentication or authorization, by reason: no_credential, invalid_credential, expired (401) or permission_denied (403)."}, []string{"reason"})
	m.delivered = prometheus.NewCounter(prometheus.CounterOpts{Name: "agentstream_events_delivered_total", Help: "Events written to SSE and WebSocket clients."})
	m.writes = prometheus.NewCounter(prometheus.CounterOpts{Name: "agentstream_event_writes_total",
		Help: "Socket writes that carried events; events_delivered_total over this is the events per write that pacing gathers."})
	stageTimes := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "agentstream_delivery_latency_seconds",
		Help:    "Time from a live event's publication on this node to its connection's writer taking it (stage queued) and to the write that carried it returning (stage written); one event in 16 is sampled.",
		Buckets: prometheus.ExponentialBuckets(0.000005, 1.5, 36),
	}, []string{"stage"})
	m.queued, m.written = stageTimes.WithLabelValues(stages.Queued), stageTimes.WithLabelValues(stages.Written)
	counter := func(name, help string, f func(server.MetricsSnapshot) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f(srv.Metrics())) })
	}
	m.refusals = &refusals{srv: srv, n: map[string]uint64{}, desc: prometheus.NewDesc("agentstream_refusals_total",
		"Requests, commands, connections and runs refused because of a limit, by limit.", []string{"limit"}, nil)}
	m.webhooks = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentstream_webhooks_total",
		Help: "Runs' webhooks (the Platform API's run webhook), by outcome: sent, failed (every attempt) or refused (a non-public address, --webhook-allow-private)."}, []string{"outcome"})
	reg.MustRegister(m.webhooks, m.authFailures, m.refusals, m.sseStreams, m.wsConns, m.commandTimes, stageTimes, m.delivered, m.writes,
		counter("agentstream_events_published_total", "Events published on threads.", func(s server.MetricsSnapshot) uint64 { return s.EventsPublished }),
		counter("agentstream_slow_consumers_total", "Subscriptions ended because they fell behind.", func(s server.MetricsSnapshot) uint64 { return s.SlowConsumers }),
		counter("agentstream_stream_gaps_total", "Holes in a thread's stream announced to live subscribers with events.missed (events another node published that the store lost).", func(s server.MetricsSnapshot) uint64 { return s.StreamGaps }),
		counter("agentstream_epoch_bumps_total", "Threads this node took over in a new epoch because Redis restarted since their last writer wrote them (what that writer's clients saw may be lost: their ids are not given to other events).", func(s server.MetricsSnapshot) uint64 { return s.EpochBumps }),
		counter("agentstream_workers_lost_total", "Remote workers lost (their lease ran out or they did not read what they were sent); their runs failed.", func(s server.MetricsSnapshot) uint64 { return s.WorkersLost }),
		counter("agentstream_ingested_events_total", "Events producers published into threads (POST /threads/{id}/events).", func(s server.MetricsSnapshot) uint64 { return s.Ingested }),
		counter("agentstream_ingest_duplicate_batches_total", "Producer batches sent again (the same producer and batch number) that appended nothing.", func(s server.MetricsSnapshot) uint64 { return s.IngestDuplicates }),
		counter("agentstream_replays_total", "Subscriptions that started with a replay.", func(s server.MetricsSnapshot) uint64 { return s.Replays }),
		counter("agentstream_subscribes_total", "Subscriptions made (subscription.subscribe, an SSE stream's, a restored one).", func(s server.MetricsSnapshot) uint64 { return s.Subscribes }),
		counter("agentstream_replay_refills_total", "Parts of replays longer than a connection's queue, read from the log as the reader made room.", func(s server.MetricsSnapshot) uint64 { return s.ReplayRefills }),
		counter("agentstream_commands_total", "Commands dispatched, all transports.", func(s server.MetricsSnapshot) uint64 { return s.Commands }),
		counter("agentstream_buffer_undecodable_events_total", "Buffered events a replay could not rebuild from their JSON and skipped (a bug if ever more than 0).", func(s server.MetricsSnapshot) uint64 { return s.BufferUndecodable }),
		counter("agentstream_buffer_trimmed_events_total", "Events dropped from replay buffers to keep them all within --buffer-total-bytes.", func(s server.MetricsSnapshot) uint64 { return s.BufferTrimmed }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentstream_buffer_bytes", Help: "What the replay buffers count against --buffer-total-bytes."}, func() float64 { return float64(srv.Metrics().BufferUsed) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentstream_buffer_limit_bytes", Help: "The replay buffers' budget now: --buffer-total-bytes, or less while --memory-target lowers it."}, func() float64 {
			if b := srv.Buffers(); b != nil {
				return float64(b.TotalBytes())
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentstream_workers", Help: "Remote workers registered now."}, func() float64 { return float64(srv.Metrics().Workers) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentstream_queued_worker_runs", Help: "Runs waiting for a free remote worker (bounded per assistant by --max-queued-worker-runs)."}, func() float64 { return float64(srv.Metrics().QueuedWorkerRuns) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentstream_subscriptions", Help: "Open subscriptions."}, func() float64 { return float64(srv.Subscriptions()) }),
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}),
	)
	return m
}

// AuthRefused counts a request or command refused by authentication or
// authorization.
func (m *metrics) AuthRefused(reason string) { m.authFailures.WithLabelValues(reason).Inc() }

// Webhook counts a run's webhook by outcome.
func (m *metrics) Webhook(outcome string) { m.webhooks.WithLabelValues(outcome).Inc() }

// Opened counts an open SSE stream ("sse") or WebSocket ("websocket").
func (m *metrics) Opened(kind string) func() {
	g := m.sseStreams
	if kind == "websocket" {
		g = m.wsConns
	}
	g.Inc()
	return g.Dec
}

// Delivered counts n events written in one write.
func (m *metrics) Delivered(n int) {
	m.delivered.Add(float64(n))
	m.writes.Inc()
}

// Stage observes a sampled delivery latency.
func (m *metrics) Stage(stage string, d time.Duration) {
	if stage == stages.Queued {
		m.queued.Observe(d.Seconds())
	} else {
		m.written.Observe(d.Seconds())
	}
}

func (m *metrics) command(method, outcome string, d time.Duration) {
	m.commandTimes.WithLabelValues(method, outcome).Observe(d.Seconds())
}

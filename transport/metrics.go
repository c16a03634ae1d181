package transport

import (
	"time"

	"github.com/agentstream/agentstream/server"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Prometheus series the handler exports.
type metrics struct {
	sseStreams   prometheus.Gauge
	wsConns      prometheus.Gauge
	delivered    func(int)
	commandTimes *prometheus.HistogramVec
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
	delivered := prometheus.NewCounter(prometheus.CounterOpts{Name: "agentstream_events_delivered_total", Help: "Events written to SSE and WebSocket clients."})
	writes := prometheus.NewCounter(prometheus.CounterOpts{Name: "agentstream_event_writes_total",
		Help: "Socket writes that carried events; events_delivered_total over this is the events per write that pacing gathers."})
	m.delivered = func(n int) {
		delivered.Add(float64(n))
		writes.Inc()
	}
	counter := func(name, help string, f func(server.MetricsSnapshot) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f(srv.Metrics())) })
	}
	reg.MustRegister(m.sseStreams, m.wsConns, m.commandTimes, delivered, writes,
		counter("agentstream_events_published_total", "Events published on threads.", func(s server.MetricsSnapshot) uint64 { return s.EventsPublished }),
		counter("agentstream_slow_consumers_total", "Subscriptions ended because they fell behind.", func(s server.MetricsSnapshot) uint64 { return s.SlowConsumers }),
		counter("agentstream_replays_total", "Subscriptions that started with a replay.", func(s server.MetricsSnapshot) uint64 { return s.Replays }),
		counter("agentstream_commands_total", "Commands dispatched, all transports.", func(s server.MetricsSnapshot) uint64 { return s.Commands }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentstream_subscriptions", Help: "Open subscriptions."}, func() float64 { return float64(srv.Subscriptions()) }),
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}),
	)
	return m
}

func (m *metrics) stream() func() {
	m.sseStreams.Inc()
	return m.sseStreams.Dec
}

func (m *metrics) conn() func() {
	m.wsConns.Inc()
	return m.wsConns.Dec
}

func (m *metrics) command(method, outcome string, d time.Duration) {
	m.commandTimes.WithLabelValues(method, outcome).Observe(d.Seconds())
}

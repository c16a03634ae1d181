package loadtest

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentstream/agentstream/assistants"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startServer runs a server with the built-in assistants on loopback
// until the test ends.
func startServer(t *testing.T, profiles ...string) *httptest.Server {
	t.Helper()
	return startServerWrapped(t, nil, profiles...)
}

// startServerWrapped is startServer with the handler seen through wrap
// (when not nil).
func startServerWrapped(t *testing.T, wrap func(http.Handler) http.Handler, profiles ...string) *httptest.Server {
	t.Helper()
	srv := server.New(server.Config{})
	assistants.Register(srv)
	h := transport.New(srv, transport.Options{Profiles: profiles})
	var handler http.Handler = h
	if wrap != nil {
		handler = wrap(h)
	}
	ts := httptest.NewServer(handler)
	t.Cleanup(func() {
		_ = h.Shutdown(context.Background())
		ts.Close()
		_ = srv.Close(context.Background())
	})
	return ts
}

// TestRunCountsEveryDelivery runs a small measurement against an
// in-process server over loopback, on both transports.
func TestRunCountsEveryDelivery(t *testing.T) {
	ts := startServer(t)
	for _, tr := range []string{"sse", "ws"} {
		r, err := Run(context.Background(), Config{URL: ts.URL, Transport: tr, Subscribers: 5, Count: 40, Size: 100, ServerPID: os.Getpid()})
		require.NoError(t, err, tr)
		require.Equal(t, int64(200), r.Deliveries, tr)
		require.Positive(t, r.PerSecond, tr)
		require.Positive(t, r.P99, tr)
	}
	cpu, err := cpuSeconds(os.Getpid())
	require.NoError(t, err)
	require.Positive(t, cpu)
	rss, err := rssBytes(os.Getpid())
	require.NoError(t, err)
	require.Positive(t, rss)
}

// TestRunFromEachSource: the same events published by a remote worker
// the tool runs and by HTTP batches reach every subscriber, paced and as
// fast as possible (the batches' acknowledgements timed); an unknown
// source is an error.
func TestRunFromEachSource(t *testing.T) {
	ts := startServer(t)
	for _, src := range []string{SourceWorker, SourceHTTP} {
		for _, rate := range []float64{0, 2000} {
			r, err := Run(context.Background(), Config{URL: ts.URL, Transport: "ws", Subscribers: 3, Count: 600, Size: 100, Rate: rate, Source: src})
			require.NoError(t, err, src)
			require.Equal(t, int64(1800), r.Deliveries, "%s at %g/s", src, rate)
			require.Positive(t, r.P99, src)
			if src == SourceHTTP {
				require.Positive(t, r.Acks, "the producer's batches are counted")
				require.GreaterOrEqual(t, r.AckP99, r.AckP50)
				require.Contains(t, r.String(), "batches acknowledged")
			} else {
				require.Zero(t, r.Acks)
			}
		}
	}
	_, err := Run(context.Background(), Config{URL: ts.URL, Transport: "sse", Subscribers: 1, Count: 1, Source: "carrier-pigeon", Timeout: 5 * time.Second})
	require.ErrorContains(t, err, "unknown source")
}

// TestRunReportsEachNodesLatency spreads the subscribers over two base
// URLs (two names of one server here) and gets a latency for each.
func TestRunReportsEachNodesLatency(t *testing.T) {
	ts := startServer(t)
	other := strings.Replace(ts.URL, "127.0.0.1", "localhost", 1)
	r, err := Run(context.Background(), Config{URL: ts.URL, SubscribeURLs: []string{ts.URL, other}, Transport: "ws", Subscribers: 4, Count: 30, Size: 100})
	require.NoError(t, err)
	require.Equal(t, int64(120), r.Deliveries)
	require.Len(t, r.PerNode, 2)
	for i, u := range []string{ts.URL, other} {
		require.Equal(t, u, r.PerNode[i].URL)
		require.Positive(t, r.PerNode[i].P50)
		require.GreaterOrEqual(t, r.PerNode[i].P99, r.PerNode[i].P50)
	}
	require.Contains(t, r.String(), "subscribers of "+other)
}

// TestRunManyCountsEveryDelivery runs a small many-conversations
// measurement over loopback, on both transports.
func TestRunManyCountsEveryDelivery(t *testing.T) {
	ts := startServer(t)
	for _, tr := range []string{"sse", "ws"} {
		r, err := RunMany(context.Background(), ManyConfig{URL: ts.URL, Transport: tr, Threads: 6, SubsPerThread: 2, Rate: 40, Duration: 500 * time.Millisecond, Size: 100, ServerPID: os.Getpid(), IdleWait: 10 * time.Millisecond})
		require.NoError(t, err, tr)
		require.Equal(t, 12, r.Subscribers)
		require.Equal(t, int64(12*20), r.Expected, tr)
		require.Equal(t, r.Expected, r.Deliveries, tr)
		require.Zero(t, r.Missing, tr)
		require.Positive(t, r.P99, tr)
		require.Positive(t, r.StartLatency, tr)
		require.Positive(t, r.ClientCPUSeconds, tr)
		require.Equal(t, float64(12*40), r.Offered)
		require.Positive(t, r.RSSEnd, tr)
		require.GreaterOrEqual(t, r.RSSPeak, r.RSSEnd, "the peak is at least what it is at the end")
		require.Positive(t, r.RSSIdle, tr)
		require.Contains(t, r.String(), "after --idle-wait")
		// The server's own breakdown: the sampled events of this run
		// (seq 16 of each thread: 6 threads, 2 subscribers each).
		require.Equal(t, uint64(12), r.Stages.Samples, tr)
		require.Positive(t, r.Stages.QueuedP50, tr)
		require.GreaterOrEqual(t, r.Stages.WrittenP99, r.Stages.QueuedP50, tr)
		require.Contains(t, r.String(), "server stages (12 sampled events)")
	}
}

// TestRunThroughTheOtherWires: the events a job's producer or an Instance
// AI assistant publishes reach every reader of the wire's own stream and
// of the protocol's SSE, with their latency read; a wire's events come
// from the HTTP producer only.
func TestRunThroughTheOtherWires(t *testing.T) {
	ts := startServer(t, transport.ProfileJobs, transport.ProfileInstanceAI)
	for _, wire := range []string{WireJobs, WireInstanceAI} {
		for _, tr := range []string{"wire", "sse"} {
			r, err := Run(context.Background(), Config{URL: ts.URL, Wire: wire, Transport: tr, Source: SourceHTTP, Subscribers: 4, Count: 300, Size: 100, Rate: 3000})
			require.NoError(t, err, "%s through %s", wire, tr)
			require.Equal(t, int64(1200), r.Deliveries, "%s through %s", wire, tr)
			require.Positive(t, r.P99, "%s through %s", wire, tr)
			require.Less(t, r.P99, time.Minute, "%s through %s: the send time is read", wire, tr)
		}
	}
	_, err := Run(context.Background(), Config{URL: ts.URL, Wire: WireJobs, Transport: "wire", Subscribers: 1, Count: 1, Timeout: 5 * time.Second})
	require.ErrorContains(t, err, "a wire's events come from http")
}

// TestRunChat: the chat workload through both paths counts every token
// of every run and reads a time to first token.
func TestRunChat(t *testing.T) {
	ts := startServer(t, transport.ProfileOpenAI)
	for _, via := range []string{ChatOpenAI, ChatSSE} {
		r, err := RunChat(context.Background(), ChatConfig{URL: ts.URL, Via: via, Tokens: 50, Runs: 6, Concurrency: 2})
		require.NoError(t, err, via)
		require.Equal(t, 300, r.Tokens, via)
		require.Positive(t, r.TTFTp50, via)
	}
	_, err := RunChat(context.Background(), ChatConfig{URL: ts.URL, Via: "carrier-pigeon", Tokens: 1, Runs: 1})
	require.Error(t, err)
}

// TestBareReference: the bare reference serves the many-conversations
// workload over WebSocket and SSE (every event to every watcher, its
// latency read), and AgainstBare alternates it with agentstream.
func TestBareReference(t *testing.T) {
	b := NewBare()
	bare := httptest.NewServer(b)
	defer func() {
		bare.Close()
		b.Close()
	}()
	for _, tr := range []string{"ws", "sse"} {
		r, err := RunMany(context.Background(), ManyConfig{URL: bare.URL, Transport: tr, Threads: 5, SubsPerThread: 2, Rate: 50, Duration: 400 * time.Millisecond, Size: 100})
		require.NoError(t, err, tr)
		require.Zero(t, r.Missing, tr)
		require.Equal(t, int64(5*2*20), r.Deliveries, tr)
		require.Positive(t, r.P50, tr)
		require.Zero(t, r.Stages.Samples, "the bare server has no stage histogram")
	}

	ts := startServer(t)
	var names []string
	c, err := AgainstBare(context.Background(), ManyConfig{URL: ts.URL, Transport: "ws", Threads: 4, SubsPerThread: 2, Rate: 50, Duration: 200 * time.Millisecond, Size: 100},
		bare.URL, 0, 2, func(name string, r ManyResult) { names = append(names, name) })
	require.NoError(t, err)
	require.Equal(t, []string{"bare", "agentstream", "bare", "agentstream"}, names, "alternated")
	require.Len(t, c.Bare, 2)
	require.Contains(t, c.String(), "latency p99")
}

// TestIdleMemoryFromSeveralSourceAddresses: idle connections opened from
// the source addresses given (each is seen by the server as its peer),
// every one subscribed, and the server's resident memory per connection
// read.
func TestIdleMemoryFromSeveralSourceAddresses(t *testing.T) {
	var mu sync.Mutex
	peers := map[string]int{}
	ts := startServerWrapped(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			mu.Lock()
			peers[host]++
			mu.Unlock()
			h.ServeHTTP(w, r)
		})
	})
	for _, tr := range []string{"ws", "sse"} {
		clear(peers)
		_, err := IdleMemory(context.Background(), ts.URL, tr, 60, os.Getpid(), 10*time.Millisecond, "127.0.0.2", "127.0.0.3", "127.0.0.4")
		require.NoError(t, err, tr)
		mu.Lock()
		for _, src := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
			require.Equal(t, 20, peers[src], "%s: the idle connections from %s", tr, src)
		}
		mu.Unlock()
	}
}

package loadtest

import (
	"context"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/agentstream/agentstream/assistants"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRunCountsEveryDelivery runs a small measurement against an
// in-process server over loopback, on both transports.
func TestRunCountsEveryDelivery(t *testing.T) {
	srv := server.New(server.Config{})
	assistants.Register(srv)
	h := transport.New(srv, transport.Options{})
	ts := httptest.NewServer(h)
	defer func() {
		_ = h.Shutdown(context.Background())
		ts.Close()
		_ = srv.Close(context.Background())
	}()
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

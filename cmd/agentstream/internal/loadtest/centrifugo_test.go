package loadtest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestManyAgainstCentrifugo runs a small many-conversations workload
// against a real Centrifugo v6 (its memory engine, the tool's client and
// API settings): every publication reaches every subscriber of its
// channel, and latency is read. It needs the binary tools/centrifugo
// builds: $CENTRIFUGO, or /tmp/centrifugo-v6.9.1/centrifugo.
func TestManyAgainstCentrifugo(t *testing.T) {
	bin := os.Getenv("CENTRIFUGO")
	if bin == "" {
		bin = "/tmp/centrifugo-v6.9.1/centrifugo"
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("Centrifugo is not built (%v): tools/centrifugo/run.sh builds it, or set CENTRIFUGO", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	cfg := filepath.Join(t.TempDir(), "centrifugo.json")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`{
  "log": {"level": "error"},
  "http_server": {"address": "127.0.0.1", "port": %d},
  "client": {"insecure": true, "allowed_origins": ["*"]},
  "http_api": {"insecure": true},
  "health": {"enabled": true},
  "channel": {"without_namespace": {"allow_subscribe_for_client": true, "history_size": 100, "history_ttl": "60s"}}
}`, port)), 0o600))
	cmd := exec.Command(bin, "--config", cfg)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	require.Eventually(t, func() bool {
		resp, err := http.Get(url + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 50*time.Millisecond)

	r, err := RunMany(context.Background(), ManyConfig{URL: url, Transport: "ws", Threads: 5, SubsPerThread: 2, Rate: 50, Duration: time.Second, Size: 100, Centrifugo: true, Timeout: 30 * time.Second})
	require.NoError(t, err)
	require.Equal(t, int64(5*2*50), r.Expected)
	require.Equal(t, r.Expected, r.Deliveries, "every publication reached every subscriber of its channel")
	require.Zero(t, r.Missing)
	require.Positive(t, r.P99)
}

package langgraph

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTheEgressGuardChecksWhatIsDialed: a webhook whose name passed the
// request's check but resolves to a loopback address (a name the check
// cannot know, as localhost here) is not dialed: refused as it is sent,
// and nothing reaches the receiver; with AllowPrivate it is sent.
func TestTheEgressGuardChecksWhatIsDialed(t *testing.T) {
	var hits atomic.Int64
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer rcv.Close()
	hook := "http://localhost" + rcv.URL[strings.LastIndex(rcv.URL, ":"):] + "/x"
	var outcomes []string
	wh := newWebhooks(WebhookOptions{Attempts: 1}, func(o string) { outcomes = append(outcomes, o) })
	defer wh.close()
	wh.send(hook, map[string]any{"run_id": "r"})
	require.Equal(t, []string{"refused"}, outcomes)
	require.Zero(t, hits.Load())

	outcomes = nil
	open := newWebhooks(WebhookOptions{Attempts: 1, AllowPrivate: true}, func(o string) { outcomes = append(outcomes, o) })
	defer open.close()
	open.send(hook, map[string]any{"run_id": "r"})
	require.Equal(t, []string{"sent"}, outcomes)
	require.Equal(t, int64(1), hits.Load())
}

func TestPublicIP(t *testing.T) {
	for ip, public := range map[string]bool{"8.8.8.8": true, "2606:4700::1111": true, "127.0.0.1": false, "10.0.0.1": false, "172.16.5.4": false,
		"192.168.1.1": false, "169.254.169.254": false, "::1": false, "fe80::1": false, "fc00::1": false, "100.64.0.1": false, "0.0.0.0": false, "::ffff:127.0.0.1": false} {
		require.Equal(t, public, publicIP(parseIP(t, ip)), ip)
	}
}

func parseIP(t *testing.T, s string) net.IP {
	ip := net.ParseIP(s)
	require.NotNil(t, ip, s)
	return ip
}

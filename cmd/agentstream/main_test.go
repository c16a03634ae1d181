package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"debug/elf"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentstream/agentstream/internal/testkit/redistest"
	"github.com/agentstream/agentstream/internal/testkit/ssetest"
	"github.com/agentstream/agentstream/internal/testkit/wiretest"
	"github.com/coder/websocket"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// rueidis waits out its reconnect backoff (under a second) on a goroutine
// of its own that a closed client does not stop: it ends by itself.
//
// With AGENTSTREAM_TEST_RUN_MAIN=1 the test binary is the agentstream
// command instead, so that a test can run a node as a process of its own
// (and kill it); with AGENTSTREAM_TEST_PRODUCER set it is a producer
// adding entries to a Redis ingest stream (produceIngest).
func TestMain(m *testing.M) {
	if os.Getenv("AGENTSTREAM_TEST_RUN_MAIN") == "1" {
		main()
		return
	}
	if os.Getenv("AGENTSTREAM_TEST_PRODUCER") != "" {
		os.Exit(produceIngest())
	}
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"))
}

// startServe runs `agentstream serve` on a free loopback port with the
// extra flags until ctx ends; it returns the address and where the exit
// code will come.
func startServe(t testing.TB, ctx context.Context, stderr io.Writer, flags ...string) (string, <-chan int) {
	t.Helper()
	ready := make(chan string, 1)
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"serve", "--addr", "127.0.0.1:0"}, flags...), io.Discard, stderr, ready)
	}()
	select {
	case addr := <-ready:
		return addr, done
	case code := <-done:
		t.Fatalf("serve exited with %d", code)
	case <-time.After(10 * time.Second):
		t.Fatal("server did not start")
	}
	return "", nil
}

// streamEcho opens an SSE stream of channel on thread t, then starts an
// echo run there; the stream's body closes with the test.
func streamEcho(t *testing.T, client *http.Client, base, channel string) (*http.Response, *bufio.Reader) {
	t.Helper()
	resp, err := client.Post(base+"/threads/t/stream", "application/json", strings.NewReader(`{"channels": ["`+channel+`"]}`))
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	r, err := client.Post(base+"/threads/t/commands", "application/json", strings.NewReader(`{"id": 1, "method": "run.start", "params": {"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "hi"}]}}}`))
	require.NoError(t, err)
	r.Body.Close()
	require.Equal(t, 200, r.StatusCode)
	return resp, bufio.NewReader(resp.Body)
}

// TestServeAndGracefulShutdown starts `agentstream serve` on a free port,
// streams an echo run over SSE, and stops it as SIGINT would.
func TestServeAndGracefulShutdown(t *testing.T) {
	t.Setenv("AGENTSTREAM_LOG_FORMAT", "json")
	ctx, cancel := context.WithCancel(context.Background())
	var logs bytes.Buffer
	addr, done := startServe(t, ctx, &logs, "--heartbeat", "100ms")
	base := "http://" + addr
	_, br := streamEcho(t, http.DefaultClient, base, "messages")
	for {
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		if line == "event: messages\n" {
			break // heartbeats may come first
		}
	}
	cancel() // as SIGINT does
	select {
	case code := <-done:
		require.Equal(t, 0, code, logs.String())
	case <-time.After(15 * time.Second):
		t.Fatal("no graceful shutdown")
	}
	_, err := io.ReadAll(br)
	require.NoError(t, err, "the open stream ended cleanly")
	require.Contains(t, logs.String(), `"message":"stopped"`)
}

func TestUsageAndBadFlags(t *testing.T) {
	var stderr bytes.Buffer
	require.Equal(t, 2, run(context.Background(), nil, io.Discard, &stderr, nil))
	require.Contains(t, stderr.String(), "usage")
	t.Setenv("AGENTSTREAM_LOG_LEVEL", "loud")
	stderr.Reset()
	require.Equal(t, 2, run(context.Background(), []string{"serve"}, io.Discard, &stderr, nil))
	require.Contains(t, stderr.String(), "log level")
	t.Setenv("AGENTSTREAM_LOG_LEVEL", "info")
	stderr.Reset()
	require.Equal(t, 2, run(context.Background(), []string{"serve", "--trusted-proxies", "10.0.0.0/8,proxy.local"}, io.Discard, &stderr, nil))
	require.Contains(t, stderr.String(), `--trusted-proxies: trusted proxy "proxy.local": not an address or a CIDR prefix`)
}

// Zero means "the default" in the libraries' options; on the command line
// the default is spelled out, so zero is refused rather than quietly
// meaning something else, and pacing is turned off by name.
func TestZeroLimitsAreRefused(t *testing.T) {
	for _, tc := range []struct{ flag, value, want string }{
		{"--write-interval", "0", `is not a positive duration or "off"`},
		{"--write-interval", "-5ms", `is not a positive duration or "off"`},
		{"--queue-bytes", "0", "--queue-bytes must be more than 0"},
		{"--buffer-events", "-1", "--buffer-events must be more than 0"},
		{"--heartbeat", "0s", "--heartbeat must be more than 0"},
		{"--memory-limit", "-1", "--memory-limit must be 0 (none) or more"},
		{"--memory-target", "-1", "--memory-target must be 0 (none) or more"},
		{"--data-commit-every", "0", "--data-commit-every must be more than 0"},
		{"--data-commit-every", "2s", "--data-commit-every must be at most 1s"},
		{"--ingest-ack-timeout", "0s", "--ingest-ack-timeout must be more than 0"},
		{"--redis-write-gather", "1s", "--redis-write-gather must be between 0 and 100ms"},
		{"--redis-write-gather", "-1ms", "--redis-write-gather must be between 0 and 100ms"},
	} {
		var stderr bytes.Buffer
		require.Equal(t, 2, run(context.Background(), []string{"serve", tc.flag, tc.value}, io.Discard, &stderr, nil), tc.flag+" "+tc.value)
		require.Contains(t, stderr.String(), tc.want)
	}
	var stderr bytes.Buffer
	require.Equal(t, 2, run(context.Background(), []string{"load", "--centrifugo"}, io.Discard, &stderr, nil))
	require.Contains(t, stderr.String(), "--centrifugo runs the many-conversations workload")
	var f intervalFlag
	require.NoError(t, f.Set("off"))
	require.Equal(t, "off", f.String())
	require.NoError(t, f.Set("2ms"))
	require.Equal(t, "2ms", f.String())
}

// selfSigned writes a certificate for 127.0.0.1 and its key, and returns
// their paths and a pool that trusts it.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "agentstream test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kb, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestServeTLS: with a certificate, SSE streams run over HTTP/2 and
// WebSockets over HTTP/1.1, both encrypted.
func TestServeTLS(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, done := startServe(t, ctx, io.Discard, "--tls-cert", certFile, "--tls-key", keyFile, "--log-level", "warn")
	base := "https://" + addr
	h2 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	defer h2.CloseIdleConnections()
	resp, br := streamEcho(t, h2, base, "lifecycle")
	require.Equal(t, 2, resp.ProtoMajor, "an SSE stream over HTTP/2")
	for {
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		if strings.Contains(line, `"event":"completed"`) {
			break
		}
	}

	h1 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer h1.CloseIdleConnections()
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	c, _, err := websocket.Dial(wctx, "wss://"+addr+"/threads/t/stream", &websocket.DialOptions{HTTPClient: h1})
	require.NoError(t, err)
	require.NoError(t, c.Write(wctx, websocket.MessageText, []byte(`{"id": 2, "method": "agent.getTree", "params": {}}`)))
	_, b, err := c.Read(wctx)
	require.NoError(t, err)
	require.Contains(t, string(b), `"type":"success"`)
	c.Close(websocket.StatusNormalClosure, "")

	cancel()
	select {
	case code := <-done:
		require.Equal(t, 0, code)
	case <-time.After(15 * time.Second):
		t.Fatal("no graceful shutdown")
	}
}

func TestTLSFlagsGoTogether(t *testing.T) {
	var stderr bytes.Buffer
	require.Equal(t, 2, run(context.Background(), []string{"serve", "--tls-cert", "x.pem"}, io.Discard, &stderr, nil))
	require.Contains(t, stderr.String(), "--tls-cert and --tls-key go together")
	stderr.Reset()
	require.Equal(t, 1, run(context.Background(), []string{"serve", "--addr", "127.0.0.1:0", "--tls-cert", "missing.pem", "--tls-key", "missing.pem"}, io.Discard, &stderr, nil))
	require.Contains(t, stderr.String(), "--tls-cert, --tls-key")
}

// With no --auth-* flag nothing authenticates clients: serving beyond
// loopback needs authentication or --insecure.
func TestNonLoopbackNeedsInsecure(t *testing.T) {
	var stderr bytes.Buffer
	require.Equal(t, 1, run(context.Background(), []string{"serve", "--addr", "0.0.0.0:0"}, io.Discard, &stderr, nil))
	require.Contains(t, stderr.String(), "pass --insecure")
	require.Contains(t, stderr.String(), "--auth-hs256-secret-file")
}

// --memory-limit sets the Go runtime's soft memory limit; --memory-target
// sets it while the server runs (the governor lowers the buffers' budget
// under it: server/memgov's tests) and puts the old one back when it
// stops, and needs --gc-exclude-buffers.
func TestMemoryLimitAndTarget(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(before)
	for _, tc := range []struct {
		flag    string
		limit   int64
		putBack bool
	}{
		{"--memory-limit", 3000000000, false},
		{"--memory-target", 2000000000, true},
	} {
		debug.SetMemoryLimit(before)
		ctx, cancel := context.WithCancel(context.Background())
		_, done := startServe(t, ctx, io.Discard, tc.flag, fmt.Sprint(tc.limit))
		require.Equal(t, tc.limit, debug.SetMemoryLimit(-1), tc.flag)
		cancel()
		require.Equal(t, 0, <-done)
		if tc.putBack {
			require.Equal(t, before, debug.SetMemoryLimit(-1), tc.flag)
		}
	}

	var stderr bytes.Buffer
	require.Equal(t, 2, run(context.Background(), []string{"serve", "--memory-target", "1000000", "--gc-exclude-buffers=false"}, io.Discard, &stderr, nil))
	require.Contains(t, stderr.String(), "--memory-target needs --gc-exclude-buffers")
}

// On loopback, a page whose DNS name was rebound to 127.0.0.1 is refused
// by its Host; --allowed-hosts adds names.
func TestLoopbackServesLoopbackHostsOnly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, done := startServe(t, ctx, io.Discard, "--allowed-hosts", "dev.example")
	get := func(host string) int {
		req, err := http.NewRequest("GET", "http://"+addr+"/threads/t/state", nil)
		require.NoError(t, err)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusForbidden, get("evil.example"))
	require.Equal(t, http.StatusNotFound, get("localhost"), "served (no such thread)")
	require.Equal(t, http.StatusNotFound, get("dev.example:2024"))
	cancel()
	require.Equal(t, 0, <-done)
}

// TestServeWithAuth: the README's two lines (a secret file, a token from
// `agentstream token`) turn authentication on; /metrics moves to
// --metrics-addr; the access_token parameter never reaches the log.
func TestServeWithAuth(t *testing.T) {
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(secretFile, []byte("a-development-secret-of-32-bytes-or-more\n"), 0o600))
	keysFile := filepath.Join(dir, "keys")
	require.NoError(t, os.WriteFile(keysFile, []byte("k-root root admin\n"), 0o600))
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"token", "--secret-file", secretFile, "--sub", "alice", "--ttl", "1h"}, &out, &errOut, nil), errOut.String())
	tok := strings.TrimSpace(out.String())
	require.Equal(t, 2, strings.Count(tok, "."))
	require.Equal(t, 2, run(context.Background(), []string{"token", "--sub", "alice"}, io.Discard, io.Discard, nil), "--secret-file is needed")

	ml, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	metricsAddr := ml.Addr().String()
	ml.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var logs syncBuffer
	addr, done := startServe(t, ctx, &logs, "--auth-hs256-secret-file", secretFile, "--auth-api-keys-file", keysFile, "--metrics-addr", metricsAddr, "--log-level", "debug", "--log-format", "json")
	base := "http://" + addr
	do := func(method, url, cred, body string) int {
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		if cred != "" {
			req.Header.Set("Authorization", "Bearer "+cred)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	cmd := `{"id": 1, "method": "state.get", "params": {"namespace": []}}`
	require.Equal(t, 401, do("POST", base+"/threads/t/commands", "", cmd))
	require.Equal(t, 200, do("POST", base+"/threads/t/commands", tok, cmd))
	require.Equal(t, 401, do("GET", base+"/metrics", "", ""))
	require.Equal(t, 403, do("GET", base+"/metrics", tok, ""))
	require.Equal(t, 200, do("GET", base+"/healthz", "", ""))
	require.Equal(t, 200, do("GET", "http://"+metricsAddr+"/metrics", "", ""), "the metrics listener is open")
	req, _ := http.NewRequest("GET", base+"/metrics", nil)
	req.Header.Set("X-Api-Key", "k-root")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode, "an admin reads /metrics")
	require.Equal(t, 200, do("GET", base+"/threads/t/state?access_token="+tok, "", ""))
	cancel()
	require.Equal(t, 0, <-done)
	require.Contains(t, logs.String(), "access_token=REDACTED")
	require.NotContains(t, logs.String(), tok)

	// A bad flag stops the server at start.
	require.Equal(t, 1, run(context.Background(), []string{"serve", "--addr", "127.0.0.1:0", "--auth-api-keys-file", filepath.Join(dir, "missing")}, io.Discard, io.Discard, nil))
	require.Equal(t, 1, run(context.Background(), []string{"serve", "--addr", "127.0.0.1:0", "--auth-audience", "x"}, io.Discard, io.Discard, nil))
}

// syncBuffer is a bytes.Buffer safe for the server's log writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeWithRedis: `serve --redis` keeps threads across a restart of
// the server; /readyz says 503 while Redis is away; an unreachable Redis
// at start is a clear error and exit code 1.
func TestServeWithRedis(t *testing.T) {
	rs := redistest.Start(t)
	runEcho := func(base string) {
		resp, err := http.Post(base+"/threads/kept/commands", "application/json", strings.NewReader(`{"id": 1, "method": "run.start", "params": {"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "remember me"}]}}}`))
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, string(b))
	}
	state := func(base string) string {
		resp, err := http.Get(base + "/threads/kept/state")
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprint(resp.StatusCode, " ", string(b))
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr, done := startServe(t, ctx, io.Discard, "--redis", rs.URL())
	runEcho("http://" + addr)
	require.Eventually(t, func() bool { return strings.Contains(state("http://"+addr), `"next":[]`) }, 5*time.Second, 20*time.Millisecond, "the run ends")
	cancel()
	require.Equal(t, 0, <-done)

	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	addr, done = startServe(t, ctx, io.Discard, "--redis", rs.URL())
	base := "http://" + addr
	require.Contains(t, state(base), "remember me", "the state outlived the server")
	ready := func() int {
		resp, err := http.Get(base + "/readyz")
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, 200, ready())
	stream, err := http.Post(base+"/threads/kept/stream", "application/json", strings.NewReader(`{"channels": ["lifecycle"]}`))
	require.NoError(t, err)
	defer stream.Body.Close()
	cmd := func() (int, string) {
		r, err := http.Post(base+"/threads/kept/commands", "application/json", strings.NewReader(`{"id": 1, "method": "state.get", "params": {"namespace": []}}`))
		require.NoError(t, err)
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}

	rs.Stop()
	require.Equal(t, 503, ready())
	// The open stream ends with an error event; commands are refused.
	rest, err := io.ReadAll(stream.Body)
	require.NoError(t, err)
	require.Contains(t, string(rest), "event: error\ndata: {\"type\":\"error\",\"id\":null,\"error\":\"unavailable\"")
	status, body := cmd()
	require.Equal(t, 503, status)
	require.Contains(t, body, `"error":"unavailable"`)

	rs.Restart() // an empty Redis on the same port: the service recovers
	require.Eventually(t, func() bool { return ready() == 200 }, 10*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool { s, _ := cmd(); return s == 200 }, 10*time.Second, 50*time.Millisecond)
	runEcho(base)
	require.Eventually(t, func() bool { return strings.Contains(state(base), "remember me") }, 5*time.Second, 20*time.Millisecond, "runs work again")
	// The run's values are in Redis as soon as they are set, its events once
	// the log's writer has sent them.
	wiretest.WaitMetricAbove(t, base, "agentstream_redis_events_written_total", 0)
	metrics, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	mb, _ := io.ReadAll(metrics.Body)
	metrics.Body.Close()
	require.Regexp(t, `(?m)^agentstream_redis_events_written_total [1-9]`, string(mb), "the Redis writer's metrics are served")
	require.Regexp(t, `(?m)^agentstream_redis_events_dropped_total \d`, string(mb))
	cancel()
	require.Equal(t, 0, <-done)

	var stderr bytes.Buffer
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gone := ln.Addr().String()
	ln.Close()
	require.Equal(t, 1, run(context.Background(), []string{"serve", "--addr", "127.0.0.1:0", "--redis", "redis://" + gone + "/0"}, io.Discard, &stderr, nil))
	require.Contains(t, stderr.String(), "--redis")
}

// startProcessNode runs `agentstream serve` as a process of its own (this
// test binary, see TestMain) and returns its base URL and the process.
func startProcessNode(t *testing.T, flags ...string) (string, *exec.Cmd) {
	t.Helper()
	return startBinaryNode(t, os.Args[0], flags...)
}

// startBinaryNode is startProcessNode with another agentstream binary
// (one built without the race detector, for a test that is about load).
func startBinaryNode(t *testing.T, bin string, flags ...string) (string, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--addr", "127.0.0.1:0", "--log-format", "json"}, flags...)...)
	cmd.Env = append(os.Environ(), "AGENTSTREAM_TEST_RUN_MAIN=1")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		var line struct{ Message, Addr string }
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Message == "agentstream listening" {
			var sink io.Writer = io.Discard
			if f := os.Getenv("AGENTSTREAM_TEST_NODE_LOG"); f != "" { // a debugging aid: the nodes' logs
				if lf, err := os.OpenFile(f, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
					sink = lf
				}
			}
			go func() { _, _ = io.Copy(sink, stderr) }()
			return "http://" + line.Addr, cmd
		}
	}
	t.Fatalf("the node did not start: %v", sc.Err())
	return "", nil
}

// victimAndSurvivor starts Redis, a node in a process of its own (the
// victim, to be killed) and one in this process (the survivor, ended by
// cancel, whose exit code done gives), both with a one-second lease, and
// an SSE stream of thread on the survivor (lifecycle and channel) once
// the survivor's subscription to the thread has taken effect.
func victimAndSurvivor(t *testing.T, thread, channel string) (victim string, proc *exec.Cmd, survivor string, stream *http.Response, cancel context.CancelFunc, done <-chan int) {
	t.Helper()
	rs, victim, proc, survivor, cancel, done := victimAndSurvivorNodes(t)
	stream, err := http.Post(survivor+"/threads/"+thread+"/stream", "application/json", strings.NewReader(`{"channels": ["lifecycle", "`+channel+`"]}`))
	require.NoError(t, err)
	rs.WaitSubscribers(t, redistest.LiveChannel(thread), 1) // the survivor's subscription to the thread took effect
	return victim, proc, survivor, stream, cancel, done
}

// victimAndSurvivorNodes is victimAndSurvivor without the stream: the
// survivor has no client on any thread. It returns Redis too. Both nodes
// get flags too.
func victimAndSurvivorNodes(t *testing.T, flags ...string) (rs *redistest.Server, victim string, proc *exec.Cmd, survivor string, cancel context.CancelFunc, done <-chan int) {
	t.Helper()
	rs = redistest.Start(t)
	victim, proc = startProcessNode(t, append([]string{"--redis", rs.URL(), "--lease-ttl", "1s", "--node-id", "victim"}, flags...)...)
	ctx, cancel := context.WithCancel(context.Background())
	addr, done := startServe(t, ctx, io.Discard, append([]string{"--redis", rs.URL(), "--lease-ttl", "1s", "--node-id", "survivor"}, flags...)...)
	return rs, victim, proc, "http://" + addr, cancel, done
}

// startSlowEcho starts on base an echo run of thread that streams a
// 200-word message, a word every 50 ms.
func startSlowEcho(t *testing.T, base, thread string) {
	t.Helper()
	words := strings.TrimSpace(strings.Repeat("word ", 200))
	r, err := http.Post(base+"/threads/"+thread+"/commands", "application/json", strings.NewReader(`{"id": 1, "method": "run.start", "params": {"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "`+words+`"}]}, "config": {"token_delay_ms": 50}}}`))
	require.NoError(t, err)
	r.Body.Close()
	require.Equal(t, 200, r.StatusCode)
}

// TestKilledNodeFailsItsRun: kill -9 of the node running a thread's run;
// a client on another node gets the run's failed lifecycle (node lost)
// within the lease time, and a new run on the same thread then succeeds
// there.
func TestKilledNodeFailsItsRun(t *testing.T) {
	victim, proc, survivor, stream, cancel, done := victimAndSurvivor(t, "k", "custom")
	defer stream.Body.Close()
	post := func(base, body string) int {
		r, err := http.Post(base+"/threads/k/commands", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		r.Body.Close()
		return r.StatusCode
	}
	require.Equal(t, 200, post(victim, `{"id": 1, "method": "run.start", "params": {"assistant_id": "firehose", "input": {"count": 100000, "rate": 50}}}`))
	br := bufio.NewReader(stream.Body)
	until := func(stop func(f ssetest.Frame) bool) ssetest.Frame { // reads up to the first frame stop takes
		var last ssetest.Frame
		require.NoError(t, ssetest.Scan(br, func(f ssetest.Frame) bool { last = f; return !stop(f) }))
		return last
	}
	rootEnd := func(what string) func(f ssetest.Frame) bool {
		return func(f ssetest.Frame) bool {
			return f.Event == "lifecycle" && strings.Contains(f.Data, `"namespace":[]`) && strings.Contains(f.Data, `"event":"`+what+`"`)
		}
	}
	custom := 0
	until(func(f ssetest.Frame) bool {
		if f.Event == "custom" {
			custom++
		}
		return custom == 5
	})
	require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	require.Contains(t, until(rootEnd("failed")).Data, "node lost")
	require.Less(t, time.Since(killed), 5*time.Second, "within the lease time and a reap interval")
	// The thread takes a new run, on the survivor.
	require.Equal(t, 200, post(survivor, `{"id": 2, "method": "run.start", "params": {"assistant_id": "firehose", "input": {"count": 3}}}`))
	until(rootEnd("completed"))
	stream.Body.Close()
	cancel()
	require.Equal(t, 0, <-done)
}

// TestKilledNodeEndsItsRunsRecord: the Platform's record of a run on a
// node killed (kill -9) ends too, not only its stream: runs.get on the
// other node says error within the lease time, and runs.join answers the
// Platform's error shape, naming the lost node, instead of the thread's
// values.
func TestKilledNodeEndsItsRunsRecord(t *testing.T) {
	t.Run("with events", func(t *testing.T) { killedNodeEndsItsRunsRecord(t, true) })
	// Killed as soon as its record says it runs, often before any of its
	// events reached Redis: the record ends all the same.
	t.Run("at once", func(t *testing.T) { killedNodeEndsItsRunsRecord(t, false) })
}

func killedNodeEndsItsRunsRecord(t *testing.T, withEvents bool) {
	_, victim, proc, survivor, cancel, done := victimAndSurvivorNodes(t, "--profiles", "langgraph")
	call := func(method, url, body string) (int, map[string]any) {
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		r, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer r.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(r.Body).Decode(&out)
		return r.StatusCode, out
	}
	const thread = "0b0e4f8e-5d2a-4c1b-9a63-2f8d7c6b5a41"
	status, _ := call("POST", victim+"/threads", `{"thread_id": "`+thread+`"}`)
	require.Equal(t, 200, status)
	status, run := call("POST", victim+"/threads/"+thread+"/runs", `{"assistant_id": "firehose", "input": {"count": 100000, "rate": 50}}`)
	require.Equal(t, 200, status, "%v", run)
	runID, _ := run["run_id"].(string)
	require.NotEmpty(t, runID)
	runStatus := func() any { _, r := call("GET", survivor+"/threads/"+thread+"/runs/"+runID, ""); return r["status"] }
	require.Eventually(t, func() bool { return runStatus() == "running" }, 10*time.Second, 20*time.Millisecond, "the record says the run goes on")
	if withEvents {
		// Some of its events are in Redis: the survivor reads them.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", survivor+"/threads/"+thread+"/stream?since=0", nil)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		custom := 0
		require.NoError(t, ssetest.Scan(bufio.NewReader(resp.Body), func(f ssetest.Frame) bool {
			if f.Event == "custom" {
				custom++
			}
			return custom < 5
		}))
		resp.Body.Close()
	}
	require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
	require.Eventually(t, func() bool { return runStatus() == "error" }, 10*time.Second, 50*time.Millisecond, "the cut run's record ends")
	status, joined := call("GET", survivor+"/threads/"+thread+"/runs/"+runID+"/join", "")
	require.Equal(t, 200, status)
	require.Contains(t, fmt.Sprint(joined["__error__"]), "node lost", "%v", joined)
	cancel()
	require.Equal(t, 0, <-done)
}

// TestKilledNodeFailsItsRunForLateWatchers: runs on the node killed
// (kill -9) whose watchers on the other node subscribed only once the run
// was under way, asking for the custom channel alone (so that node never
// saw the run start): each watcher still gets the run's failed lifecycle
// (node lost) within the lease time, however the reaper's first look
// falls (one that finds an event of the run too recent looks again).
func TestKilledNodeFailsItsRunForLateWatchers(t *testing.T) {
	_, victim, proc, survivor, cancel, done := victimAndSurvivorNodes(t)
	threads := []string{"late1", "late2", "late3"}
	var streams []*bufio.Reader
	for _, th := range threads {
		r, err := http.Post(victim+"/threads/"+th+"/commands", "application/json", strings.NewReader(`{"id": 1, "method": "run.start", "params": {"assistant_id": "firehose", "input": {"count": 100000, "rate": 50}}}`))
		require.NoError(t, err)
		r.Body.Close()
		require.Equal(t, 200, r.StatusCode)
	}
	// The runs are under way: each has published its start and some events.
	wiretest.WaitMetricAbove(t, victim, "agentstream_events_published_total", float64(4*len(threads)))
	for _, th := range threads {
		stream, err := http.Post(survivor+"/threads/"+th+"/stream", "application/json", strings.NewReader(`{"channels": ["custom"]}`))
		require.NoError(t, err)
		defer stream.Body.Close()
		streams = append(streams, bufio.NewReader(stream.Body))
	}
	for _, br := range streams { // each watcher is receiving the run's events
		custom := 0
		require.NoError(t, ssetest.Scan(br, func(f ssetest.Frame) bool {
			if f.Event == "custom" {
				custom++
			}
			return custom < 20
		}))
	}
	require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	for i, th := range threads {
		ctx, stop := context.WithDeadline(context.Background(), killed.Add(10*time.Second))
		req, _ := http.NewRequestWithContext(ctx, "POST", survivor+"/threads/"+th+"/stream", strings.NewReader(`{"channels": ["lifecycle"]}`))
		req.Header.Set("Content-Type", "application/json")
		life, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer stop()
		failed := false
		_ = ssetest.Scan(bufio.NewReader(life.Body), func(f ssetest.Frame) bool {
			failed = f.Event == "lifecycle" && strings.Contains(f.Data, `"namespace":[]`) && strings.Contains(f.Data, `"event":"failed"`) && strings.Contains(f.Data, "node lost")
			return !failed
		}) // cut by the deadline when it never comes
		life.Body.Close()
		require.True(t, failed, "thread %s: the run never failed", th)
		require.Less(t, time.Since(killed), 8*time.Second, "thread %s (%d of %d): within the lease time and a few reap intervals", th, i+1, len(threads))
	}
	cancel()
	require.Equal(t, 0, <-done)
}

// readRunFrames reads a thread's stream from cursor since (GET, every
// channel) up to and including the end of the n-th run it shows.
func readRunFrames(t *testing.T, base, thread, since string, runs int) []ssetest.Frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/threads/"+thread+"/stream?since="+since, nil)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	out, err := scanRunFrames(bufio.NewReader(resp.Body), runs)
	require.NoError(t, err)
	return out
}

// scanRunFrames reads SSE frames up to and including the end of the n-th
// run they show.
func scanRunFrames(br *bufio.Reader, runs int) ([]ssetest.Frame, error) {
	var out []ssetest.Frame
	err := ssetest.Scan(br, func(f ssetest.Frame) bool {
		out = append(out, f)
		if f.Event == "lifecycle" && strings.Contains(f.Data, `"namespace":[]`) &&
			(strings.Contains(f.Data, `"event":"completed"`) || strings.Contains(f.Data, `"event":"failed"`)) {
			runs--
		}
		return runs > 0
	})
	return out, err
}

// TestAllNodesRestarted: two nodes as processes, both stopped and two new
// ones started on the same Redis: the thread's state and its events are
// still there, byte for byte, and its next run continues the sequence.
func TestAllNodesRestarted(t *testing.T) {
	rs := redistest.Start(t)
	start := func() (string, string, []*exec.Cmd) {
		a, pa := startProcessNode(t, "--redis", rs.URL(), "--node-id", "a")
		b, pb := startProcessNode(t, "--redis", rs.URL(), "--node-id", "b")
		return a, b, []*exec.Cmd{pa, pb}
	}
	run := func(base, text string) {
		body := `{"id": 1, "method": "run.start", "params": {"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "` + text + `"}]}}}`
		r, err := http.Post(base+"/threads/kept/commands", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		r.Body.Close()
		require.Equal(t, 200, r.StatusCode)
	}
	state := func(base string) string {
		r, err := http.Get(base + "/threads/kept/state")
		require.NoError(t, err)
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return string(b)
	}
	a, b, procs := start()
	run(a, "before the restart")
	before := readRunFrames(t, b, "kept", "0", 1)
	require.Greater(t, len(before), 3)
	valuesBefore := state(b)
	require.Contains(t, valuesBefore, "before the restart")
	for _, p := range procs {
		require.NoError(t, p.Process.Signal(syscall.SIGTERM))
		require.NoError(t, p.Wait(), "a node stops cleanly")
	}

	a, b, _ = start()
	require.Equal(t, valuesBefore, state(a), "the state outlived both nodes")
	// A stream opens with a snapshot of the values (no id, a timestamp of
	// now), then the events from the cursor on.
	stored := func(fs []ssetest.Frame) []ssetest.Frame {
		require.Empty(t, fs[0].ID)
		require.Equal(t, "values", fs[0].Event)
		return fs[1:]
	}
	again := readRunFrames(t, a, "kept", "0", 1)
	require.Equal(t, stored(before), stored(again), "the events outlived both nodes, byte for byte")
	last := before[len(before)-1].ID
	run(b, "after the restart")
	after := stored(readRunFrames(t, a, "kept", last, 1))
	epoch, seq, _ := strings.Cut(last, "-")
	n, err := strconv.Atoi(seq)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("%s-%d", epoch, n+1), after[0].ID, "the sequence continues, in the same epoch")
	for i, f := range after {
		require.Equal(t, fmt.Sprintf("%s-%d", epoch, n+1+i), f.ID)
	}
	require.Contains(t, state(b), "after the restart")
}

// TestKilledNodeFailsItsUnwatchedRun: kill -9 of the node running a run
// that no client of any other node watches; a surviving node still writes
// the run's failed lifecycle (node lost), within --lease-ttl of the kill
// (plus a reap's round trips), and a replay from the survivor shows the
// run's end.
func TestKilledNodeFailsItsUnwatchedRun(t *testing.T) {
	rs := redistest.Start(t)
	victim, proc := startProcessNode(t, "--redis", rs.URL(), "--lease-ttl", "2s", "--node-id", "victim")
	ctx, cancel := context.WithCancel(context.Background())
	addr, done := startServe(t, ctx, io.Discard, "--redis", rs.URL(), "--lease-ttl", "2s", "--node-id", "survivor")
	survivor := "http://" + addr
	r, err := http.Post(victim+"/threads/alone/commands", "application/json", strings.NewReader(`{"id": 1, "method": "run.start", "params": {"assistant_id": "firehose", "input": {"count": 100000, "rate": 50}}}`))
	require.NoError(t, err)
	r.Body.Close()
	require.Equal(t, 200, r.StatusCode)
	time.Sleep(500 * time.Millisecond) // a few events, and a lease renewal
	require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	var frames []ssetest.Frame
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		frames = tryRunFrames(ctx, survivor, "alone")
		return frames != nil
	}, 10*time.Second, 100*time.Millisecond, "the survivor ends the run")
	took := time.Since(killed)
	t.Logf("the run was failed %v after its node was killed (--lease-ttl 2s)", took)
	end := frames[len(frames)-1]
	require.Contains(t, end.Data, `"event":"failed"`)
	require.Contains(t, end.Data, "node lost")
	require.Less(t, took, 2*time.Second+500*time.Millisecond, "within the lease time (and the reaper's round trips)")
	cancel()
	require.Equal(t, 0, <-done)
}

// tryRunFrames is the thread's stream from the start up to the end of its
// first run, or nil when it does not end before ctx does.
func tryRunFrames(ctx context.Context, base, thread string) []ssetest.Frame {
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/threads/"+thread+"/stream?since=0", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	out, err := scanRunFrames(bufio.NewReader(resp.Body), 1)
	if err != nil {
		return nil
	}
	return out
}

// TestStalledRedisAndKilledNodeNeverReuseAnID: Redis stalls (SIGSTOP)
// while a run streams, the running node is killed (kill -9) during the
// stall, and Redis continues (SIGCONT). What the node's client saw was in
// Redis before it saw it, so the survivor's stream holds every event the
// client saw under the same id, byte for byte; resuming with the client's
// last cursor continues right after it, up to the run's failure.
func TestStalledRedisAndKilledNodeNeverReuseAnID(t *testing.T) {
	rs := redistest.Start(t)
	victim, proc := startProcessNode(t, "--redis", rs.URL(), "--lease-ttl", "2s", "--node-id", "victim")
	ctx, cancel := context.WithCancel(context.Background())
	addr, done := startServe(t, ctx, io.Discard, "--redis", rs.URL(), "--lease-ttl", "2s", "--node-id", "survivor")
	survivor := "http://" + addr

	sctx, scancel := context.WithCancel(context.Background())
	defer scancel()
	req, _ := http.NewRequestWithContext(sctx, "POST", victim+"/threads/stalled/stream", strings.NewReader(`{"channels": ["lifecycle", "custom"]}`))
	req.Header.Set("Content-Type", "application/json")
	stream, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer stream.Body.Close()
	seen := map[string]string{}
	var lastID string
	var mu sync.Mutex
	go func() {
		_ = ssetest.Scan(bufio.NewReader(stream.Body), func(f ssetest.Frame) bool {
			if f.ID != "" {
				mu.Lock()
				seen[f.ID], lastID = f.Data, f.ID
				mu.Unlock()
			}
			return true
		})
	}()
	r, err := http.Post(victim+"/threads/stalled/commands", "application/json", strings.NewReader(`{"id": 1, "method": "run.start", "params": {"assistant_id": "firehose", "input": {"count": 100000, "rate": 200}}}`))
	require.NoError(t, err)
	r.Body.Close()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) > 20 }, 5*time.Second, 10*time.Millisecond)
	rs.Pause()
	time.Sleep(time.Second) // the node goes on publishing; Redis takes nothing
	mu.Lock()
	atStall := len(seen)
	mu.Unlock()
	require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
	time.Sleep(100 * time.Millisecond)
	rs.Resume()
	var all []ssetest.Frame
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		all = tryRunFrames(ctx, survivor, "stalled")
		return all != nil
	}, 15*time.Second, 200*time.Millisecond, "the survivor ends the run")
	byID := map[string]string{}
	for _, f := range all {
		if f.ID != "" {
			byID[f.ID] = f.Data
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("the client saw %d events (%d when Redis stalled); the stream holds %d", len(seen), atStall, len(byID))
	for id, data := range seen {
		require.Equal(t, data, byID[id], "event %s: the stream holds what the client saw under its id", id)
	}
	// Resuming with the last cursor continues right after it.
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	rreq, _ := http.NewRequestWithContext(rctx, "GET", survivor+"/threads/stalled/stream", nil)
	rreq.Header.Set("Last-Event-ID", lastID)
	resp, err := http.DefaultClient.Do(rreq)
	require.NoError(t, err)
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	epoch, seq, _ := strings.Cut(lastID, "-")
	n, err := strconv.Atoi(seq)
	require.NoError(t, err)
	for {
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		if strings.HasPrefix(line, "id: ") {
			require.Equal(t, fmt.Sprintf("%s-%d", epoch, n+1), strings.TrimSpace(line[4:]), "the event after the last one seen")
			break
		}
		require.NotContains(t, line, "events.missed")
	}
	cancel()
	require.Equal(t, 0, <-done)
}

// TestConsoleLogHasNoColourOffATerminal: the console log written to a
// file or a pipe carries no ANSI escape.
func TestConsoleLogHasNoColourOffATerminal(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "log")
	require.NoError(t, err)
	defer f.Close()
	l, err := newLogger("info", "console", f)
	require.NoError(t, err)
	l.Info().Str("k", "v").Msg("hello")
	b, err := os.ReadFile(f.Name())
	require.NoError(t, err)
	require.Contains(t, string(b), "hello")
	require.NotContains(t, string(b), "\x1b[", "no colour in a file")
}

// TestKilledNodeClosesItsOpenMessage: kill -9 of a node while its run's
// message streams; the survivor ends the message with its error event
// (code node_lost) before the run's failed lifecycle, so no client is
// left with a message streaming for ever.
func TestKilledNodeClosesItsOpenMessage(t *testing.T) {
	victim, proc, _, stream, cancel, done := victimAndSurvivor(t, "km", "messages")
	defer stream.Body.Close()
	startSlowEcho(t, victim, "km")
	deltas, closed := 0, false
	err := ssetest.Scan(bufio.NewReader(stream.Body), func(f ssetest.Frame) bool {
		switch {
		case f.Event == "messages" && strings.Contains(f.Data, `"content-block-delta"`):
			if deltas++; deltas == 5 {
				require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
			}
		case f.Event == "messages" && strings.Contains(f.Data, `"event":"error"`):
			require.Contains(t, f.Data, `"code":"node_lost"`)
			require.Greater(t, deltas, 4, "after the deltas the survivor saw")
			closed = true
		case f.Event == "lifecycle" && strings.Contains(f.Data, `"namespace":[]`) && strings.Contains(f.Data, `"event":"failed"`):
			require.True(t, closed, "the run ended before its message did")
			require.Contains(t, f.Data, "node lost")
			return false
		}
		return true
	})
	require.NoError(t, err)
	stream.Body.Close()
	cancel()
	require.Equal(t, 0, <-done)
}

// TestKilledNodeClosesItsOpenMessageOnANodeThatNeverFollowedIt: as
// above, but the survivor had no client on the thread, so it saw none of
// the run's events: it learns what the run left open from the stream when
// it ends the lost run, and ends the message (node_lost) before the run.
func TestKilledNodeClosesItsOpenMessageOnANodeThatNeverFollowedIt(t *testing.T) {
	rs, victim, proc, survivor, cancel, done := victimAndSurvivorNodes(t)
	stream, err := http.Post(victim+"/threads/kn/stream", "application/json", strings.NewReader(`{"channels": ["messages"]}`))
	require.NoError(t, err)
	defer stream.Body.Close()
	startSlowEcho(t, victim, "kn")
	deltas := 0
	require.NoError(t, ssetest.Scan(bufio.NewReader(stream.Body), func(f ssetest.Frame) bool {
		if strings.Contains(f.Data, `"content-block-delta"`) {
			deltas++
		}
		return deltas < 5
	}))
	require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
	_ = proc.Wait()

	// Wait for the survivor to end the run, reading nothing from it
	// meanwhile: Redis's stream says when.
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{rs.Addr}, DisableCache: true})
	require.NoError(t, err)
	defer rc.Close()
	require.Eventually(t, func() bool {
		entries, err := rc.Do(context.Background(), rc.B().Xrevrange().Key("agentstream:{kn}:events").End("+").Start("-").Count(1).Build()).AsXRange()
		return err == nil && len(entries) == 1 && strings.Contains(entries[0].FieldValues["e"], "node lost")
	}, 15*time.Second, 50*time.Millisecond, "the survivor ends the lost run")

	replay, err := http.Post(survivor+"/threads/kn/stream", "application/json", strings.NewReader(`{"channels": ["messages", "lifecycle"]}`))
	require.NoError(t, err)
	defer replay.Body.Close()
	closed := false
	require.NoError(t, ssetest.Scan(bufio.NewReader(replay.Body), func(f ssetest.Frame) bool {
		switch {
		case f.Event == "messages" && strings.Contains(f.Data, `"event":"error"`):
			require.Contains(t, f.Data, `"code":"node_lost"`)
			closed = true
		case f.Event == "lifecycle" && strings.Contains(f.Data, `"namespace":[]`) && strings.Contains(f.Data, `"event":"failed"`):
			require.True(t, closed, "the run ended before its message did")
			return false
		}
		return true
	}))
	replay.Body.Close()
	cancel()
	require.Equal(t, 0, <-done)
}

// TestPublishAcrossTwoNodes: a producer's batch sent to one node reaches a
// client of the other (through Redis); while a run of the thread goes on
// on the first node, a batch sent to the second is refused with 409
// naming the node that writes the thread.
func TestPublishAcrossTwoNodes(t *testing.T) {
	rs := redistest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrA, doneA := startServe(t, ctx, io.Discard, "--redis", rs.URL(), "--node-id", "a")
	addrB, doneB := startServe(t, ctx, io.Discard, "--redis", rs.URL(), "--node-id", "b")
	a, b := "http://"+addrA, "http://"+addrB
	stream, err := http.Post(b+"/threads/pn/stream", "application/json", strings.NewReader(`{"channels": ["custom"]}`))
	require.NoError(t, err)
	defer stream.Body.Close()
	rs.WaitSubscribers(t, redistest.LiveChannel("pn"), 1) // node b follows the thread

	publish := func(base, body string) (int, string) {
		r, err := http.Post(base+"/threads/pn/events", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer r.Body.Close()
		out, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		return r.StatusCode, string(out)
	}
	status, out := publish(a, `[{"type": "event", "method": "custom", "params": {"namespace": [], "data": {"name": "p", "payload": 1}}}]`)
	require.Equal(t, 200, status, out)
	require.NoError(t, ssetest.Scan(bufio.NewReader(stream.Body), func(f ssetest.Frame) bool {
		return !strings.Contains(f.Data, `"payload":1`)
	}), "node b's client gets the event published through node a")

	r, err := http.Post(a+"/threads/pn/commands", "application/json", strings.NewReader(`{"id": 1, "method": "run.start", "params": {"assistant_id": "firehose", "input": {"count": 100000, "rate": 20}}}`))
	require.NoError(t, err)
	r.Body.Close()
	require.Equal(t, 200, r.StatusCode)
	status, out = publish(b, `[{"type": "event", "method": "custom", "params": {"namespace": [], "data": {"name": "p", "payload": 2}}}]`)
	require.Equal(t, 409, status, out)
	require.Contains(t, out, "node a")
	stream.Body.Close()
	cancel()
	require.Equal(t, 0, <-doneA)
	require.Equal(t, 0, <-doneB)
}

// TestVersion: `version` and `--version` print the build's version (the
// module's, its VCS revision when the build has one) and Go's.
func TestVersion(t *testing.T) {
	for _, arg := range []string{"version", "--version"} {
		var out bytes.Buffer
		require.Equal(t, 0, run(context.Background(), []string{arg}, &out, io.Discard, nil))
		require.Regexp(t, `^agentstream \S+.* `+regexp.QuoteMeta(runtime.Version())+`\n$`, out.String())
	}
}

// TestPortInUseSaysHowToChooseAnother: serve on an address that is taken
// exits 1 saying the server did not start, and how to choose another.
func TestPortInUseSaysHowToChooseAnother(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var stderr bytes.Buffer
	t.Setenv("AGENTSTREAM_LOG_FORMAT", "json")
	require.Equal(t, 1, run(context.Background(), []string{"serve", "--addr", ln.Addr().String()}, io.Discard, &stderr, nil))
	require.Contains(t, stderr.String(), "server did not start")
	require.Contains(t, stderr.String(), ln.Addr().String()+" is in use")
	require.Contains(t, stderr.String(), "--addr HOST:PORT or AGENTSTREAM_ADDR")
	require.NotContains(t, stderr.String(), "server stopped")
}

// TestStaticBuild: the binary builds with CGO_ENABLED=0 into one static
// executable (no program interpreter, no shared libraries), as the README
// and the container image say.
func TestStaticBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "agentstream")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	f, err := elf.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	for _, p := range f.Progs {
		require.NotEqual(t, elf.PT_INTERP, p.Type, "a dynamically linked executable")
	}
	libs, err := f.ImportedLibraries()
	require.NoError(t, err)
	require.Empty(t, libs)
	v, err := exec.Command(bin, "version").Output()
	require.NoError(t, err)
	require.Contains(t, string(v), "agentstream ")
}

// TestBannerNamesProfilesAndAssistants: the listening line names the
// profiles served and the assistants, sorted.
func TestBannerNamesProfilesAndAssistants(t *testing.T) {
	t.Setenv("AGENTSTREAM_LOG_FORMAT", "json")
	ctx, cancel := context.WithCancel(context.Background())
	var logs bytes.Buffer
	_, done := startServe(t, ctx, &logs, "--profiles", "langgraph,openai")
	cancel()
	<-done
	var banner struct {
		Message    string
		Profiles   []string
		Assistants []string
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if json.Unmarshal([]byte(line), &banner) == nil && banner.Message == "agentstream listening" {
			break
		}
	}
	require.Equal(t, "agentstream listening", banner.Message, logs.String())
	require.Equal(t, []string{"langgraph", "openai"}, banner.Profiles)
	require.Equal(t, []string{"demo", "echo", "firehose"}, banner.Assistants)
}

// TestConfigFile: a TOML file sets serve's flags by name (a list as the
// comma-separated value); the environment wins over it and the command
// line over both; a key that is no flag, or a bad value, is refused naming
// it; --print-config prints every flag as a file that reads back the same.
func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "agentstream.toml")
	require.NoError(t, os.WriteFile(file, []byte("max-threads = 777\nprofiles = [\"langgraph\", \"openai\"]\nlog-level = \"warn\"\nplayground = false\nwrite-interval = \"2ms\"\n"), 0o600))
	printed := func(args ...string) (string, int, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"serve", "--print-config"}, args...), &out, &errOut, nil)
		return out.String(), code, errOut.String()
	}
	out, code, _ := printed("--config", file)
	require.Equal(t, 0, code)
	for _, want := range []string{"max-threads = 777\n", `profiles = "langgraph,openai"` + "\n", `log-level = "warn"` + "\n", "playground = false\n", `write-interval = "2ms"` + "\n", `addr = "127.0.0.1:2024"` + "\n"} {
		require.Contains(t, out, want)
	}
	t.Setenv("AGENTSTREAM_MAX_THREADS", "888")
	out, _, _ = printed("--config", file)
	require.Contains(t, out, "max-threads = 888\n", "the environment wins over the file")
	out, _, _ = printed("--config", file, "--max-threads", "999")
	require.Contains(t, out, "max-threads = 999\n", "the command line wins over both")
	t.Setenv("AGENTSTREAM_CONFIG", file)
	out, _, _ = printed()
	require.Contains(t, out, `profiles = "langgraph,openai"`, "AGENTSTREAM_CONFIG names the file")
	os.Unsetenv("AGENTSTREAM_CONFIG")

	// What it prints reads back the same.
	again := filepath.Join(dir, "printed.toml")
	require.NoError(t, os.WriteFile(again, []byte(out), 0o600))
	out2, code, errOut := printed("--config", again)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, strings.SplitN(out, "\n", 2)[1], strings.SplitN(out2, "\n", 2)[1])

	os.Unsetenv("AGENTSTREAM_MAX_THREADS")
	for body, want := range map[string]string{
		"max-thread = 5\n":       `"max-thread" is not a flag of serve`,
		"max-threads = \"x\"\n":  `max-threads = "x"`,
		"addr = {a = 1}\n":       "addr: a string, a number, a boolean or a list of them",
		"addr = \"x\"\naddr = 1": "agentstream.toml",
	} {
		require.NoError(t, os.WriteFile(file, []byte(body), 0o600))
		_, code, errOut := printed("--config", file)
		require.Equal(t, 2, code, body)
		require.Contains(t, errOut, want, body)
	}
}

// TestServeClosesWhatItOpenedOnAnError: serve that fails after it opened
// the Redis engine (an --upstream that is no http(s) URL) ends with that
// error and leaves nothing of the engine: its connections to Redis are
// closed.
func TestServeClosesWhatItOpenedOnAnError(t *testing.T) {
	rs := redistest.Start(t)
	before, err := rs.Clients()
	require.NoError(t, err)
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"serve", "--addr", "127.0.0.1:0", "--redis", rs.URL(), "--upstream", "ftp://upstream.example"}, io.Discard, &stderr, nil)
	require.NotEqual(t, 0, code)
	require.Contains(t, stderr.String(), "--upstream")
	require.Eventually(t, func() bool {
		n, err := rs.Clients()
		return err == nil && n == before
	}, 5*time.Second, 20*time.Millisecond, "the engine's connections are closed")
}

// Package wiretest is the test kit of the wires (transport/minimal, jobs,
// instanceai, ...): a wire served alone on a real socket with the shared
// stream handler, the checks every wire's streams share (the keep-alive
// of a quiet stream), and a series' value on a /metrics page.
package wiretest

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport/sse"
	"github.com/agentstream/agentstream/transport/wire"
)

// Serve serves the wire build makes on srv alone (wire.Mount, no
// transport guards), its streams on an sse.Handler, with heartbeat as
// the Context's (0: the default). The test's cleanup ends the streams,
// the listener and srv. It returns the base URL.
func Serve(t testing.TB, srv *server.Server, heartbeat time.Duration, build func(wire.Context) wire.Wire) string {
	t.Helper()
	streams := sse.New(srv, sse.Options{})
	mux := http.NewServeMux()
	wire.Mount(mux, build(wire.Context{Server: srv, Streams: streams, Heartbeat: heartbeat}))
	ts := httptest.NewServer(mux)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = streams.Shutdown(ctx)
		ts.Close()
		_ = srv.Close(context.Background())
	})
	return ts.URL
}

// KeepAlive sends req and fails the test unless the stream it answers
// with carries the comment line keepAlive (": keep-alive", or the wire's
// own spelling) within 5 s, with nothing else asked of it.
func KeepAlive(t testing.TB, req *http.Request, keepAlive string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(req.Context(), 5*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("wiretest: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("wiretest: the stream answered %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if sc.Text() == keepAlive {
			return
		}
	}
	t.Fatalf("wiretest: no %q came within 5 s", keepAlive)
}

// Metric is the value of series (a metric's name with its labels, as
// /metrics writes it) on base's /metrics page; 0 when absent.
func Metric(t testing.TB, base, series string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("wiretest: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("wiretest: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("wiretest: %s: %v", line, err)
			}
			return f
		}
	}
	return 0
}

// WaitMetricAbove waits until series on base's /metrics page is above v
// (an effect of something asynchronous took place), failing the test
// after 10 s.
func WaitMetricAbove(t testing.TB, base, series string, v float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := Metric(t, base, series)
		if got > v {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("wiretest: %s is %v after 10 s, not above %v", series, got, v)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

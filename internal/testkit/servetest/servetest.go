// Package servetest runs agentstream's server for tests as `agentstream
// serve` runs it: the core with the built-in assistants behind the HTTP
// transport, on a loopback port, shut down the same way; it can be
// stopped and started again on the same port (a restart).
package servetest

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/agentstream/agentstream/assistants"
	"github.com/agentstream/agentstream/internal/testhooks"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/stretchr/testify/require"
)

// Sweep runs srv's periodic sweep at once: the replay buffers of idle
// threads released, idle threads and expired dropped sessions forgotten.
func Sweep(srv *server.Server) { testhooks.Sweep(srv) }

// Server is a server a test started.
type Server struct {
	t      testing.TB
	addr   string
	opts   transport.Options
	newCfg func() server.Config
	srv    *server.Server
	hs     *http.Server
	h      *transport.Handler
	done   chan struct{}
}

// Start starts a server with opts on a free loopback port; it stops when
// the test ends.
func Start(t testing.TB, opts transport.Options) *Server {
	t.Helper()
	return StartConfig(t, server.Config{}, opts)
}

// StartConfig is [Start] with a core of cfg.
func StartConfig(t testing.TB, cfg server.Config, opts transport.Options) *Server {
	t.Helper()
	return StartEach(t, func() server.Config { return cfg }, opts)
}

// StartEach is [Start] with a core of what cfg returns, called again at
// each Start (a new engine on the same store, as a restarted process
// opens it).
func StartEach(t testing.TB, cfg func() server.Config, opts transport.Options) *Server {
	t.Helper()
	s := &Server{t: t, opts: opts, newCfg: cfg, addr: "127.0.0.1:0"}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// URL is the server's base URL.
func (s *Server) URL() string { return "http://" + s.addr }

// Start starts the server again after Stop, on the same port, as a new
// process would: an empty in-memory engine.
func (s *Server) Start() {
	s.t.Helper()
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ { // the port of a stopped server may take a moment to free
		if ln, err = net.Listen("tcp", s.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(s.t, err)
	s.addr = ln.Addr().String()
	s.srv = server.New(s.newCfg())
	assistants.Register(s.srv)
	s.h = transport.New(s.srv, s.opts)
	s.hs = &http.Server{Handler: s.h}
	s.done = make(chan struct{})
	go func() { defer close(s.done); _ = s.hs.Serve(ln) }()
}

// Stop shuts the server down as agentstream serve does: its streams end,
// its WebSockets close (going away).
func (s *Server) Stop() {
	if s.hs == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, hs, srv := s.h, s.hs, s.srv // Start replaces them; the goroutine keeps these
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = h.Shutdown(ctx) }()
	_ = hs.Shutdown(ctx)
	_ = h.Shutdown(ctx)
	_ = srv.Close(ctx)
	<-stopped
	<-s.done
	s.hs = nil
}

// Core is the running server's core.
func (s *Server) Core() *server.Server { return s.srv }

// Owner is srv's owner of thread, failing the test on a store error.
func Owner(t testing.TB, srv *server.Server, thread string) string {
	t.Helper()
	o, err := srv.Owner(context.Background(), thread)
	require.NoError(t, err)
	return o
}

// HasThread is srv.HasThread, failing the test on a store error.
func HasThread(t testing.TB, srv *server.Server, thread string) bool {
	t.Helper()
	ok, err := srv.HasThread(context.Background(), thread)
	require.NoError(t, err)
	return ok
}

// Package redistest starts a real redis-server for tests, on a free
// loopback port, and stops it when the test ends.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentstream/agentstream/internal/testkit/quietport"
)

// Server is a redis-server a test started.
type Server struct {
	Addr    string
	t       testing.TB
	bin     string
	cmd     *exec.Cmd
	done    chan struct{} // closed once cmd has exited
	started bool          // it answered once: a restart keeps its port
	opts    Options
	dir     string
}

// Options configure a Server.
type Options struct {
	// AppendOnly persists every write to an append-only file, fsynced
	// before Redis answers (appendfsync always), so that Restart keeps
	// everything Redis acknowledged; without it Restart starts empty.
	// (Redis's default, fsync every second, may lose acknowledged writes
	// even when only the process is killed: while a background fsync is
	// slow it answers before writing the file, for up to two seconds.
	// Losing a stream's tail is tested by restoring an older copy.)
	AppendOnly bool
	// cluster starts the server with cluster mode on (StartCluster).
	cluster bool
}

// Start starts redis-server on a free loopback port, with no persistence
// to disk. Without the binary on PATH the test is skipped with a message
// naming it, unless AGENTSTREAM_REQUIRE_REDIS=1 (set by .ci/run, which
// installs it), which fails it instead.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with options.
func StartWith(t testing.TB, opts Options) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("AGENTSTREAM_REQUIRE_REDIS") == "1" {
			t.Fatal("redis-server is not on PATH (apt-get install redis-server)")
		}
		t.Skip("redis-server is not on PATH (apt-get install redis-server): skipping the Redis engine's tests")
	}
	var addr string
	if opts.cluster {
		addr = ClusterAddr(t)
	} else {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = ln.Addr().String()
		ln.Close()
	}
	s := &Server{Addr: addr, t: t, bin: bin, opts: opts, dir: t.TempDir()}
	s.start()
	t.Cleanup(s.Stop)
	return s
}

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

func (s *Server) start() {
	s.t.Helper()
	for attempt := 1; ; attempt++ {
		err := s.startOnce()
		if err == nil {
			s.started = true
			return
		}
		// A port taken between its choice and the server's start (another
		// test's process took it) makes the server exit: a first start
		// moves to another port; a restart must keep its own.
		if !errors.Is(err, errExited) || s.started || s.opts.cluster || attempt == 3 {
			s.t.Fatal(err)
		}
		ln, lerr := net.Listen("tcp", "127.0.0.1:0")
		if lerr != nil {
			s.t.Fatal(lerr)
		}
		s.Addr = ln.Addr().String()
		ln.Close()
	}
}

var errExited = errors.New("redistest: redis-server exited")

// startOnce starts the process and waits until it answers.
func (s *Server) startOnce() error {
	_, port, _ := net.SplitHostPort(s.Addr)
	args := []string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--dir", s.dir, "--protected-mode", "yes", "--appendonly", "no"}
	if s.opts.AppendOnly {
		args = append(args[:len(args)-1], "yes", "--appendfsync", "always")
	}
	if s.opts.cluster {
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000")
	}
	cmd := exec.Command(s.bin, args...)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ping(s.Addr) == nil {
			return nil
		}
		select {
		case <-done:
			s.cmd = nil
			return fmt.Errorf("%w on %s (its port taken?)", errExited, s.Addr)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s did not answer", s.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server (as a crash would) and waits for it.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a paused one too
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Pause stops the server's process (SIGSTOP): its connections stay open
// and nothing answers, as in a stall; Resume continues it.
func (s *Server) Pause() {
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGSTOP)
	}
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() {
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// Restart kills the server and starts it again on the same port: empty,
// or, with Options.AppendOnly, with what its append-only file kept.
func (s *Server) Restart() {
	s.Stop()
	s.start()
}

func ping(addr string) error {
	r, done, err := send(addr, "PING")
	if err != nil {
		return err
	}
	defer done()
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("redis answered %q", line)
	}
	return nil
}

// send sends one command to the Redis at addr on a connection of its own
// (a second to answer), and returns the answer's reader; done closes the
// connection.
func send(addr string, args ...string) (answer *bufio.Reader, done func(), err error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, nil, err
	}
	_ = c.SetDeadline(time.Now().Add(time.Second))
	cmd := fmt.Sprintf("*%d\r\n", len(args))
	for _, arg := range args {
		cmd += fmt.Sprintf("$%d\r\n%s\r\n", len(arg), arg)
	}
	if _, err := c.Write([]byte(cmd)); err != nil {
		c.Close()
		return nil, nil, err
	}
	return bufio.NewReader(c), func() { c.Close() }, nil
}

// ClusterAddr is a free loopback address for a cluster node: its port
// and the cluster bus's (the port + 10,000) both free and both below the
// kernel's ephemeral range (quietport), where a port over 55535 would put
// the bus port out of range.
func ClusterAddr(t testing.TB) string {
	t.Helper()
	port, err := quietport.Free(2700, 10000)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// LiveChannel is the channel the Redis engine publishes thread's live
// events on (the default key prefix): what a node that follows the thread
// is subscribed to.
func LiveChannel(thread string) string { return "agentstream:{" + thread + "}:live" }

// WaitSubscribers waits until at least n connections are subscribed to
// channel (PUBSUB SHARDNUMSUB: a node's subscription to a thread, which
// it makes asynchronously, has taken effect), failing the test after 10 s.
func (s *Server) WaitSubscribers(t testing.TB, channel string, n int) {
	t.Helper()
	WaitSubscribersAt(t, s.URL(), channel, n)
}

// WaitSubscribersAt is WaitSubscribers for the Redis at url, a server's or
// a cluster's (its nodes' counts added up: a channel's subscribers are on
// the nodes that serve its slot).
func WaitSubscribersAt(t testing.TB, url, channel string, n int) {
	t.Helper()
	hosts, _, _ := strings.Cut(strings.TrimPrefix(url, "redis://"), "/")
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := 0
		var err error
		for _, addr := range strings.Split(hosts, ",") {
			c, e := shardNumSub(addr, channel)
			got, err = got+c, errors.Join(err, e)
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: %d of %d subscribers to %s after 10 s (%v)", got, n, channel, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// shardNumSub is PUBSUB SHARDNUMSUB channel's count.
func shardNumSub(addr, channel string) (int, error) {
	r, done, err := send(addr, "PUBSUB", "SHARDNUMSUB", channel)
	if err != nil {
		return 0, err
	}
	defer done()
	// *2 / $len / channel / :count
	var lines []string
	for len(lines) < 4 {
		line, err := r.ReadString('\n')
		if err != nil {
			return 0, err
		}
		lines = append(lines, strings.TrimRight(line, "\r\n"))
	}
	var n int
	if _, err := fmt.Sscanf(lines[3], ":%d", &n); err != nil {
		return 0, fmt.Errorf("redis answered %q", lines)
	}
	return n, nil
}

// Clients is how many clients are connected to the server now (INFO
// clients' connected_clients, the asking connection included).
func (s *Server) Clients() (int, error) {
	r, done, err := send(s.Addr, "INFO", "clients")
	if err != nil {
		return 0, err
	}
	defer done()
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return 0, err
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_clients:"); ok {
			var n int
			_, err := fmt.Sscanf(v, "%d", &n)
			return n, err
		}
	}
}

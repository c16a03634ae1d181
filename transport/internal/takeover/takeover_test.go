package takeover

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serveOne runs handler on a loopback server with the given options and
// returns its address; the server stops with the test.
func serveOne(t *testing.T, configure func(*http.Server), handler http.HandlerFunc) string {
	t.Helper()
	ts := httptest.NewUnstartedServer(handler)
	if configure != nil {
		configure(ts.Config)
	}
	ts.Start()
	t.Cleanup(ts.Close)
	return ts.Listener.Addr().String()
}

// rawRequest sends raw on a new connection and returns it.
func rawRequest(t *testing.T, addr, raw string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
	_, err = io.WriteString(conn, raw)
	require.NoError(t, err)
	return conn
}

const get = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"

// 1. Hijack gives the connection of an HTTP/1.1 request.
func TestHijackGivesTheConnection(t *testing.T) {
	got := make(chan bool, 1)
	addr := serveOne(t, nil, func(w http.ResponseWriter, r *http.Request) {
		c, ok := Hijack(w, time.Second)
		got <- ok
		if ok {
			c.Close()
		}
	})
	rawRequest(t, addr, get)
	require.True(t, <-got)
}

// 1. After Hijack net/http writes nothing: the first bytes on the wire
// are our head, with the handler's headers because we wrote them.
func TestNothingWrittenAfterHijack(t *testing.T) {
	addr := serveOne(t, nil, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Mine", "yes")
		w.Header().Set("Content-Type", "text/event-stream")
		c, ok := Hijack(w, time.Second)
		if !ok {
			return
		}
		_ = c.Write(append(make([]byte, ChunkRoom), "data: 1\n\n"...), true)
		c.Close()
	})
	conn := rawRequest(t, addr, get)
	all, err := io.ReadAll(conn)
	require.NoError(t, err)
	s := string(all)
	require.True(t, strings.HasPrefix(s, "HTTP/1.1 200 OK\r\n"), "%q", s)
	require.Equal(t, 1, strings.Count(s, "HTTP/1.1"), "one head, ours: %q", s)
	require.Contains(t, s, "X-Mine: yes\r\n")
	require.Contains(t, s, "Transfer-Encoding: chunked\r\n")
	require.Contains(t, s, "Connection: close\r\n")
	require.True(t, strings.HasSuffix(s, "\r\n\r\n9\r\ndata: 1\n\n\r\n0\r\n\r\n"), "%q", s)
}

// 2. A request pipelined behind the first is in the hijacked reader's
// buffer, so the stream knows the client sent more and Wait returns at
// once.
func TestPipelinedRequestIsBuffered(t *testing.T) {
	sent := make(chan bool, 1)
	addr := serveOne(t, nil, func(w http.ResponseWriter, r *http.Request) {
		c, ok := Hijack(w, time.Second)
		if !ok {
			sent <- false
			return
		}
		c.Wait() // returns at once: the client sent more than its request
		sent <- c.sent
		c.Close()
	})
	rawRequest(t, addr, get+get)
	require.True(t, <-sent)
}

// 3. Hijack clears the server's deadlines: a stream on a server with a
// short ReadTimeout and WriteTimeout outlives them, and Wait returns only
// when the client goes.
func TestHijackClearsDeadlines(t *testing.T) {
	waited := make(chan time.Duration, 1)
	addr := serveOne(t, func(s *http.Server) {
		s.ReadTimeout, s.WriteTimeout = 100*time.Millisecond, 100*time.Millisecond
	}, func(w http.ResponseWriter, r *http.Request) {
		c, ok := Hijack(w, time.Second)
		if !ok {
			return
		}
		start := time.Now()
		go func() {
			time.Sleep(300 * time.Millisecond)
			_ = c.Write(append(make([]byte, ChunkRoom), "late"...), false) // past WriteTimeout
		}()
		c.Wait()
		waited <- time.Since(start)
		c.Close()
	})
	conn := rawRequest(t, addr, get)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	buf := make([]byte, 4)
	_, err = io.ReadFull(resp.Body, buf)
	require.NoError(t, err, "a write after the server's WriteTimeout arrives")
	require.Equal(t, "late", string(buf))
	conn.Close()
	require.GreaterOrEqual(t, <-waited, 300*time.Millisecond, "Wait outlived the server's ReadTimeout")
}

// 4. net/http's client reads the head, the chunks and the last chunk as
// the body, and does not reuse the connection.
func TestClientReadsTheStream(t *testing.T) {
	addr := serveOne(t, nil, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "text/event-stream") // canonical on the wire
		c, ok := Hijack(w, time.Second)
		if !ok {
			return
		}
		for _, p := range []string{"a", strings.Repeat("z", 4096), ""} {
			_ = c.Write(append(make([]byte, ChunkRoom), p...), false)
		}
		_ = c.Write(append(make([]byte, ChunkRoom), strings.Repeat("y", 1<<20)...), true)
		c.Wait()
		c.Close()
	})
	resp, err := http.Get("http://" + addr)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	require.Equal(t, []string{"chunked"}, resp.TransferEncoding)
	require.True(t, resp.Close, "Connection: close")
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "a"+strings.Repeat("z", 4096)+strings.Repeat("y", 1<<20), string(body))
}

func TestChunk(t *testing.T) {
	for _, payload := range []string{"", "a", strings.Repeat("z", 4096), strings.Repeat("y", 1<<20)} {
		out := chunk(append(make([]byte, ChunkRoom), payload...))
		if payload == "" {
			require.Empty(t, out)
			continue
		}
		resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"+string(out)+"0\r\n\r\n")), nil)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, payload, string(body))
	}
}

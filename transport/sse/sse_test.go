package sse

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentstream/agentstream/assistants"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fixture struct {
	url  string
	h    *Handler
	srv  *server.Server
	open atomic.Int64 // streams open, from the Observer
}

// openCounter counts the streams open.
type openCounter struct {
	wire.NopObserver
	open *atomic.Int64
}

func (o openCounter) Opened(string) func() {
	o.open.Add(1)
	return func() { o.open.Add(-1) }
}

// serve runs the SSE handler and a commands endpoint on loopback.
func serve(t *testing.T, opts Options) *fixture {
	t.Helper()
	f := &fixture{srv: server.New(server.Config{})}
	assistants.Register(f.srv)
	opts.Observer = openCounter{open: &f.open}
	f.h = New(f.srv, opts)
	mux := http.NewServeMux()
	mux.Handle("POST /threads/{id}/stream", f.h)
	mux.Handle("GET /threads/{id}/stream", f.h)
	ts := httptest.NewServer(mux)
	f.url = ts.URL
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, f.h.Shutdown(ctx))
		ts.Close()
		require.NoError(t, f.srv.Close(ctx))
	})
	return f
}

// start runs the echo assistant on thread.
func (f *fixture) start(t *testing.T, thread string) {
	t.Helper()
	cmd, errResp := protocol.DecodeCommand([]byte(`{"id": 1, "method": "run.start", "params": {"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "a b c"}]}}}`))
	require.Nil(t, errResp)
	_, err := f.srv.Do(context.Background(), thread, cmd)
	require.NoError(t, err)
}

// Both ways of serving a stream give the same response.
var modes = []struct {
	name string
	opts Options
}{{"taken over", Options{}}, {"on the handler", Options{KeepHandler: true}}}

func TestStreamHeadersFramesAndEnd(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			f := serve(t, m.opts)
			resp, err := http.Post(f.url+"/threads/t/stream", "application/json", strings.NewReader(`{"channels": ["messages", "lifecycle"]}`))
			require.NoError(t, err)
			defer resp.Body.Close()
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			for k, v := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"} {
				assert.Equal(t, v, resp.Header.Get(k), k)
			}
			// A taken-over connection serves one stream, and says so
			// (Connection: close, which net/http's client turns into
			// resp.Close): a client must not reuse it once the stream ends.
			assert.Equal(t, !m.opts.KeepHandler, resp.Close)
			f.start(t, "t")
			sc := bufio.NewScanner(resp.Body)
			var lines []string
			for sc.Scan() {
				lines = append(lines, sc.Text())
				if strings.Contains(sc.Text(), `"event":"completed"`) && strings.Contains(sc.Text(), `"namespace":[],`) {
					break
				}
			}
			require.NoError(t, sc.Err())
			require.Regexp(t, `^id: [0-9a-v]{8}-1$`, lines[0], "event ids are EPOCH-SEQ")
			require.Equal(t, "event: lifecycle", lines[1])
			require.True(t, strings.HasPrefix(lines[2], "data: {"), lines[2])
			// Shutdown ends the response cleanly: the body reaches EOF, which
			// the chunked coding only allows after its last chunk.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			require.NoError(t, f.h.Shutdown(ctx))
			_, err = io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return f.open.Load() == 0 }, 5*time.Second, 10*time.Millisecond)
		})
	}
}

func TestHeartbeatOnAQuietStream(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			m.opts.Heartbeat = 30 * time.Millisecond
			f := serve(t, m.opts)
			// Not the values channel: its subscribers get the current
			// state at once.
			resp, err := http.Get(f.url + "/threads/q/stream?channels=lifecycle")
			require.NoError(t, err)
			defer resp.Body.Close()
			r := bufio.NewReader(resp.Body)
			for range 3 {
				line, err := r.ReadString('\n')
				require.NoError(t, err)
				require.Equal(t, ": heartbeat\n", line)
				line, err = r.ReadString('\n')
				require.NoError(t, err)
				require.Equal(t, "\n", line)
			}
		})
	}
}

func TestAClientLeavingEndsItsStream(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			f := serve(t, m.opts)
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, "GET", f.url+"/threads/gone/stream", nil)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return f.open.Load() == 1 }, 5*time.Second, 5*time.Millisecond)
			cancel()
			resp.Body.Close()
			require.Eventually(t, func() bool { return f.open.Load() == 0 }, 5*time.Second, 5*time.Millisecond,
				"the stream ends without waiting for a write to fail")
		})
	}
}

// TestAClientSendingAfterItsRequestIsClosed: a taken-over stream reads
// nothing more; bytes from the client (a pipelined request) end it.
func TestAClientSendingAfterItsRequestIsClosed(t *testing.T) {
	f := serve(t, Options{})
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "GET /threads/p/stream HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"chunked"}, resp.TransferEncoding)
	require.Eventually(t, func() bool { return f.open.Load() == 1 }, 5*time.Second, 5*time.Millisecond)
	_, err = io.WriteString(conn, "GET /threads/p/stream HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	_, err = io.ReadAll(r) // EOF, or a reset for the unread request
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the server closes the connection: %v", err)
	require.Eventually(t, func() bool { return f.open.Load() == 0 }, 5*time.Second, 5*time.Millisecond)
}

// TestHTTP10StaysOnTheHandler: without chunked coding the stream is left
// to net/http, which delimits it by closing the connection.
func TestAPipelinedRequestEndsTheStream(t *testing.T) {
	f := serve(t, Options{})
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	req := "GET /threads/pp/stream HTTP/1.1\r\nHost: x\r\n\r\n"
	_, err = io.WriteString(conn, req+req)
	require.NoError(t, err)
	require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
	_, err = io.ReadAll(conn) // the head, then the end of the connection
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the server closes the connection: %v", err)
	require.Eventually(t, func() bool { return f.open.Load() == 0 }, 5*time.Second, 5*time.Millisecond)
}

func TestHTTP10StaysOnTheHandler(t *testing.T) {
	f := serve(t, Options{})
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "GET /threads/old/stream?channels=lifecycle HTTP/1.0\r\n\r\n")
	require.NoError(t, err)
	require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Empty(t, resp.TransferEncoding)
	f.start(t, "old")
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err)
	require.Regexp(t, "^id: [0-9a-v]{8}-1\n$", line)
}

func TestHeadHasTheHeadersAndNoStream(t *testing.T) {
	f := serve(t, Options{})
	resp, err := http.Head(f.url + "/threads/h/stream")
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	assert.Equal(t, int64(0), f.open.Load())
}

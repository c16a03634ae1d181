package edge_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/edge"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/stretchr/testify/require"
)

// TestForwardCarriesIdentityAndErrors: a command forwarded carries the
// configured headers and the caller's principal in the identity header;
// the upstream's ErrorResponse comes back as it is, an answer that is no
// protocol response as unavailable (5xx), and the upstream's
// applied_through_seq unchanged. (A recording HTTP server stands in for
// the upstream: what is checked is what the edge sends.)
func TestForwardCarriesIdentityAndErrors(t *testing.T) {
	var mu sync.Mutex
	var got []http.Header
	answer := `{"type":"success","id":1,"result":{"run_id":"r1"},"meta":{"applied_through_seq":3}}`
	status := 200
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			_, _ = io.WriteString(w, `{"ok":true}`)
		case "/threads/t/commands":
			mu.Lock()
			got = append(got, r.Header.Clone())
			a, s := answer, status
			mu.Unlock()
			w.WriteHeader(s)
			_, _ = io.WriteString(w, a)
		case "/threads/t/stream/events":
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			http.NotFound(w, r)
		}
	}))
	defer up.Close()
	e, err := edge.New(edge.Options{URL: up.URL, Header: http.Header{"X-Team": {"blue"}}, IdentityHeader: "x-user"})
	require.NoError(t, err)
	srv := server.New(server.Config{Upstream: e})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, e.Start(ctx, srv))
	defer func() { e.Close(); _ = srv.Close(ctx) }()
	start := &protocol.ClientCommand{Value: &protocol.ClientCommandRunStart{ID: 1, Params: protocol.RunStartParams{AssistantID: "a", Input: map[string]any{}}}}

	resp, err := srv.Do(auth.NewContext(ctx, &auth.Principal{Subject: "alice"}), "t", start)
	require.NoError(t, err)
	require.Equal(t, uint64(3), *resp.Meta.AppliedThroughSeq)
	_, err = srv.Do(ctx, "t", start)
	require.NoError(t, err)
	mu.Lock()
	require.Len(t, got, 2)
	require.Equal(t, "blue", got[0].Get("X-Team"))
	require.Equal(t, "alice", got[0].Get("X-User"))
	require.Empty(t, got[1].Get("X-User"), "no principal, no identity")
	answer = `{"type":"error","id":1,"error":"invalid_argument","message":"Thread t is bound to assistant b"}`
	mu.Unlock()
	_, err = srv.Do(ctx, "t", start)
	var er *protocol.ErrorResponse
	require.True(t, errors.As(err, &er))
	require.Equal(t, protocol.ErrorCodeInvalidArgument, er.Code)
	require.Contains(t, er.Message, "bound to assistant b")
	mu.Lock()
	answer, status = "<html>bad gateway</html>", 502
	mu.Unlock()
	_, err = srv.Do(ctx, "t", start)
	require.True(t, errors.As(err, &er))
	require.Equal(t, protocol.ErrorCodeUnavailable, er.Code)
}

// TestUpstreamAnswersThatAreNotWholeAreErrors: an upstream state answer
// larger than edge.MaxAnswerBytes, one cut short (the connection closed
// before its Content-Length) and one that is not JSON are errors, not a
// body to pass on (the transport answers them 502); an error status in
// plain text is passed on as {"detail": text}.
func TestUpstreamAnswersThatAreNotWholeAreErrors(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/threads/big/state":
			_, _ = io.WriteString(w, `{"values":"`)
			_, _ = io.WriteString(w, strings.Repeat("x", edge.MaxAnswerBytes))
			_, _ = io.WriteString(w, `"}`)
		case "/threads/cut/state":
			w.Header().Set("Content-Length", "1000")
			_, _ = io.WriteString(w, `{"values": {"a": 1`)
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // the connection closes mid-answer
		case "/threads/html/state":
			w.WriteHeader(200)
			_, _ = io.WriteString(w, "<html>maintenance</html>")
		case "/threads/ok/state":
			_, _ = io.WriteString(w, `{"values": {}, "query": "`+r.URL.RawQuery+`"}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer up.Close()
	e, err := edge.New(edge.Options{URL: up.URL})
	require.NoError(t, err)
	ctx := context.Background()
	for _, th := range []string{"big", "cut", "html"} {
		status, body, err := e.State(ctx, th, nil)
		require.ErrorIs(t, err, edge.ErrUpstream, "%s: %d %.100s", th, status, body)
		require.Nil(t, body)
	}
	status, body, err := e.State(ctx, "ok", url.Values{"subgraphs": {"true"}, "access_token": {"secret"}})
	require.NoError(t, err)
	require.Equal(t, 200, status)
	require.JSONEq(t, `{"values": {}, "query": "subgraphs=true"}`, string(body), "the query passed on, the credential left out")
	status, body, err = e.State(ctx, "missing", nil)
	require.NoError(t, err, "an error status in plain text is the upstream's answer")
	require.Equal(t, 404, status)
	require.JSONEq(t, `{"detail": "404 page not found\n"}`, string(body))
}

// TestTheProxyPassesTheClientsHost: a request the edge passes through
// reaches the upstream with X-Forwarded-Host (the client's Host),
// X-Forwarded-Proto and X-Forwarded-For, as a reverse proxy sets them;
// those the client sent itself are not passed on.
func TestTheProxyPassesTheClientsHost(t *testing.T) {
	got := make(chan http.Header, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		_, _ = io.WriteString(w, "{}")
	}))
	defer up.Close()
	e, err := edge.New(edge.Options{URL: up.URL})
	require.NoError(t, err)
	req := httptest.NewRequest("GET", "http://agents.example.com/assistants/search", nil)
	req.Header.Set("X-Forwarded-Host", "spoofed.example")
	rec := httptest.NewRecorder()
	e.Proxy().ServeHTTP(rec, req)
	require.Equal(t, 200, rec.Code)
	h := <-got
	require.Equal(t, "agents.example.com", h.Get("X-Forwarded-Host"))
	require.Equal(t, "http", h.Get("X-Forwarded-Proto"))
	require.NotEmpty(t, h.Get("X-Forwarded-For"))
}

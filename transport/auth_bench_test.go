package transport_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/transport"
	"github.com/coder/websocket"
)

// BenchmarkConnect opens and closes one WebSocket (handshake) or one SSE
// stream (request to response head) at a time over loopback, with
// authentication off, with an API key, and with an HS256 JWT: what auth
// adds to a connect (the credential check and the thread's authorization).
// go test ./transport -run '^$' -bench Connect
func BenchmarkConnect(b *testing.B) {
	a, err := auth.New(context.Background(), auth.Config{HS256Secret: testSecret, APIKeys: map[string]auth.Principal{"k-alice": {Subject: "alice"}}})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	jwt, err := auth.Mint(testSecret, auth.TokenOptions{Subject: "alice", TTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	for _, tr := range []string{"ws", "sse"} {
		for _, mode := range []struct{ name, header, value string }{{"off", "", ""}, {"apikey", "X-Api-Key", "k-alice"}, {"jwt", "Authorization", "Bearer " + jwt}} {
			b.Run(tr+"/auth="+mode.name, func(b *testing.B) {
				opts := transport.Options{}
				if mode.header != "" {
					opts.Auth = a
				}
				ts, _, _ := start(b, opts)
				h := http.Header{}
				if mode.header != "" {
					h.Set(mode.header, mode.value)
				}
				ctx := context.Background()
				wsURL := "ws" + strings.TrimPrefix(ts.URL, "http") + "/threads/bench/stream"
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if tr == "ws" {
						c, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: h})
						if err != nil {
							b.Fatal(err)
						}
						c.CloseNow()
						continue
					}
					req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/threads/bench/stream", strings.NewReader(`{"channels": ["lifecycle"]}`))
					req.Header = h.Clone()
					req.Header.Set("Content-Type", "application/json")
					resp, err := http.DefaultClient.Do(req)
					if err != nil || resp.StatusCode != 200 {
						b.Fatal(err, resp)
					}
					_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 0))
					resp.Body.Close()
				}
			})
		}
	}
}

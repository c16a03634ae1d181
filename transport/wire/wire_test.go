package wire_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/transport/wire"
	"github.com/stretchr/testify/require"
)

// recorder notes what it hears, under a name.
type recorder struct {
	name string
	log  *[]string
}

func (r recorder) Opened(kind string) func() {
	*r.log = append(*r.log, r.name+" opened "+kind)
	return func() { *r.log = append(*r.log, r.name+" closed "+kind) }
}
func (r recorder) Delivered(n int)                     { *r.log = append(*r.log, r.name+" delivered") }
func (r recorder) Stage(stage string, d time.Duration) { *r.log = append(*r.log, r.name+" "+stage) }
func (r recorder) Refused(limit string)                { *r.log = append(*r.log, r.name+" refused "+limit) }
func (r recorder) AuthRefused(reason string)           { *r.log = append(*r.log, r.name+" auth "+reason) }
func (r recorder) Webhook(outcome string)              { *r.log = append(*r.log, r.name+" webhook "+outcome) }

func TestJoinTellsBothAndClosesInReverse(t *testing.T) {
	var log []string
	o := wire.Join(recorder{"a", &log}, recorder{"b", &log})
	closed := o.Opened("sse")
	o.Delivered(3)
	o.Stage("queued", time.Millisecond)
	o.Refused("origin")
	o.AuthRefused("expired")
	closed()
	require.Equal(t, []string{"a opened sse", "b opened sse", "a delivered", "b delivered", "a queued", "b queued",
		"a refused origin", "b refused origin", "a auth expired", "b auth expired", "b closed sse", "a closed sse"}, log)

	only := recorder{"c", &log}
	require.Equal(t, wire.Observer(only), wire.Join(nil, only))
	require.Equal(t, wire.Observer(only), wire.Join(only, nil))
	require.Equal(t, wire.Observer(wire.NopObserver{}), wire.Join(nil, nil))
}

func TestWithDefaults(t *testing.T) {
	c := wire.Context{}.WithDefaults()
	require.Equal(t, wire.DefaultHeartbeat, c.Heartbeat)
	require.Equal(t, wire.DefaultBodyTimeout, c.BodyTimeout)
	require.Equal(t, wire.DefaultMaxEventBytes, c.MaxEventBytes)
	require.NotNil(t, c.ReadBatch)
	require.Equal(t, wire.Observer(wire.NopObserver{}), c.Observer)
	set := wire.Context{Heartbeat: time.Second, BodyTimeout: 2 * time.Second, MaxEventBytes: 7}.WithDefaults()
	require.Equal(t, time.Second, set.Heartbeat)
	require.Equal(t, 2*time.Second, set.BodyTimeout)
	require.Equal(t, 7, set.MaxEventBytes)
}

// TestThreadChecksTheIDThenAuthorizes: a bad id is 400 naming the field,
// and Authorize is asked only for a good one.
func TestThreadChecksTheIDThenAuthorizes(t *testing.T) {
	var asked []string
	c := wire.Context{Authorize: func(w http.ResponseWriter, r *http.Request, thread string, create bool) bool {
		asked = append(asked, thread)
		if thread == "theirs" {
			w.WriteHeader(http.StatusForbidden)
			return false
		}
		return true
	}}
	r := httptest.NewRequest("POST", "/", nil)

	w := httptest.NewRecorder()
	require.False(t, c.Thread(w, r, "job_id", "", true))
	require.Equal(t, 400, w.Code)
	require.Contains(t, w.Body.String(), "job_id: ")
	require.Empty(t, asked)

	w = httptest.NewRecorder()
	require.False(t, c.Thread(w, r, "job_id", "theirs", true))
	require.Equal(t, 403, w.Code)

	require.True(t, c.Thread(httptest.NewRecorder(), r, "job_id", "mine", true))
	require.Equal(t, []string{"theirs", "mine"}, asked)
	require.True(t, (&wire.Context{}).Allowed(httptest.NewRecorder(), r, "any", false), "no Authorize: every request may")
}

// TestDefaultReadBatch reads a JSON array and NDJSON, and refuses more
// items than DefaultMaxBatchItems.
func TestDefaultReadBatch(t *testing.T) {
	c := wire.Context{}.WithDefaults()
	read := func(ct, body string) ([][]byte, int) {
		r := httptest.NewRequest("POST", "/", strings.NewReader(body))
		r.Header.Set("Content-Type", ct)
		w := httptest.NewRecorder()
		items, ok := c.ReadBatch(w, r, "batch", "items")
		if !ok {
			return nil, w.Code
		}
		return items, 200
	}
	items, code := read("application/json", `[{"a":1},{"b":2}]`)
	require.Equal(t, 200, code)
	require.Len(t, items, 2)
	items, code = read("application/x-ndjson", "{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n")
	require.Equal(t, 200, code)
	require.Len(t, items, 3)
	_, code = read("application/json", "["+strings.Repeat("{},", wire.DefaultMaxBatchItems)+"{}]")
	require.Equal(t, 400, code)
}

type twoRoutes struct{}

func (twoRoutes) Routes() []wire.Route {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
	outer := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Outer", "yes")
			next.ServeHTTP(w, r)
		})
	}
	return []wire.Route{
		{Method: "GET", Pattern: "/plain", Kind: wire.ReadRoute, Handler: ok},
		{Method: "POST", Pattern: "/wrapped", Kind: wire.CommandRoute, Handler: ok, Outer: outer},
	}
}

func TestMountServesEachRouteWithItsOuter(t *testing.T) {
	mux := http.NewServeMux()
	wire.Mount(mux, twoRoutes{})
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest("GET", "/plain", nil))
	require.Equal(t, "ok", w.Body.String())
	require.Empty(t, w.Header().Get("Outer"))
	w = httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest("POST", "/wrapped", nil))
	require.Equal(t, "yes", w.Header().Get("Outer"))
	w = httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest("GET", "/wrapped", nil))
	require.Equal(t, http.StatusMethodNotAllowed, w.Code)
}

// TestReadBodyRefusesAndCounts: a body over the limit is 413 and counted
// as body_size; one within it is read whole.
func TestReadBodyRefusesAndCounts(t *testing.T) {
	var log []string
	c := wire.Context{Observer: recorder{"m", &log}}.WithDefaults()
	w := httptest.NewRecorder()
	_, ok := c.ReadBody(w, httptest.NewRequest("POST", "/", strings.NewReader(strings.Repeat("x", 11))), 10, "request")
	require.False(t, ok)
	require.Equal(t, http.StatusRequestEntityTooLarge, w.Code)
	require.Equal(t, []string{"m refused body_size"}, log)
	body, ok := c.ReadBody(httptest.NewRecorder(), httptest.NewRequest("POST", "/", strings.NewReader("0123456789")), 10, "request")
	require.True(t, ok)
	require.Equal(t, "0123456789", string(body))
}

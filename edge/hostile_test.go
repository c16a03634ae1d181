package edge_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/edge"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/records"
	"github.com/agentstream/agentstream/transport"
	"github.com/stretchr/testify/require"
)

// looseUpstream is a hostile fake of a Platform API server: it resolves
// "." and ".." in the path after decoding it (as the JavaScript server's
// router does with %2e%2e), reads every spelling of a UUID as one (upper
// case, urn:uuid:, braces, as Python's uuid.UUID and PostgreSQL do),
// accepts connection upgrades, and keeps one store and one set of threads
// for every caller. What the edge lets through reaches it.
type looseUpstream struct {
	mu      sync.Mutex
	threads map[string]map[string]any // id: metadata
	items   map[string]map[string]any // "ns.ns/key": item
	seen    []string                  // "METHOD path" as resolved
	deleted []string                  // assistants deleted
}

func canonical(id string) string {
	s := strings.ToLower(id)
	s = strings.TrimPrefix(s, "urn:uuid:")
	s = strings.Trim(s, "{}")
	s = strings.ReplaceAll(s, "-", "")
	if len(s) != 32 {
		return id
	}
	return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:]
}

func (u *looseUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := path.Clean(r.URL.Path) // %2e%2e decoded, then resolved
	seg := strings.Split(strings.Trim(p, "/"), "/")
	if len(seg) >= 2 && seg[0] == "threads" {
		seg[1] = canonical(seg[1])
	}
	u.mu.Lock()
	u.seen = append(u.seen, r.Method+" /"+strings.Join(seg, "/"))
	u.mu.Unlock()
	if r.Header.Get("Upgrade") != "" {
		// A raw tunnel past every check, were it let through.
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + r.Header.Get("Upgrade") + "\r\n\r\n")
			_ = brw.Flush()
			conn.Close()
		}
		return
	}
	var body map[string]any
	_ = json.NewDecoder(r.Body).Decode(&body)
	write := func(v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case p == "/ok":
		write(map[string]bool{"ok": true})
	case p == "/hang":
		u.mu.Unlock()
		<-r.Context().Done()
		u.mu.Lock()
	case p == "/threads" && r.Method == "POST":
		id, _ := body["thread_id"].(string)
		if id == "" {
			id = records.NewUUID()
		}
		id = canonical(id)
		if md, ok := u.threads[id]; ok {
			write(map[string]any{"thread_id": id, "metadata": md}) // if_exists: do_nothing
			return
		}
		md, _ := body["metadata"].(map[string]any)
		u.threads[id] = md
		write(map[string]any{"thread_id": id, "metadata": md})
	case p == "/threads/search" && r.Method == "POST":
		want, _ := body["metadata"].(map[string]any)
		out := []any{}
		for id, md := range u.threads {
			if want["owner"] == nil || md["owner"] == want["owner"] {
				out = append(out, map[string]any{"thread_id": id, "metadata": md})
			}
		}
		write(out)
	case len(seg) >= 2 && seg[0] == "threads":
		md, ok := u.threads[seg[1]]
		switch {
		case !ok:
			w.WriteHeader(404)
			write(map[string]string{"detail": "not found"})
		case r.Method == "DELETE":
			delete(u.threads, seg[1])
			w.WriteHeader(204)
		case r.Method == "POST" && len(seg) == 3 && seg[2] == "copy":
			id := records.NewUUID()
			u.threads[id] = md
			write(map[string]any{"thread_id": id, "metadata": md})
		default:
			write(map[string]any{"thread_id": seg[1], "metadata": md, "values": map[string]any{"secret": "of " + fmt.Sprint(md["owner"])}})
		}
	case p == "/store/items" && r.Method == "PUT":
		ns, _ := body["namespace"].([]any)
		key := fmt.Sprint(ns...) + "/" + fmt.Sprint(body["key"])
		u.items[key] = map[string]any{"namespace": ns, "key": body["key"], "value": body["value"]}
		w.WriteHeader(204)
	case p == "/store/items" && r.Method == "DELETE":
		ns, _ := body["namespace"].([]any)
		delete(u.items, fmt.Sprint(ns...)+"/"+fmt.Sprint(body["key"]))
		w.WriteHeader(204)
	case p == "/store/items" && r.Method == "GET":
		var ns []any
		for _, l := range strings.Split(r.URL.Query().Get("namespace"), ".") {
			ns = append(ns, l)
		}
		it, ok := u.items[fmt.Sprint(ns...)+"/"+r.URL.Query().Get("key")]
		if !ok {
			write(nil)
			return
		}
		write(it)
	case p == "/store/items/search":
		prefix, _ := body["namespace_prefix"].([]any)
		items := []any{}
		for _, it := range u.items {
			ns := it["namespace"].([]any)
			if len(ns) >= len(prefix) && fmt.Sprint(ns[:len(prefix)]...) == fmt.Sprint(prefix...) {
				items = append(items, it)
			}
		}
		write(map[string]any{"items": items})
	case p == "/store/namespaces":
		out := [][]any{}
		for _, it := range u.items {
			out = append(out, it["namespace"].([]any))
		}
		write(map[string]any{"namespaces": out})
	case len(seg) == 2 && seg[0] == "assistants" && r.Method == "DELETE":
		u.deleted = append(u.deleted, seg[1])
		w.WriteHeader(204)
	case len(seg) == 2 && seg[0] == "assistants":
		write(map[string]any{"assistant_id": seg[1]})
	default:
		w.WriteHeader(404)
		write(map[string]string{"detail": "no route " + p})
	}
}

// hostileEdge is an edge with ann, bob and an admin in front of a
// looseUpstream.
type hostileEdge struct {
	url  string
	up   *looseUpstream
	edge *edge.Edge
}

func startHostile(t *testing.T, topts transport.Options, eopts edge.Options) *hostileEdge {
	t.Helper()
	up := &looseUpstream{threads: map[string]map[string]any{}, items: map[string]map[string]any{}}
	us := httptest.NewServer(up)
	t.Cleanup(us.Close)
	a, err := auth.New(context.Background(), auth.Config{APIKeys: map[string]auth.Principal{
		"k-ann": {Subject: "ann"}, "k-bob": {Subject: "bob"}, "k-root": {Subject: "root", Admin: true}}})
	require.NoError(t, err)
	topts.Auth = a
	ts, e := startEdgeOpts(t, server.Config{}, topts, us.URL, eopts)
	return &hostileEdge{url: ts.URL, up: up, edge: e}
}

// do sends a request as key, the path written as it is (no cleaning),
// and returns the status and body.
func (he *hostileEdge) do(t *testing.T, method, rawPath, body, key string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, he.url+"/", strings.NewReader(body))
	require.NoError(t, err)
	req.URL.Opaque = rawPath // sent as written: %2e%2e, %2f and all
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	} else {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	if key != "" {
		req.Header.Set("X-Api-Key", key)
	}
	resp, err := noRedirects.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// noRedirects is a client that does not follow redirects: the edge's
// router redirects a path with literal dot segments to its clean form,
// which is then authorized as it reads.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func (he *hostileEdge) seen() []string {
	he.up.mu.Lock()
	defer he.up.mu.Unlock()
	return append([]string(nil), he.up.seen...)
}

// newThread makes a thread through the edge as key and returns its id.
func (he *hostileEdge) newThread(t *testing.T, key string) string {
	t.Helper()
	status, body := he.do(t, "POST", "/threads", `{"metadata": {"topic": "x"}}`, key)
	require.Equal(t, 200, status, body)
	var th struct {
		ThreadID string `json:"thread_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &th))
	return th.ThreadID
}

// TestEdgeAuthorizesWhatTheUpstreamResolves: a pass-through path is
// authorized as the upstream will read it. Dot segments however encoded,
// encoded slashes and empty segments are refused before they reach it,
// in every position and with every method; a thread id spelled as a UUID
// in any but its canonical form is refused, so no spelling of Alice's
// thread is Bob's; and no request upgrades the connection past the edge.
func TestEdgeAuthorizesWhatTheUpstreamResolves(t *testing.T) {
	he := startHostile(t, transport.Options{}, edge.Options{})
	alice, bob := he.newThread(t, "k-ann"), he.newThread(t, "k-bob")
	status, body := he.do(t, "GET", "/threads/"+alice+"/state", "", "k-ann")
	require.Equal(t, 200, status, body)
	require.Contains(t, body, "of ann")
	status, _ = he.do(t, "GET", "/threads/"+alice+"/state", "", "k-bob")
	require.Equal(t, 403, status, "bob may not read ann's thread")

	before := len(he.seen())
	for _, method := range []string{"GET", "PATCH", "DELETE", "POST"} {
		for _, p := range []string{
			"/threads/" + bob + "/%2e%2e/" + alice + "/state",
			"/threads/" + bob + "/%2E%2E/" + alice + "/state",
			"/threads/" + bob + "/.%2e/" + alice,
			"/threads/" + bob + "/%2e/../" + alice,
			"/threads/" + bob + "%2f..%2f" + alice + "/state",
			"/threads/" + bob + "/..%5c" + alice + "/state",
			"/threads/" + bob + "/%2e%2e/search",
			"/threads/" + bob + "//state",
			"/assistants/x/%2e%2e/%2e%2e/threads/" + alice,
		} {
			status, body := he.do(t, method, p, "", "k-bob")
			if strings.Contains(p, "/../") || strings.Contains(p, "//") {
				// Literal dots: the router sends the client to the clean
				// path, which is authorized as it reads.
				require.Contains(t, []int{301, 307, 308, 400}, status, "%s %s: %s", method, p, body)
				continue
			}
			require.Equal(t, 400, status, "%s %s: %s", method, p, body)
		}
	}
	require.Len(t, he.seen(), before, "none of them reached the upstream")
	for _, spelling := range []string{
		strings.ToUpper(alice),
		"urn:uuid:" + alice,
		strings.ReplaceAll(alice, "-", ""),
		"{" + alice + "}",
		alice[:8] + alice[9:13] + "-" + alice[13:],
	} {
		status, body := he.do(t, "GET", "/threads/"+spelling+"/state", "", "k-bob")
		require.Equal(t, 400, status, "%s: %s", spelling, body)
		if server.ValidThreadID(spelling) == nil {
			require.Contains(t, body, alice, "the refusal names the canonical form")
		}
		status, _ = he.do(t, "POST", "/threads/"+spelling+"/commands", `{"id": 1, "method": "state.get", "params": {"namespace": []}}`, "k-bob")
		require.Equal(t, 400, status, "the edge's own thread routes read ids alike: %s", spelling)
		status, body = he.do(t, "POST", "/threads", `{"thread_id": "`+spelling+`", "if_exists": "do_nothing"}`, "k-bob")
		require.Equal(t, 400, status, "%s: %s", spelling, body)
	}
	require.Len(t, he.seen(), before, "nor did any other spelling")
	status, body = he.do(t, "DELETE", "/threads/"+alice, "", "k-bob")
	require.Equal(t, 403, status, body)
	status, _ = he.do(t, "GET", "/threads/"+alice, "", "k-ann")
	require.Equal(t, 200, status, "ann's thread is still there")

	// No upgrade: the fake would answer 101 and tunnel.
	before = len(he.seen())
	for _, h := range []http.Header{{"Upgrade": {"h2c"}, "Connection": {"Upgrade"}}, {"Upgrade": {"websocket"}}, {"Connection": {"keep-alive, Upgrade"}}} {
		req, _ := http.NewRequest("GET", he.url+"/threads/"+bob+"/history", nil)
		req.Header = h.Clone()
		req.Header.Set("X-Api-Key", "k-bob")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 400, resp.StatusCode, "%v", h)
	}
	require.Len(t, he.seen(), before)
}

// TestEdgeOwnsWhatItCreates: POST /threads through the edge makes the
// thread its creator's before the upstream makes it, whether the body
// names it or not; another principal's thread named in the body is
// refused whatever if_exists says; a copy is its maker's; searches are
// limited to the principal's own whatever the path.
func TestEdgeOwnsWhatItCreates(t *testing.T) {
	he := startHostile(t, transport.Options{}, edge.Options{})
	alice := he.newThread(t, "k-ann")
	// Bob comes first to ann's new thread: it is hers already.
	status, body := he.do(t, "GET", "/threads/"+alice, "", "k-bob")
	require.Equal(t, 403, status, body)
	status, _ = he.do(t, "GET", "/threads/"+alice, "", "k-ann")
	require.Equal(t, 200, status, "its creator is its owner")
	for _, ifExists := range []string{"do_nothing", "raise", ""} {
		status, body = he.do(t, "POST", "/threads", `{"thread_id": "`+alice+`", "if_exists": "`+ifExists+`"}`, "k-bob")
		require.Equal(t, 403, status, "if_exists %q: %s", ifExists, body)
		require.NotContains(t, body, "topic", "nothing of ann's thread answered")
	}
	named := records.NewUUID()
	status, body = he.do(t, "POST", "/threads", `{"thread_id": "`+named+`"}`, "k-bob")
	require.Equal(t, 200, status, body)
	status, _ = he.do(t, "GET", "/threads/"+named, "", "k-ann")
	require.Equal(t, 403, status, "a thread named in the body is its creator's too")
	// Admins' threads are theirs as well.
	root := he.newThread(t, "k-root")
	status, _ = he.do(t, "GET", "/threads/"+root, "", "k-bob")
	require.Equal(t, 403, status)

	status, body = he.do(t, "POST", "/threads/"+alice+"/copy", "", "k-ann")
	require.Equal(t, 200, status, body)
	var cp struct {
		ThreadID string `json:"thread_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &cp))
	status, _ = he.do(t, "GET", "/threads/"+cp.ThreadID, "", "k-bob")
	require.Equal(t, 403, status, "the copy is ann's")
	status, _ = he.do(t, "POST", "/threads/"+alice+"/copy", "", "k-bob")
	require.Equal(t, 403, status, "bob may not copy ann's thread")

	status, body = he.do(t, "POST", "/threads/search", `{"metadata": {"owner": "ann"}}`, "k-bob")
	require.Equal(t, 200, status, body)
	require.NotContains(t, body, alice, "a search is bob's own whatever it asks for")
	status, body = he.do(t, "POST", "/threads/%73earch", `{}`, "k-bob")
	require.Equal(t, 200, status, body)
	require.NotContains(t, body, alice, "spelled with an escape, still bob's search")
	status, body = he.do(t, "POST", "/threads/search", `{}`, "k-root")
	require.Equal(t, 200, status, body)
	require.Contains(t, body, alice, "an admin's search is not limited")
}

// TestEdgeKeepsEachPrincipalsStore: through the edge each principal's
// store items are its own (kept under a label of its own upstream, which
// it never sees), and only admins change assistants.
func TestEdgeKeepsEachPrincipalsStore(t *testing.T) {
	he := startHostile(t, transport.Options{}, edge.Options{})
	put := func(key, who string) {
		status, body := he.do(t, "PUT", "/store/items", `{"namespace": ["prefs"], "key": "theme", "value": {"who": "`+who+`"}}`, key)
		require.Equal(t, 204, status, body)
	}
	put("k-ann", "ann")
	status, body := he.do(t, "GET", "/store/items?namespace=prefs&key=theme", "", "k-ann")
	require.Equal(t, 200, status, body)
	require.JSONEq(t, `{"namespace": ["prefs"], "key": "theme", "value": {"who": "ann"}}`, body)
	status, body = he.do(t, "GET", "/store/items?namespace=prefs&key=theme", "", "k-bob")
	require.Equal(t, 200, status, body)
	require.Equal(t, "null", strings.TrimSpace(body), "bob does not read ann's item")
	status, body = he.do(t, "POST", "/store/items/search", `{"namespace_prefix": []}`, "k-bob")
	require.Equal(t, 200, status, body)
	require.JSONEq(t, `{"items": []}`, body, "nor find it")
	status, _ = he.do(t, "DELETE", "/store/items", `{"namespace": ["prefs"], "key": "theme"}`, "k-bob")
	require.Equal(t, 204, status)
	put("k-bob", "bob")
	status, body = he.do(t, "GET", "/store/items?namespace=prefs&key=theme", "", "k-ann")
	require.Equal(t, 200, status)
	require.Contains(t, body, `"ann"`, "bob's delete and put were his own")
	status, body = he.do(t, "POST", "/store/items/search", `{"namespace_prefix": ["prefs"]}`, "k-ann")
	require.Equal(t, 200, status)
	require.JSONEq(t, `{"items": [{"namespace": ["prefs"], "key": "theme", "value": {"who": "ann"}}]}`, body)
	status, body = he.do(t, "POST", "/store/namespaces", `{}`, "k-bob")
	require.Equal(t, 200, status)
	require.JSONEq(t, `{"namespaces": [["prefs"]]}`, body)
	status, body = he.do(t, "POST", "/store/items/search", `{"namespace_prefix": []}`, "k-root")
	require.Equal(t, 200, status)
	require.Contains(t, body, "principal:ann", "an admin sees the upstream's store as it is")

	status, _ = he.do(t, "GET", "/assistants/agent", "", "k-bob")
	require.Equal(t, 200, status, "assistants are read by all")
	for _, m := range []struct{ method, path string }{{"DELETE", "/assistants/agent"}, {"PATCH", "/assistants/agent"}, {"POST", "/assistants"}, {"POST", "/assistants/agent/latest"}} {
		body := ""
		if m.method != "DELETE" {
			body = `{}`
		}
		status, _ = he.do(t, m.method, m.path, body, "k-bob")
		require.Equal(t, 403, status, "%s %s", m.method, m.path)
	}
	status, body = he.do(t, "POST", "/assistants/search", `{}`, "k-bob")
	require.NotEqual(t, 403, status, body)
	status, _ = he.do(t, "DELETE", "/assistants/agent", "", "k-root")
	require.Equal(t, 204, status, "an admin's goes through")
	he.up.mu.Lock()
	require.Equal(t, []string{"agent"}, he.up.deleted)
	he.up.mu.Unlock()
	for _, p := range []string{"/some/custom/route", "/Threads/search", "/threads/search/x", "/threads/count/x"} {
		status, _ = he.do(t, "POST", p, `{}`, "k-bob")
		require.Equal(t, 403, status, "%s: a route the edge has no rule for is an admin's", p)
	}

}

// TestEdgePassThroughIsBounded: pass-through routes read bodies under the
// limits of every route (size, depth, time, a JSON Content-Type), an
// upstream that does not answer is 504 within the flag's time, and a
// client's bad body is 400, not the upstream's failure.
func TestEdgePassThroughIsBounded(t *testing.T) {
	he := startHostile(t, transport.Options{BodyTimeout: 300 * time.Millisecond, MaxCommandBody: 1 << 20}, edge.Options{ResponseTimeout: 300 * time.Millisecond})
	before := len(he.seen())
	big := `{"namespace": ["a"], "key": "k", "value": {"v": "` + strings.Repeat("x", 5<<20) + `"}}`
	status, body := he.do(t, "PUT", "/store/items", big, "k-ann")
	require.Equal(t, 413, status, body)
	deep := `{"namespace": ["a"], "key": "k", "value": ` + strings.Repeat("[", 9000) + strings.Repeat("]", 9000) + `}`
	status, body = he.do(t, "PUT", "/store/items", deep, "k-ann")
	require.Equal(t, 400, status, body)
	require.Contains(t, body, "nested deeper")
	req, _ := http.NewRequest("PATCH", he.url+"/threads/"+records.NewUUID(), strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set("X-Api-Key", "k-ann")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 415, resp.StatusCode, "PATCH says its body is JSON")
	require.Len(t, he.seen(), before, "none reached the upstream")

	// An upstream that never answers: 504 within the timeout.
	start := time.Now()
	status, body = he.do(t, "GET", "/hang", "", "k-root")
	require.Equal(t, 504, status, body)
	require.Equal(t, int64(1), he.edge.Timeouts(), "counted")
	require.Less(t, time.Since(start), 10*time.Second)

	raw := func(request string) string {
		c, err := net.Dial("tcp", strings.TrimPrefix(he.url, "http://"))
		require.NoError(t, err)
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = io.WriteString(c, request)
		require.NoError(t, err)
		line, err := bufio.NewReader(c).ReadString('\n')
		require.NoError(t, err, "answered, not held")
		return line
	}
	// A trickled body: 408 once the body timeout passed.
	line := raw("PUT /store/items HTTP/1.1\r\nHost: x\r\nX-Api-Key: k-ann\r\nContent-Type: application/json\r\nContent-Length: 200000\r\n\r\n{\"namespace\"")
	require.Contains(t, line, " 408 ")
	// A bad chunked body: 400.
	line = raw("PUT /store/items HTTP/1.1\r\nHost: x\r\nX-Api-Key: k-ann\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n")
	require.Contains(t, line, " 400 ")
	// Before authentication too: no credential, a trickled body, answered
	// (401) within the body timeout rather than held.
	start = time.Now()
	line = raw("POST /threads HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 200000\r\n\r\n{")
	require.Contains(t, line, " 401 ")
	require.Less(t, time.Since(start), 5*time.Second)
	require.Len(t, he.seen(), before+1, "only /hang reached the upstream")
}

// TestEdgeAuthorizesARunsThread: a run without a thread route that names
// its thread in the body is authorized for it; one that names another
// principal's is refused before it reaches the upstream, in a batch too.
func TestEdgeAuthorizesARunsThread(t *testing.T) {
	he := startHostile(t, transport.Options{}, edge.Options{})
	alice := he.newThread(t, "k-ann")
	before := len(he.seen())
	for _, p := range []string{"/runs", "/runs/wait", "/runs/stream"} {
		status, body := he.do(t, "POST", p, `{"assistant_id": "agent", "thread_id": "`+alice+`"}`, "k-bob")
		require.Equal(t, 403, status, "%s: %s", p, body)
		status, _ = he.do(t, "POST", p, `{"assistant_id": "agent", "thread_id": "`+strings.ToUpper(alice)+`"}`, "k-bob")
		require.Equal(t, 400, status, p)
	}
	status, body := he.do(t, "POST", "/runs/batch", `[{"assistant_id": "agent"}, {"assistant_id": "agent", "thread_id": "`+alice+`"}]`, "k-bob")
	require.Equal(t, 403, status, body)
	require.Len(t, he.seen(), before, "none reached the upstream")
	status, _ = he.do(t, "POST", "/runs", `{"assistant_id": "agent", "thread_id": "`+alice+`"}`, "k-ann")
	require.NotEqual(t, 403, status, "ann's own thread")
}

package langgraph_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/internal/testkit/redistest"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport"
	"github.com/agentstream/agentstream/transport/langgraph"
	"github.com/stretchr/testify/require"
)

// getItem reads an item (nil when the answer is null).
func getItem(t *testing.T, n *node, ns, key, apiKey string) *langgraph.LgItem {
	t.Helper()
	var it *langgraph.LgItem
	require.Equal(t, 200, call(t, "GET", n.url+"/store/items?namespace="+ns+"&key="+key, "", apiKey, &it))
	return it
}

func searchKeys(t *testing.T, n *node, body, apiKey string) []string {
	t.Helper()
	var list langgraph.LgItemList
	require.Equal(t, 200, call(t, "POST", n.url+"/store/items/search", body, apiKey, &list))
	keys := []string{}
	for _, it := range list.Items {
		keys = append(keys, strings.Join(it.Namespace, ".")+"/"+it.Key)
	}
	return keys
}

func namespaces(t *testing.T, n *node, body, apiKey string) []string {
	t.Helper()
	var list langgraph.LgNamespaceList
	require.Equal(t, 200, call(t, "POST", n.url+"/store/namespaces", body, apiKey, &list))
	out := []string{}
	for _, ns := range list.Namespaces {
		out = append(out, strings.Join(ns, "."))
	}
	return out
}

// storeScenario puts, reads, replaces, searches (prefix, filters, pages),
// lists namespaces (prefix, suffix, wildcard, depth), refuses bad input
// and deletes, on n; it leaves prefs.ann/theme and docs/a.
func storeScenario(t *testing.T, n *node) {
	for _, put := range []string{
		`{"namespace": ["prefs", "ann"], "key": "theme", "value": {"color": "dark", "n": 1}}`,
		`{"namespace": ["prefs", "ann"], "key": "lang", "value": {"v": "en", "n": 2}}`,
		`{"namespace": ["prefs", "bob"], "key": "theme", "value": {"color": "light", "n": 3}, "index": false}`,
		`{"namespace": ["docs"], "key": "a", "value": {"text": "hello", "tags": ["x"]}}`,
	} {
		require.Equal(t, 204, call(t, "PUT", n.url+"/store/items", put, "", nil), put)
	}
	it := getItem(t, n, "prefs.ann", "theme", "")
	require.NotNil(t, it)
	require.Equal(t, []string{"prefs", "ann"}, it.Namespace)
	require.Equal(t, map[string]any{"color": "dark", "n": float64(1)}, it.Value)
	require.Equal(t, it.CreatedAt, it.UpdatedAt)
	time.Sleep(5 * time.Millisecond)
	require.Equal(t, 204, call(t, "PUT", n.url+"/store/items", `{"namespace": ["prefs", "ann"], "key": "theme", "value": {"color": "blue", "n": 1}}`, "", nil))
	again := getItem(t, n, "prefs.ann", "theme", "")
	require.Equal(t, "blue", again.Value["color"])
	require.Equal(t, it.CreatedAt, again.CreatedAt, "a replaced item keeps when it was made")
	require.Greater(t, again.UpdatedAt, it.UpdatedAt)
	require.Nil(t, getItem(t, n, "prefs.ann", "nope", ""), "an item that is not there is null")

	require.Equal(t, []string{"prefs.ann/lang", "prefs.ann/theme", "prefs.bob/theme"}, searchKeys(t, n, `{"namespace_prefix": ["prefs"]}`, ""))
	require.Equal(t, []string{"docs/a", "prefs.ann/lang", "prefs.ann/theme", "prefs.bob/theme"}, searchKeys(t, n, `{"namespace_prefix": []}`, ""))
	require.Equal(t, []string{"prefs.ann/lang", "prefs.ann/theme"}, searchKeys(t, n, `{"namespace_prefix": ["prefs", "ann"]}`, ""))
	require.Empty(t, searchKeys(t, n, `{"namespace_prefix": ["pref"]}`, ""), "a prefix is whole labels")
	require.Equal(t, []string{"prefs.bob/theme"}, searchKeys(t, n, `{"namespace_prefix": ["prefs"], "filter": {"color": "light"}}`, ""))
	require.Equal(t, []string{"prefs.ann/lang", "prefs.bob/theme"}, searchKeys(t, n, `{"namespace_prefix": ["prefs"], "filter": {"n": {"$gte": 2}}}`, ""))
	require.Equal(t, []string{"prefs.ann/theme"}, searchKeys(t, n, `{"namespace_prefix": ["prefs"], "filter": {"n": {"$in": [1, 7]}}}`, ""))
	require.Equal(t, []string{"docs/a"}, searchKeys(t, n, `{"namespace_prefix": [], "filter": {"tags": ["x"]}}`, ""))
	require.Equal(t, []string{"prefs.ann/theme"}, searchKeys(t, n, `{"namespace_prefix": ["prefs"], "limit": 1, "offset": 1}`, ""))
	require.Empty(t, searchKeys(t, n, `{"namespace_prefix": ["prefs"], "limit": 0}`, ""))

	require.Equal(t, []string{"docs", "prefs.ann", "prefs.bob"}, namespaces(t, n, `{}`, ""))
	require.Equal(t, []string{"docs", "prefs"}, namespaces(t, n, `{"max_depth": 1}`, ""))
	require.Equal(t, []string{"prefs.ann", "prefs.bob"}, namespaces(t, n, `{"prefix": ["prefs"]}`, ""))
	require.Equal(t, []string{"prefs.bob"}, namespaces(t, n, `{"suffix": ["bob"]}`, ""))
	require.Equal(t, []string{"prefs.ann"}, namespaces(t, n, `{"prefix": ["*", "ann"]}`, ""))
	require.Equal(t, []string{"prefs.ann"}, namespaces(t, n, `{"limit": 1, "offset": 1}`, ""))

	require.Equal(t, 422, call(t, "PUT", n.url+"/store/items", `{"namespace": ["a.b"], "key": "k", "value": {}}`, "", nil))
	require.Equal(t, 400, call(t, "PUT", n.url+"/store/items", `{"namespace": [], "key": "k", "value": {}}`, "", nil))
	require.Equal(t, 422, call(t, "PUT", n.url+"/store/items", `{"namespace": ["a"], "key": "k", "value": 3}`, "", nil))
	require.Equal(t, 422, call(t, "PUT", n.url+"/store/items", `{"namespace": ["a"], "key": "", "value": {}}`, "", nil))
	require.Equal(t, 422, call(t, "PUT", n.url+"/store/items", `{"namespace": ["a"], "key": "k\u0000", "value": {}}`, "", nil))
	require.Equal(t, 422, call(t, "PUT", n.url+"/store/items", `{"namespace": ["a"], "value": {}}`, "", nil))
	for _, ttl := range []string{"1e-12", "0", "-5", "0.016"} { // under a second: it would never expire
		require.Equal(t, 422, call(t, "PUT", n.url+"/store/items", `{"namespace": ["a"], "key": "k", "value": {}, "ttl": `+ttl+`}`, "", nil), "ttl %s", ttl)
	}
	require.Equal(t, 422, call(t, "PUT", n.url+"/store/items", `{"namespace": ["a\u0085b"], "key": "k", "value": {}}`, "", nil), "a label with U+0085")
	require.Equal(t, 422, call(t, "PUT", n.url+"/store/items", `{"namespace": ["a"], "key": "k\u2028", "value": {}}`, "", nil), "a key with U+2028")
	for _, method := range []string{"PUT", "DELETE"} { // every method with a body says it is JSON, as POST does
		req, _ := http.NewRequest(method, n.url+"/store/items", strings.NewReader(`{"namespace": ["a"], "key": "k", "value": {}}`))
		req.Header.Set("Content-Type", "text/plain")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 415, resp.StatusCode, method)
	}
	require.Equal(t, 422, call(t, "GET", n.url+"/store/items?namespace=a", "", "", nil), "a get needs a key")
	require.Equal(t, 400, call(t, "GET", n.url+"/store/items?key=k", "", "", nil), "and a namespace")

	require.Equal(t, 204, call(t, "DELETE", n.url+"/store/items", `{"namespace": ["prefs", "bob"], "key": "theme"}`, "", nil))
	require.Equal(t, 204, call(t, "DELETE", n.url+"/store/items", `{"namespace": ["prefs", "bob"], "key": "theme"}`, "", nil), "deleting none is no error")
	require.Equal(t, 204, call(t, "DELETE", n.url+"/store/items", `{"namespace": ["prefs", "ann"], "key": "lang"}`, "", nil))
	require.Nil(t, getItem(t, n, "prefs.bob", "theme", ""))
	require.Equal(t, []string{"docs", "prefs.ann"}, namespaces(t, n, `{}`, ""))

	// An item with a TTL (minutes) is gone once it ran out.
	require.Equal(t, 204, call(t, "PUT", n.url+"/store/items", `{"namespace": ["tmp"], "key": "k", "value": {}, "ttl": 0.02}`, "", nil))
	require.NotNil(t, getItem(t, n, "tmp", "k", ""))
	// A read refreshes it by default: read every 300 ms, it lives past
	// its 1.2 s.
	for range 6 {
		time.Sleep(300 * time.Millisecond)
		require.NotNil(t, getItem(t, n, "tmp", "k", ""), "a read renews the TTL")
	}
	require.Eventually(t, func() bool { return getItem(t, n, "tmp", "k&refresh_ttl=false", "") == nil }, 5*time.Second, 20*time.Millisecond,
		"a read that does not refresh leaves the TTL as it was")
	require.Equal(t, []string{"docs/a", "prefs.ann/theme"}, searchKeys(t, n, `{"namespace_prefix": []}`, ""))
}

// TestStore: the store's routes on each engine; the disk's items outlive
// a restart; on Redis an item put on one node is read, searched and
// deleted on another.
func TestStore(t *testing.T) {
	t.Run("memory", func(t *testing.T) { storeScenario(t, start(t, server.Config{}, transport.Options{})) })
	t.Run("disk", func(t *testing.T) {
		dir := t.TempDir()
		open := func() *node { return diskNode(t, dir) }
		n := open()
		storeScenario(t, n)
		before := getItem(t, n, "prefs.ann", "theme", "")
		n.stop()
		n = open()
		require.Equal(t, before, getItem(t, n, "prefs.ann", "theme", ""), "an item outlives a restart")
		require.Equal(t, []string{"docs/a", "prefs.ann/theme"}, searchKeys(t, n, `{"namespace_prefix": []}`, ""))
	})
	t.Run("redis", func(t *testing.T) {
		rs := redistest.Start(t)
		open := func() *node { return redisNode(t, rs) }
		a, b := open(), open()
		storeScenario(t, a)
		require.Equal(t, []string{"docs/a", "prefs.ann/theme"}, searchKeys(t, b, `{"namespace_prefix": []}`, ""), "the store is shared")
		require.Equal(t, "blue", getItem(t, b, "prefs.ann", "theme", "").Value["color"])
		require.Equal(t, 204, call(t, "DELETE", b.url+"/store/items", `{"namespace": ["docs"], "key": "a"}`, "", nil))
		require.Nil(t, getItem(t, a, "docs", "a", ""))
	})
}

// TestStoreIsEachPrincipals: with authentication on, a principal's items
// are its own (another putting under the same namespace and key has its
// own item); namespaces a credential shares are one store for every
// principal granted them and for admins; search and namespaces list only
// what the principal sees.
func TestStoreIsEachPrincipals(t *testing.T) {
	a, err := auth.New(context.Background(), auth.Config{APIKeys: map[string]auth.Principal{
		"k-ann": {Subject: "ann", Store: []string{"team"}}, "k-bob": {Subject: "bob", Store: []string{"team.*"}},
		"k-eve": {Subject: "eve"}, "k-root": {Subject: "root", Admin: true},
	}})
	require.NoError(t, err)
	n := start(t, server.Config{}, transport.Options{Auth: a})
	put := func(key, body string) {
		t.Helper()
		require.Equal(t, 204, call(t, "PUT", n.url+"/store/items", body, key, nil), body)
	}
	require.Equal(t, 401, call(t, "PUT", n.url+"/store/items", `{"namespace": ["me"], "key": "k", "value": {}}`, "", nil))
	put("k-ann", `{"namespace": ["me"], "key": "k", "value": {"who": "ann"}}`)
	put("k-eve", `{"namespace": ["me"], "key": "k", "value": {"who": "eve"}}`)
	put("k-ann", `{"namespace": ["team", "plans"], "key": "q1", "value": {"by": "ann"}}`)
	put("k-root", `{"namespace": ["global"], "key": "g", "value": {"by": "root"}}`)
	require.Equal(t, "ann", getItem(t, n, "me", "k", "k-ann").Value["who"])
	require.Equal(t, "eve", getItem(t, n, "me", "k", "k-eve").Value["who"], "the same namespace and key is each principal's own")
	require.Nil(t, getItem(t, n, "me", "k", "k-bob"))
	require.Nil(t, getItem(t, n, "me", "k", "k-root"), "an admin's items are the shared store's")
	require.Equal(t, "ann", getItem(t, n, "team.plans", "q1", "k-bob").Value["by"], "a shared namespace is one store")
	require.Equal(t, "ann", getItem(t, n, "team.plans", "q1", "k-root").Value["by"])
	require.Nil(t, getItem(t, n, "team.plans", "q1", "k-eve"), "eve is not granted team: hers is her own")
	require.Equal(t, []string{"me/k", "team.plans/q1"}, searchKeys(t, n, `{"namespace_prefix": []}`, "k-ann"))
	require.Equal(t, []string{"me/k"}, searchKeys(t, n, `{"namespace_prefix": []}`, "k-eve"))
	require.Equal(t, []string{"team.plans/q1"}, searchKeys(t, n, `{"namespace_prefix": []}`, "k-bob"), "bob sees the shared items he is granted, not root's")
	require.Equal(t, []string{"global/g", "team.plans/q1"}, searchKeys(t, n, `{"namespace_prefix": []}`, "k-root"))
	require.Equal(t, []string{"me", "team.plans"}, namespaces(t, n, `{}`, "k-ann"))
	require.Equal(t, []string{"me"}, namespaces(t, n, `{}`, "k-eve"))
	require.Equal(t, 204, call(t, "DELETE", n.url+"/store/items", `{"namespace": ["me"], "key": "k"}`, "k-eve", nil))
	require.Equal(t, "ann", getItem(t, n, "me", "k", "k-ann").Value["who"], "eve deleted her own item, not ann's")
}

// TestStoreIsBounded: past MaxStoreItems a new item is refused (and
// counted), a replaced one is not; an expired one makes room.
func TestStoreIsBounded(t *testing.T) {
	n := start(t, server.Config{MaxStoreItems: 2}, transport.Options{})
	require.Equal(t, 204, call(t, "PUT", n.url+"/store/items", `{"namespace": ["a"], "key": "1", "value": {}}`, "", nil))
	require.Equal(t, 204, call(t, "PUT", n.url+"/store/items", `{"namespace": ["a"], "key": "2", "value": {}, "ttl": 0.017}`, "", nil))
	require.Equal(t, 204, call(t, "PUT", n.url+"/store/items", `{"namespace": ["a"], "key": "1", "value": {"v": 2}}`, "", nil))
	require.Eventually(t, func() bool { return getItem(t, n, "a", "2&refresh_ttl=false", "") == nil }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, 204, call(t, "PUT", n.url+"/store/items", `{"namespace": ["a"], "key": "3", "value": {}}`, "", nil), "the expired item made room")
	require.Equal(t, 429, call(t, "PUT", n.url+"/store/items", `{"namespace": ["a"], "key": "4", "value": {}}`, "", nil))
	require.Equal(t, uint64(1), n.srv.Metrics().Refused[server.LimitStoreItems])
}

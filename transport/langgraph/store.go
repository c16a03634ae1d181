package langgraph

import (
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/items"
)

// The long-term store's routes (client.store.*), on the server's
// ItemStore: the items of the principal that asks (items.ItemScope).

// lgItem is an item as the wire shows it.
func lgItem(it server.StoreItem) LgItem {
	return LgItem{Namespace: it.Namespace, Key: it.Key, Value: orEmpty(it.Value), CreatedAt: stamp(it.CreatedAt), UpdatedAt: stamp(it.UpdatedAt)}
}

// putItem serves PUT /store/items.
func (h *Handler) putItem(w http.ResponseWriter, r *http.Request) {
	var req LgStorePut
	if !h.body(w, r, &req) {
		return
	}
	if req.Index != nil && req.Index != false {
		fail(w, http.StatusUnprocessableEntity, "index: not served (the store has no semantic index: items are found by namespace and filter; false or null leaves an item out of an index)")
		return
	}
	var ttl time.Duration
	if req.TTL != nil {
		minutes := *req.TTL
		if minutes > float64(math.MaxInt64/int64(time.Minute)) {
			fail(w, http.StatusUnprocessableEntity, "ttl: at most %d minutes", math.MaxInt64/int64(time.Minute))
			return
		}
		ttl = time.Duration(minutes * float64(time.Minute))
		if ttl < time.Second {
			// Rounded to nothing, it would keep the item for ever.
			fail(w, http.StatusUnprocessableEntity, "ttl: at least 1 second (%g minutes); leave it out for an item that does not expire", 1.0/60)
			return
		}
	}
	if err := h.store.Put(r.Context(), auth.FromContext(r.Context()), req.Namespace, req.Key, req.Value, ttl); err != nil {
		serverError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// getItem serves GET /store/items?namespace=a.b&key=k: the item, or null
// (as the reference answers) when there is none.
func (h *Handler) getItem(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !q.Has("key") {
		fail(w, http.StatusUnprocessableEntity, "key: required")
		return
	}
	var ns []string
	if v := q.Get("namespace"); v != "" {
		ns = strings.Split(v, ".")
	}
	refresh := true
	if v := q.Get("refresh_ttl"); v != "" {
		refresh = v == "true" || v == "1" || strings.EqualFold(v, "yes") || strings.EqualFold(v, "True")
	}
	it, ok, err := h.store.Get(r.Context(), auth.FromContext(r.Context()), ns, q.Get("key"), refresh)
	if err != nil {
		serverError(w, err)
		return
	}
	if !ok {
		write(w, http.StatusOK, nil)
		return
	}
	write(w, http.StatusOK, lgItem(it))
}

// deleteItem serves DELETE /store/items.
func (h *Handler) deleteItem(w http.ResponseWriter, r *http.Request) {
	var req LgStoreDelete
	if !h.body(w, r, &req) {
		return
	}
	var ns []string
	if req.Namespace != nil {
		ns = *req.Namespace
	}
	if err := h.store.Delete(r.Context(), auth.FromContext(r.Context()), ns, req.Key); err != nil {
		serverError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// searchItems serves POST /store/items/search.
func (h *Handler) searchItems(w http.ResponseWriter, r *http.Request) {
	var req LgStoreSearch
	if !h.body(w, r, &req) {
		return
	}
	if req.Query != nil && *req.Query != "" {
		fail(w, http.StatusUnprocessableEntity, "query: not served (the store has no semantic search: filter selects items by their values)")
		return
	}
	q := items.ItemSearch{Prefix: req.NamespacePrefix, Limit: 10, Refresh: req.RefreshTTL != nil && *req.RefreshTTL}
	if req.Filter != nil {
		q.Filter = *req.Filter
	}
	if req.Limit != nil {
		if *req.Limit == 0 {
			write(w, http.StatusOK, LgItemList{Items: []LgItem{}})
			return
		}
		q.Limit = int(*req.Limit)
	}
	if req.Offset != nil {
		q.Offset = int(min(*req.Offset, math.MaxInt32))
	}
	items, err := h.store.Search(r.Context(), auth.FromContext(r.Context()), q)
	if err != nil {
		serverError(w, err)
		return
	}
	out := LgItemList{Items: make([]LgItem, len(items))}
	for i, it := range items {
		out.Items[i] = lgItem(it)
	}
	write(w, http.StatusOK, out)
}

// listNamespaces serves POST /store/namespaces.
func (h *Handler) listNamespaces(w http.ResponseWriter, r *http.Request) {
	var req LgStoreNamespaces
	if !h.body(w, r, &req) {
		return
	}
	q := items.NamespaceQuery{Prefix: req.Prefix, Suffix: req.Suffix, Limit: 100}
	if req.MaxDepth != nil {
		q.MaxDepth = int(*req.MaxDepth)
	}
	if req.Limit != nil {
		if *req.Limit == 0 {
			write(w, http.StatusOK, LgNamespaceList{Namespaces: [][]string{}})
			return
		}
		q.Limit = int(*req.Limit)
	}
	if req.Offset != nil {
		q.Offset = int(min(*req.Offset, math.MaxInt32))
	}
	list, err := h.store.Namespaces(r.Context(), auth.FromContext(r.Context()), q)
	if err != nil {
		serverError(w, err)
		return
	}
	write(w, http.StatusOK, LgNamespaceList{Namespaces: list})
}

// Package items is the LangGraph Platform API's store (the long-term
// memory of its /store routes) on the core: items under namespaces, each
// principal's own unless its token grants it shared namespaces, with
// TTLs, searches by filter and the listing of namespaces, under
// Config.MaxStoreItems. It keeps them in the engine's ItemStore
// (server.EngineStores.Items).
package items

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/internal/jsonval"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/records"
)

// Store is a server's items (Of).
type Store struct {
	host server.ResourceHost
	st   server.ItemStore
	cfg  server.Config
	// mu serializes the changes of items (Put), so that the count checked
	// is the count written to.
	mu sync.Mutex
}

type sharedKey struct{}

// Of is the server's Store, the same one on every call.
func Of(srv *server.Server) *Store {
	h := srv.Resources()
	return h.Shared(sharedKey{}, func() any { return &Store{host: h, st: h.Stores().Items, cfg: h.Config()} }).(*Store)
}

// engine is the engine's ItemStore, or server.ErrNoItemStore.
func (s *Store) engine() (server.ItemStore, error) {
	if s.st == nil {
		return nil, server.ErrNoItemStore
	}
	return s.st, nil
}

// Grants lists a principal's shared namespaces: namespace prefixes,
// labels joined by ".", "*" matching any one label.
func grants(p *auth.Principal, namespace []string) bool {
	for _, g := range p.Store {
		labels := strings.Split(g, ".")
		if len(labels) > len(namespace) {
			continue
		}
		ok := true
		for i, l := range labels {
			if l != "*" && l != namespace[i] {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// ItemScope is the scope p's item in namespace is kept in. Without
// authentication, for an admin, and in a namespace p's credential grants
// (auth.Principal.Store), the shared store; otherwise p's own, which no
// other principal sees.
func ItemScope(p *auth.Principal, namespace []string) string {
	if p == nil || p.Admin || grants(p, namespace) {
		return ""
	}
	if strings.HasPrefix(p.Subject, "\x00") {
		// Scopes beginning with NUL are the server's own (the assistants,
		// server/registry): such a subject's items are kept apart.
		return "\x01" + p.Subject
	}
	return p.Subject
}

// PutItem writes p's item (ItemScope says where). ttl, when more than 0,
// makes it expire that long after it was written or read with a refresh.
// A new item past Config.MaxStoreItems is server.ErrTooManyItems.
func (s *Store) Put(ctx context.Context, p *auth.Principal, namespace []string, key string, value map[string]any, ttl time.Duration) error {
	if err := records.ValidItemNamespace(namespace, false, &key); err != nil {
		return err
	}
	st, err := s.engine()
	if err != nil {
		return err
	}
	scope := ItemScope(p, namespace)
	s.mu.Lock()
	defer s.mu.Unlock()
	old, exists, err := st.GetItem(ctx, scope, namespace, key)
	if err != nil {
		return server.StoreError(err)
	}
	now := time.Now().UTC()
	it := server.StoreItem{Scope: scope, Namespace: namespace, Key: key, Value: value, CreatedAt: now, UpdatedAt: now, TTL: ttl}
	if exists {
		it.CreatedAt = old.CreatedAt
	} else {
		n, err := st.CountItems(ctx)
		if err == nil && n >= s.cfg.MaxStoreItems {
			// Expired items count until deleted: delete them, count again.
			if err = st.DeleteExpired(ctx, now); err == nil {
				n, err = st.CountItems(ctx)
			}
		}
		if err != nil {
			return server.StoreError(err)
		}
		if n >= s.cfg.MaxStoreItems {
			s.host.Refused(server.LimitStoreItems)
			return fmt.Errorf("%w (%d, --max-store-items)", server.ErrTooManyItems, s.cfg.MaxStoreItems)
		}
	}
	if ttl > 0 {
		it.ExpiresAt = now.Add(ttl)
	}
	return server.StoreError(st.PutItem(ctx, it))
}

// GetItem returns p's item; ok is false when there is none. refresh
// renews an item's TTL.
func (s *Store) Get(ctx context.Context, p *auth.Principal, namespace []string, key string, refresh bool) (server.StoreItem, bool, error) {
	if err := records.ValidItemNamespace(namespace, false, &key); err != nil {
		return server.StoreItem{}, false, err
	}
	st, err := s.engine()
	if err != nil {
		return server.StoreItem{}, false, err
	}
	it, ok, err := st.GetItem(ctx, ItemScope(p, namespace), namespace, key)
	if err != nil || !ok {
		return server.StoreItem{}, false, server.StoreError(err)
	}
	if refresh {
		s.refreshItems(ctx, st, []server.StoreItem{it})
	}
	return it, true, nil
}

// refreshItems renews the TTL of those of items that have one.
func (s *Store) refreshItems(ctx context.Context, st server.ItemStore, items []server.StoreItem) {
	now := time.Now().UTC()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range items {
		if it.TTL <= 0 {
			continue
		}
		// The item as it is now: one written since keeps its own.
		cur, ok, err := st.GetItem(ctx, it.Scope, it.Namespace, it.Key)
		if err != nil || !ok || !cur.UpdatedAt.Equal(it.UpdatedAt) {
			continue
		}
		cur.ExpiresAt = now.Add(cur.TTL)
		_ = st.PutItem(ctx, cur) // a failed renewal leaves the old expiry
	}
}

// DeleteItem deletes p's item (none is no error).
func (s *Store) Delete(ctx context.Context, p *auth.Principal, namespace []string, key string) error {
	if err := records.ValidItemNamespace(namespace, false, &key); err != nil {
		return err
	}
	st, err := s.engine()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return server.StoreError(st.DeleteItem(ctx, ItemScope(p, namespace), namespace, key))
}

// ItemSearch is a search of the store (SearchItems).
type ItemSearch struct {
	// Prefix: items whose namespace begins with it; all when empty.
	Prefix []string
	// Filter: items whose value has each member equal to it, or, for a
	// member given as an object of operators ($eq, $ne, $gt, $gte, $lt,
	// $lte, $in, $nin), meeting each.
	Filter map[string]any
	Limit  int // 10 when 0
	Offset int
	// Refresh renews the TTL of the items found.
	Refresh bool
}

// scopes are the scopes p searches: its own and, for a principal with
// shared namespaces, the shared store's (of which only the granted
// namespaces are seen).
func scopes(p *auth.Principal) []string {
	own := ItemScope(p, nil)
	if own != "" && len(p.Store) > 0 {
		return []string{own, ""}
	}
	return []string{own}
}

// sees reports whether p sees an item of scope in namespace.
func sees(p *auth.Principal, scope string, namespace []string) bool {
	return scope != "" || p == nil || p.Admin || grants(p, namespace)
}

// scanVisible calls fn with every item p sees under prefix, in namespace
// then key order, its own and the shared ones it is granted merged, until
// fn returns false.
func (s *Store) scanVisible(ctx context.Context, st server.ItemStore, p *auth.Principal, prefix []string, fn func(server.StoreItem) bool) error {
	sc := scopes(p)
	if len(sc) == 1 {
		return st.ScanItems(ctx, sc[0], prefix, fn)
	}
	// Two scopes: each read whole under the prefix (what a principal
	// keeps is bounded by MaxStoreItems), merged in order.
	var lists [2][]server.StoreItem
	for i, scope := range sc {
		if err := st.ScanItems(ctx, scope, prefix, func(it server.StoreItem) bool {
			if sees(p, scope, it.Namespace) {
				lists[i] = append(lists[i], it)
			}
			return true
		}); err != nil {
			return err
		}
	}
	merged := append(lists[0], lists[1]...)
	slices.SortStableFunc(merged, compareItems)
	for _, it := range merged {
		if !fn(it) {
			break
		}
	}
	return nil
}

func compareItems(a, b server.StoreItem) int {
	if c := slices.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return cmp.Compare(a.Key, b.Key)
}

// SearchItems returns the items p sees that the search selects, in
// namespace then key order.
func (s *Store) Search(ctx context.Context, p *auth.Principal, q ItemSearch) ([]server.StoreItem, error) {
	if err := records.ValidItemNamespace(q.Prefix, true, nil); err != nil {
		return nil, err
	}
	st, err := s.engine()
	if err != nil {
		return nil, err
	}
	if q.Limit <= 0 {
		q.Limit = 10
	}
	out := []server.StoreItem{}
	skip := q.Offset
	err = s.scanVisible(ctx, st, p, q.Prefix, func(it server.StoreItem) bool {
		if !ItemMatches(it.Value, q.Filter) {
			return true
		}
		if skip > 0 {
			skip--
			return true
		}
		out = append(out, it)
		return len(out) < q.Limit
	})
	if err != nil {
		return nil, server.StoreError(err)
	}
	if q.Refresh {
		s.refreshItems(ctx, st, out)
	}
	return out, nil
}

// ItemMatches reports whether value meets filter (ItemSearch.Filter).
func ItemMatches(value, filter map[string]any) bool {
	for k, want := range filter {
		have, present := value[k]
		ops, isOps := want.(map[string]any)
		if isOps && len(ops) > 0 && allOperators(ops) {
			for op, arg := range ops {
				if !operatorHolds(op, have, present, arg) {
					return false
				}
			}
			continue
		}
		if !present || !jsonval.Equal(have, want) {
			return false
		}
	}
	return true
}

func allOperators(m map[string]any) bool {
	for k := range m {
		if !strings.HasPrefix(k, "$") {
			return false
		}
	}
	return true
}

func operatorHolds(op string, have any, present bool, arg any) bool {
	switch op {
	case "$eq":
		return present && jsonval.Equal(have, arg)
	case "$ne":
		return !present || !jsonval.Equal(have, arg)
	case "$gt", "$gte", "$lt", "$lte":
		h, ok1 := jsonval.Number(have)
		a, ok2 := jsonval.Number(arg)
		if !ok1 || !ok2 {
			return false
		}
		switch op {
		case "$gt":
			return h > a
		case "$gte":
			return h >= a
		case "$lt":
			return h < a
		default:
			return h <= a
		}
	case "$in", "$nin":
		list, ok := arg.([]any)
		in := ok && present && slices.ContainsFunc(list, func(v any) bool { return jsonval.Equal(have, v) })
		if op == "$in" {
			return in
		}
		return !in
	}
	return false // an operator the store does not know matches nothing
}

// NamespaceQuery lists namespaces (ListNamespaces).
type NamespaceQuery struct {
	// Prefix and Suffix: namespaces that begin (end) with these labels,
	// "*" matching any one label.
	Prefix, Suffix []string
	// MaxDepth, when more than 0, cuts each namespace to that many
	// labels (the cut ones listed once).
	MaxDepth int
	Limit    int // 100 when 0
	Offset   int
}

// ListNamespaces returns the namespaces of the items p sees, sorted.
func (s *Store) Namespaces(ctx context.Context, p *auth.Principal, q NamespaceQuery) ([][]string, error) {
	for _, ns := range [][]string{q.Prefix, q.Suffix} {
		var plain []string // "*" is a wildcard here, not a label
		for _, l := range ns {
			if l != "*" {
				plain = append(plain, l)
			}
		}
		if err := records.ValidItemNamespace(plain, true, nil); err != nil {
			return nil, err
		}
	}
	st, err := s.engine()
	if err != nil {
		return nil, err
	}
	if q.Limit <= 0 {
		q.Limit = 100
	}
	// The literal labels before the first wildcard narrow the scan.
	scan := q.Prefix
	if i := slices.Index(scan, "*"); i >= 0 {
		scan = scan[:i]
	}
	seen := map[string]bool{}
	var all [][]string
	err = s.scanVisible(ctx, st, p, scan, func(it server.StoreItem) bool {
		ns := it.Namespace
		if !labelsMatch(q.Prefix, ns, false) || !labelsMatch(q.Suffix, ns, true) {
			return true
		}
		if q.MaxDepth > 0 && len(ns) > q.MaxDepth {
			ns = ns[:q.MaxDepth]
		}
		k := strings.Join(ns, "\x1f")
		if !seen[k] {
			seen[k] = true
			all = append(all, slices.Clone(ns))
		}
		return true
	})
	if err != nil {
		return nil, server.StoreError(err)
	}
	slices.SortFunc(all, func(a, b []string) int { return strings.Compare(strings.Join(a, ":"), strings.Join(b, ":")) })
	if q.Offset >= len(all) {
		return [][]string{}, nil
	}
	all = all[q.Offset:]
	return all[:min(len(all), q.Limit)], nil
}

// labelsMatch reports whether ns begins (or, suffix, ends) with want,
// "*" matching any one label.
func labelsMatch(want, ns []string, suffix bool) bool {
	if len(want) > len(ns) {
		return false
	}
	off := 0
	if suffix {
		off = len(ns) - len(want)
	}
	for i, w := range want {
		if w != "*" && w != ns[off+i] {
			return false
		}
	}
	return true
}

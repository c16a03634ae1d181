package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/agentstream/agentstream/protocol"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/agentstream/agentstream/auth"
)

// StoreItem is an item of the long-term store the LangGraph Platform API
// serves (client.store.*): a JSON object under a key in a namespace, a
// path of labels.
type StoreItem struct {
	// Scope is whose the item is: "" for the shared store, else the
	// subject of the principal that keeps it (see Server.PutItem).
	Scope     string
	Namespace []string
	Key       string
	Value     map[string]any
	CreatedAt time.Time
	UpdatedAt time.Time
	// TTL, when more than 0, is how long the item lives after it was
	// written or last read with a refresh; ExpiresAt is when it ends.
	TTL       time.Duration
	ExpiresAt time.Time
}

// Expired reports whether the item's TTL has run out at now.
func (it *StoreItem) Expired(now time.Time) bool {
	return !it.ExpiresAt.IsZero() && !now.Before(it.ExpiresAt)
}

// ItemStore is a StateStore that keeps StoreItems. The in-memory, disk
// and Redis engines' stores are.
type ItemStore interface {
	// PutItem writes an item, replacing the one under its scope,
	// namespace and key.
	PutItem(ctx context.Context, it StoreItem) error
	// GetItem returns an item; ok is false when there is none (or it
	// expired).
	GetItem(ctx context.Context, scope string, namespace []string, key string) (it StoreItem, ok bool, err error)
	// DeleteItem deletes an item; deleting none is no error.
	DeleteItem(ctx context.Context, scope string, namespace []string, key string) error
	// ScanItems calls fn, until it returns false, with the items of
	// scope whose namespace begins with prefix (all of the scope's when
	// it is empty), ordered by namespace, label by label, then key;
	// expired items are left out.
	ScanItems(ctx context.Context, scope string, prefix []string, fn func(StoreItem) bool) error
	// CountItems is how many items the store holds, of every scope
	// (expired ones it has not deleted yet included).
	CountItems(ctx context.Context) (int, error)
	// DeleteExpired deletes the items whose TTL ran out by now.
	DeleteExpired(ctx context.Context, now time.Time) error
}

// Limits of the store's items.
const (
	// MaxItemNamespaceDepth is the most labels a namespace has.
	MaxItemNamespaceDepth = 32
	// MaxItemLabelLength is the longest label, and MaxItemKeyLength the
	// longest key, in bytes.
	MaxItemLabelLength = 256
	MaxItemKeyLength   = 1024
	// DefaultMaxStoreItems is Config.MaxStoreItems's default.
	DefaultMaxStoreItems = 1_000_000
)

// Errors of the store, for errors.Is.
var (
	// ErrItemNamespace: a namespace or key the store does not take.
	ErrItemNamespace = coded(protocol.ErrorCodeInvalidArgument, "", "server: bad store namespace or key")
	// ErrNoNamespace: an item's namespace is missing (also an
	// ErrItemNamespace).
	ErrNoNamespace = fmt.Errorf("%w: a namespace is needed", ErrItemNamespace)
	// ErrTooManyItems: Config.MaxStoreItems items held.
	ErrTooManyItems = coded(protocol.ErrorCodeResourceExhausted, "", "server: the store holds as many items as it may")
	// ErrNoItemStore: the engine's StateStore keeps no items.
	ErrNoItemStore = coded(protocol.ErrorCodeNotSupported, ReasonNotServed, "server: this engine keeps no store items")
)

// ValidItemNamespace checks a namespace (empty only when empty is true,
// as a search's prefix may be) and, when key is not nil, a key: labels of
// 1 to MaxItemLabelLength bytes of UTF-8 without "." (the Platform joins
// labels with it) or control characters, at most MaxItemNamespaceDepth of
// them; a key of 1 to MaxItemKeyLength bytes without control characters.
func ValidItemNamespace(namespace []string, empty bool, key *string) error {
	if len(namespace) == 0 && !empty {
		return ErrNoNamespace
	}
	if len(namespace) > MaxItemNamespaceDepth {
		return fmt.Errorf("%w: %d labels, more than %d", ErrItemNamespace, len(namespace), MaxItemNamespaceDepth)
	}
	for _, l := range namespace {
		if l == "" || strings.Contains(l, ".") {
			return fmt.Errorf("%w: labels cannot be empty or contain periods; got %q", ErrItemNamespace, strings.Join(namespace, "."))
		}
		if err := plainText(l, MaxItemLabelLength); err != nil {
			return fmt.Errorf("%w: label %q: %v", ErrItemNamespace, l, err)
		}
	}
	if key != nil {
		if err := plainText(*key, MaxItemKeyLength); err != nil {
			return fmt.Errorf("%w: key: %v", ErrItemNamespace, err)
		}
	}
	return nil
}

// plainText checks 1 to max bytes of UTF-8 without control characters
// (Unicode's Cc, C0 and C1 alike: U+0085 is a line break to many readers)
// or line and paragraph separators.
func plainText(s string, max int) error {
	if s == "" || len(s) > max {
		return fmt.Errorf("1 to %d bytes", max)
	}
	if !utf8.ValidString(s) {
		return errors.New("not UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return fmt.Errorf("a control character (%U)", r)
		}
	}
	return nil
}

// ItemPath is the byte string under which an ordered engine keeps an
// item: its scope, then its namespace's labels, then its key, so that
// byte order is namespace order (label by label, a namespace before its
// children) then key order, and a namespace's items and its children's
// are one range (ItemRange). Labels and keys hold no control characters
// (ValidItemNamespace), which the separators are.
func ItemPath(scope string, namespace []string, key string) string {
	var b strings.Builder
	b.WriteString(scopePrefix(scope))
	b.WriteString(strings.Join(namespace, "\x1f"))
	b.WriteByte(0)
	b.WriteString(key)
	return b.String()
}

func scopePrefix(scope string) string { return strconv.Itoa(len(scope)) + ":" + scope + "\x00" }

// ItemRange is the range [lo, hi) of ItemPaths of scope's items whose
// namespace begins with prefix.
func ItemRange(scope string, prefix []string) (lo, hi string) {
	s := scopePrefix(scope)
	if len(prefix) == 0 {
		return s, s[:len(s)-1] + "\x01"
	}
	p := s + strings.Join(prefix, "\x1f")
	// The namespace itself (then \x00) and its children (then \x1f).
	return p + "\x00", p + "\x20"
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
	return p.Subject
}

func (s *Server) itemStore() (ItemStore, error) {
	st := s.st.Items
	if st == nil {
		return nil, ErrNoItemStore
	}
	return st, nil
}

// PutItem writes p's item (ItemScope says where). ttl, when more than 0,
// makes it expire that long after it was written or read with a refresh.
// A new item past Config.MaxStoreItems is ErrTooManyItems.
func (s *Server) PutItem(ctx context.Context, p *auth.Principal, namespace []string, key string, value map[string]any, ttl time.Duration) error {
	if err := ValidItemNamespace(namespace, false, &key); err != nil {
		return err
	}
	st, err := s.itemStore()
	if err != nil {
		return err
	}
	scope := ItemScope(p, namespace)
	s.itemsMu.Lock()
	defer s.itemsMu.Unlock()
	old, exists, err := st.GetItem(ctx, scope, namespace, key)
	if err != nil {
		return storeError(err)
	}
	now := time.Now().UTC()
	it := StoreItem{Scope: scope, Namespace: namespace, Key: key, Value: value, CreatedAt: now, UpdatedAt: now, TTL: ttl}
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
			return storeError(err)
		}
		if n >= s.cfg.MaxStoreItems {
			s.metrics.refused.add(LimitStoreItems)
			return fmt.Errorf("%w (%d, --max-store-items)", ErrTooManyItems, s.cfg.MaxStoreItems)
		}
	}
	if ttl > 0 {
		it.ExpiresAt = now.Add(ttl)
	}
	return storeErrorOrNil(st.PutItem(ctx, it))
}

func storeErrorOrNil(err error) error {
	if err == nil {
		return nil
	}
	return storeError(err)
}

// GetItem returns p's item; ok is false when there is none. refresh
// renews an item's TTL.
func (s *Server) GetItem(ctx context.Context, p *auth.Principal, namespace []string, key string, refresh bool) (StoreItem, bool, error) {
	if err := ValidItemNamespace(namespace, false, &key); err != nil {
		return StoreItem{}, false, err
	}
	st, err := s.itemStore()
	if err != nil {
		return StoreItem{}, false, err
	}
	it, ok, err := st.GetItem(ctx, ItemScope(p, namespace), namespace, key)
	if err != nil || !ok {
		return StoreItem{}, false, storeErrorOrNil(err)
	}
	if refresh {
		s.refreshItems(ctx, st, []StoreItem{it})
	}
	return it, true, nil
}

// refreshItems renews the TTL of those of items that have one.
func (s *Server) refreshItems(ctx context.Context, st ItemStore, items []StoreItem) {
	now := time.Now().UTC()
	s.itemsMu.Lock()
	defer s.itemsMu.Unlock()
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
func (s *Server) DeleteItem(ctx context.Context, p *auth.Principal, namespace []string, key string) error {
	if err := ValidItemNamespace(namespace, false, &key); err != nil {
		return err
	}
	st, err := s.itemStore()
	if err != nil {
		return err
	}
	s.itemsMu.Lock()
	defer s.itemsMu.Unlock()
	return storeErrorOrNil(st.DeleteItem(ctx, ItemScope(p, namespace), namespace, key))
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
func (s *Server) scanVisible(ctx context.Context, st ItemStore, p *auth.Principal, prefix []string, fn func(StoreItem) bool) error {
	sc := scopes(p)
	if len(sc) == 1 {
		return st.ScanItems(ctx, sc[0], prefix, fn)
	}
	// Two scopes: each read whole under the prefix (what a principal
	// keeps is bounded by MaxStoreItems), merged in order.
	var lists [2][]StoreItem
	for i, scope := range sc {
		if err := st.ScanItems(ctx, scope, prefix, func(it StoreItem) bool {
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

func compareItems(a, b StoreItem) int {
	if c := slices.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return cmp.Compare(a.Key, b.Key)
}

// SearchItems returns the items p sees that the search selects, in
// namespace then key order.
func (s *Server) SearchItems(ctx context.Context, p *auth.Principal, q ItemSearch) ([]StoreItem, error) {
	if err := ValidItemNamespace(q.Prefix, true, nil); err != nil {
		return nil, err
	}
	st, err := s.itemStore()
	if err != nil {
		return nil, err
	}
	if q.Limit <= 0 {
		q.Limit = 10
	}
	out := []StoreItem{}
	skip := q.Offset
	err = s.scanVisible(ctx, st, p, q.Prefix, func(it StoreItem) bool {
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
		return nil, storeError(err)
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
		if !present || !jsonEqual(have, want) {
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
		return present && jsonEqual(have, arg)
	case "$ne":
		return !present || !jsonEqual(have, arg)
	case "$gt", "$gte", "$lt", "$lte":
		h, ok1 := number(have)
		a, ok2 := number(arg)
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
		in := ok && present && slices.ContainsFunc(list, func(v any) bool { return jsonEqual(have, v) })
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
func (s *Server) ListNamespaces(ctx context.Context, p *auth.Principal, q NamespaceQuery) ([][]string, error) {
	for _, ns := range [][]string{q.Prefix, q.Suffix} {
		var plain []string // "*" is a wildcard here, not a label
		for _, l := range ns {
			if l != "*" {
				plain = append(plain, l)
			}
		}
		if err := ValidItemNamespace(plain, true, nil); err != nil {
			return nil, err
		}
	}
	st, err := s.itemStore()
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
	err = s.scanVisible(ctx, st, p, scan, func(it StoreItem) bool {
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
		return nil, storeError(err)
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

package records

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/agentstream/agentstream/protocol"
)

// StoreItem is an item of the long-term store the LangGraph Platform API
// serves (client.store.*): a JSON object under a key in a namespace, a
// path of labels.
type StoreItem struct {
	// Scope is whose the item is: "" for the shared store, else the
	// subject of the principal that keeps it (see items.ItemScope).
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
	// DefaultMaxStoreItems is server.Config.MaxStoreItems's default.
	DefaultMaxStoreItems = 1_000_000
)

// Errors of the store, for errors.Is.
var (
	// ErrItemNamespace: a namespace or key the store does not take.
	ErrItemNamespace = coded(protocol.ErrorCodeInvalidArgument, "", "server: bad store namespace or key")
	// ErrNoNamespace: an item's namespace is missing (also an
	// ErrItemNamespace).
	ErrNoNamespace = fmt.Errorf("%w: a namespace is needed", ErrItemNamespace)
	// ErrTooManyItems: server.Config.MaxStoreItems items held.
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

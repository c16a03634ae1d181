package records

import (
	"context"
	"slices"
	"time"

	"github.com/agentstream/agentstream/internal/compact"
)

// The in-memory store's items (ItemStore), by ItemPath. Items are
// replaced whole, never changed, so a reader may hold one after m.mu.

// PutItem implements ItemStore.
func (m *MemoryState) PutItem(_ context.Context, it StoreItem) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	it.Namespace = slices.Clone(it.Namespace)
	m.items[ItemPath(it.Scope, it.Namespace, it.Key)] = &it
	m.itemHW.Grew(len(m.items))
	return nil
}

// GetItem implements ItemStore.
func (m *MemoryState) GetItem(_ context.Context, scope string, namespace []string, key string) (StoreItem, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	it := m.items[ItemPath(scope, namespace, key)]
	if it == nil || it.Expired(time.Now()) {
		return StoreItem{}, false, nil
	}
	return *it, true, nil
}

// DeleteItem implements ItemStore.
func (m *MemoryState) DeleteItem(_ context.Context, scope string, namespace []string, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.deleteItem(ItemPath(scope, namespace, key))
	return nil
}

func (m *MemoryState) deleteItem(path string) {
	delete(m.items, path)
	m.items = compact.Shrink(m.items, &m.itemHW)
}

// ScanItems implements ItemStore: the scope's items under the prefix,
// sorted by path (namespace then key order) each time.
func (m *MemoryState) ScanItems(_ context.Context, scope string, prefix []string, fn func(StoreItem) bool) error {
	lo, hi := ItemRange(scope, prefix)
	type entry struct {
		path string
		it   *StoreItem
	}
	now := time.Now()
	m.mu.Lock()
	var found []entry
	for p, it := range m.items {
		if lo <= p && p < hi && !it.Expired(now) {
			found = append(found, entry{p, it})
		}
	}
	m.mu.Unlock()
	slices.SortFunc(found, func(a, b entry) int {
		switch {
		case a.path < b.path:
			return -1
		case a.path > b.path:
			return 1
		}
		return 0
	})
	for _, e := range found {
		if !fn(*e.it) {
			break
		}
	}
	return nil
}

// CountItems implements ItemStore.
func (m *MemoryState) CountItems(context.Context) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.items), nil
}

// DeleteExpired implements ItemStore.
func (m *MemoryState) DeleteExpired(_ context.Context, now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for p, it := range m.items {
		if it.Expired(now) {
			delete(m.items, p)
		}
	}
	m.items = compact.Shrink(m.items, &m.itemHW)
	return nil
}

package diskstore

import (
	"context"
	"errors"
	"time"

	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/records"
	"github.com/cockroachdb/pebble/v2"
)

// The long-term store's items (server.ItemStore): "i/" records.ItemPath
// -> the item as JSON, written synced (an item put is kept once it was
// answered). Byte order is the items' order, so a search is one range.
// An expired item stays until it is read, or until the store is full
// (DeleteExpired).

var _ server.ItemStore = (*State)(nil)

func itemKey(scope string, namespace []string, key string) []byte {
	return append([]byte("i/"), records.ItemPath(scope, namespace, key)...)
}

// countItems is the items' count, counted once (s.itemsMu held).
func (s *State) countItems() (int, error) {
	if s.items >= 0 {
		return s.items, nil
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte("i/"), UpperBound: upper([]byte("i/"))})
	if err != nil {
		return 0, err
	}
	n := 0
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return 0, err
	}
	s.items = n
	return n, nil
}

// PutItem implements server.ItemStore.
func (s *State) PutItem(_ context.Context, item server.StoreItem) error {
	if err := s.log.checkWritable(); err != nil {
		return err
	}
	b, err := records.MarshalStoreItem(item)
	if err != nil {
		return err
	}
	k := itemKey(item.Scope, item.Namespace, item.Key)
	s.itemsMu.Lock()
	defer s.itemsMu.Unlock()
	n, err := s.countItems()
	if err != nil {
		return err
	}
	_, exists, err := s.get(k)
	if err != nil {
		return err
	}
	if err := s.db.Set(k, b, pebble.Sync); err != nil {
		return err
	}
	if !exists {
		s.items = n + 1
	}
	return nil
}

// GetItem implements server.ItemStore.
func (s *State) GetItem(ctx context.Context, scope string, namespace []string, key string) (server.StoreItem, bool, error) {
	b, ok, err := s.get(itemKey(scope, namespace, key))
	if err != nil || !ok {
		return server.StoreItem{}, false, err
	}
	item, err := records.UnmarshalStoreItem(b)
	if err != nil {
		return server.StoreItem{}, false, errors.Join(errCorrupt, err)
	}
	if item.Expired(time.Now()) {
		return server.StoreItem{}, false, nil
	}
	return item, true, nil
}

// DeleteItem implements server.ItemStore.
func (s *State) DeleteItem(_ context.Context, scope string, namespace []string, key string) error {
	if err := s.log.checkWritable(); err != nil {
		return err
	}
	return s.deleteItems([][]byte{itemKey(scope, namespace, key)})
}

// deleteItems deletes the items of keys that exist, synced.
func (s *State) deleteItems(keys [][]byte) error {
	s.itemsMu.Lock()
	defer s.itemsMu.Unlock()
	n, err := s.countItems()
	if err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	gone := 0
	for _, k := range keys {
		if _, exists, err := s.get(k); err != nil {
			return err
		} else if exists {
			gone++
			if err := b.Delete(k, nil); err != nil {
				return err
			}
		}
	}
	if gone == 0 {
		return nil
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	s.items = n - gone
	return nil
}

// ScanItems implements server.ItemStore: one range of the tree.
func (s *State) ScanItems(_ context.Context, scope string, prefix []string, fn func(server.StoreItem) bool) error {
	lo, hi := records.ItemRange(scope, prefix)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: append([]byte("i/"), lo...), UpperBound: append([]byte("i/"), hi...)})
	if err != nil {
		return err
	}
	now := time.Now()
	for it.First(); it.Valid(); it.Next() {
		item, err := records.UnmarshalStoreItem(it.Value())
		if err != nil || item.Expired(now) {
			continue // one that cannot be read is left out of lists
		}
		if !fn(item) {
			break
		}
	}
	return errors.Join(it.Error(), it.Close())
}

// CountItems implements server.ItemStore.
func (s *State) CountItems(context.Context) (int, error) {
	s.itemsMu.Lock()
	defer s.itemsMu.Unlock()
	return s.countItems()
}

// DeleteExpired implements server.ItemStore.
func (s *State) DeleteExpired(_ context.Context, now time.Time) error {
	if err := s.log.checkWritable(); err != nil {
		return err
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte("i/"), UpperBound: upper([]byte("i/"))})
	if err != nil {
		return err
	}
	var gone [][]byte
	for it.First(); it.Valid(); it.Next() {
		if item, err := records.UnmarshalStoreItem(it.Value()); err == nil && item.Expired(now) {
			gone = append(gone, append([]byte(nil), it.Key()...))
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return err
	}
	return s.deleteItems(gone)
}

package redisstore

import (
	"context"
	"time"

	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/records"
	"github.com/redis/rueidis"
)

// The long-term store's items (server.ItemStore) in Redis, shared by
// every node: PREFIX:item:PATH (PATH a records.ItemPath) holds the item as
// JSON, with its TTL when it has one, and the sorted set PREFIX:items
// holds every PATH (scores 0: ordered by bytes, which is the items'
// order), so a search reads one lexicographic range. A member whose item
// expired is taken out when a read finds it gone.

var _ server.ItemStore = (*State)(nil)

func (e *Engine) itemsKey() string           { return e.prefix + ":items" }
func (e *Engine) itemKey(path string) string { return e.prefix + ":item:" + path }

// PutItem implements server.ItemStore.
func (s *State) PutItem(ctx context.Context, it server.StoreItem) error {
	b, err := records.MarshalStoreItem(it)
	if err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c := s.e.c
	path := records.ItemPath(it.Scope, it.Namespace, it.Key)
	set := c.B().Set().Key(s.e.itemKey(path)).Value(rueidis.BinaryString(b)).Build()
	if !it.ExpiresAt.IsZero() {
		ttl := max(time.Until(it.ExpiresAt), time.Millisecond)
		set = c.B().Set().Key(s.e.itemKey(path)).Value(rueidis.BinaryString(b)).Px(ttl).Build()
	}
	for _, r := range c.DoMulti(ctx, set, c.B().Zadd().Key(s.e.itemsKey()).ScoreMember().ScoreMember(0, path).Build()) {
		if err := r.Error(); err != nil {
			return s.fail(err)
		}
	}
	return nil
}

// GetItem implements server.ItemStore.
func (s *State) GetItem(ctx context.Context, scope string, namespace []string, key string) (server.StoreItem, bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c := s.e.c
	b, err := c.Do(ctx, c.B().Get().Key(s.e.itemKey(records.ItemPath(scope, namespace, key))).Build()).AsBytes()
	if rueidis.IsRedisNil(err) {
		return server.StoreItem{}, false, nil
	}
	if err != nil {
		return server.StoreItem{}, false, s.fail(err)
	}
	it, err := records.UnmarshalStoreItem(b)
	if err != nil || it.Expired(time.Now()) {
		return server.StoreItem{}, false, nil // one that cannot be read is none
	}
	return it, true, nil
}

// DeleteItem implements server.ItemStore.
func (s *State) DeleteItem(ctx context.Context, scope string, namespace []string, key string) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c := s.e.c
	path := records.ItemPath(scope, namespace, key)
	for _, r := range c.DoMulti(ctx, c.B().Del().Key(s.e.itemKey(path)).Build(), c.B().Zrem().Key(s.e.itemsKey()).Member(path).Build()) {
		if err := r.Error(); err != nil {
			return s.fail(err)
		}
	}
	return nil
}

// scanPaths reads the items of the paths in [lo, hi), in order, a page
// at a time, calling fn with each until it returns false; members whose
// item is gone are taken out of the set.
func (s *State) scanPaths(ctx context.Context, lo, hi string, fn func(server.StoreItem) bool) error {
	c := s.e.c
	const page = 500
	min := "[" + lo
	for {
		bctx, cancel := s.bound(ctx)
		paths, err := c.Do(bctx, c.B().Zrange().Key(s.e.itemsKey()).Min(min).Max("("+hi).Bylex().Limit(0, page).Build()).AsStrSlice()
		if err != nil {
			cancel()
			return s.fail(err)
		}
		if len(paths) == 0 {
			cancel()
			return nil
		}
		gets := make(rueidis.Commands, len(paths))
		for i, p := range paths {
			gets[i] = c.B().Get().Key(s.e.itemKey(p)).Build()
		}
		var gone []string
		now := time.Now()
		stop := false
		for i, r := range c.DoMulti(bctx, gets...) {
			b, err := r.AsBytes()
			if rueidis.IsRedisNil(err) {
				gone = append(gone, paths[i])
				continue
			}
			if err != nil {
				cancel()
				return s.fail(err)
			}
			it, err := records.UnmarshalStoreItem(b)
			if err != nil || it.Expired(now) {
				continue // one that cannot be read is left out of lists
			}
			if !stop && !fn(it) {
				stop = true
			}
		}
		if len(gone) > 0 {
			_ = c.Do(bctx, c.B().Zrem().Key(s.e.itemsKey()).Member(gone...).Build()).Error()
		}
		cancel()
		if stop || len(paths) < page {
			return nil
		}
		min = "(" + paths[len(paths)-1]
	}
}

// ScanItems implements server.ItemStore.
func (s *State) ScanItems(ctx context.Context, scope string, prefix []string, fn func(server.StoreItem) bool) error {
	lo, hi := records.ItemRange(scope, prefix)
	return s.scanPaths(ctx, lo, hi, fn)
}

// CountItems implements server.ItemStore: the set's size.
func (s *State) CountItems(ctx context.Context) (int, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	n, err := s.e.c.Do(ctx, s.e.c.B().Zcard().Key(s.e.itemsKey()).Build()).AsInt64()
	return int(n), s.fail(err)
}

// DeleteExpired implements server.ItemStore: Redis expires the items;
// their members are taken out of the set by reading it whole.
func (s *State) DeleteExpired(ctx context.Context, _ time.Time) error {
	return s.scanPaths(ctx, "", "\xff", func(server.StoreItem) bool { return true })
}

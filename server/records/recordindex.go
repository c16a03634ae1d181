package records

import (
	"context"
	"strconv"
	"sync"

	"github.com/agentstream/agentstream/internal/compact"
	"github.com/agentstream/agentstream/internal/jsonval"
)

// IndexedCatalog is a ThreadCatalog that finds the records whose metadata
// holds given members without reading every record (SearchThreads uses
// it). The in-memory and disk engines' stores are; Redis's is not.
type IndexedCatalog interface {
	ThreadCatalog
	// RecordsMatching calls fn, until it returns false, with records
	// among which are all those whose metadata holds every member of
	// metadata with an equal value (it may call fn with others too: the
	// caller checks). indexed is false when it could not narrow the
	// search (no member of metadata is indexed), and fn was not called.
	RecordsMatching(ctx context.Context, metadata map[string]any, fn func(ThreadRecord) bool) (indexed bool, err error)
}

// RecordIndex indexes thread records by their metadata's top-level
// members whose values are strings, numbers, booleans or null: for each
// member and value, the threads that hold it. A store keeps one beside
// its records (Set as it writes one, Delete as it deletes one).
type RecordIndex struct {
	mu      sync.Mutex
	posting map[string]map[string]struct{} // member + value -> thread ids
	keys    map[string][]string            // thread id -> its postings
	hw      struct{ posting, keys compact.Tracker }
}

// NewRecordIndex returns an empty index.
func NewRecordIndex() *RecordIndex {
	return &RecordIndex{posting: map[string]map[string]struct{}{}, keys: map[string][]string{}}
}

// postingKey is member=value's key; ok is false for a value not indexed
// (an object or an array).
func postingKey(member string, v any) (string, bool) {
	var val string
	switch x := v.(type) {
	case string:
		val = "s" + x
	case bool:
		val = "b" + strconv.FormatBool(x)
	case nil:
		val = "z"
	default:
		f, ok := jsonval.Number(v)
		if !ok {
			return "", false
		}
		val = "n" + strconv.FormatFloat(f, 'g', -1, 64)
	}
	return member + "\x00" + val, true
}

// Set indexes rec (in place of what was indexed for its thread).
func (x *RecordIndex) Set(rec ThreadRecord) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.remove(rec.ID)
	var keys []string
	for k, v := range rec.Metadata {
		if pk, ok := postingKey(k, v); ok {
			set := x.posting[pk]
			if set == nil {
				set = map[string]struct{}{}
				x.posting[pk] = set
			}
			set[rec.ID] = struct{}{}
			keys = append(keys, pk)
		}
	}
	x.keys[rec.ID] = keys
	x.hw.keys.Grew(len(x.keys))
	x.hw.posting.Grew(len(x.posting))
}

// Delete forgets thread id's record.
func (x *RecordIndex) Delete(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.remove(id)
}

func (x *RecordIndex) remove(id string) {
	for _, pk := range x.keys[id] {
		if set := x.posting[pk]; set != nil {
			delete(set, id)
			if len(set) == 0 {
				delete(x.posting, pk)
			}
		}
	}
	delete(x.keys, id)
	x.keys = compact.Shrink(x.keys, &x.hw.keys)
	x.posting = compact.Shrink(x.posting, &x.hw.posting)
}

// Candidates returns the threads that hold the indexed member of want
// held by the fewest; ok is false when no member of want is indexed.
func (x *RecordIndex) Candidates(want map[string]any) (ids []string, ok bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	var best map[string]struct{}
	for k, v := range want {
		pk, indexed := postingKey(k, v)
		if !indexed {
			continue
		}
		set := x.posting[pk]
		if !ok || len(set) < len(best) {
			best, ok = set, true
		}
	}
	if !ok {
		return nil, false
	}
	ids = make([]string, 0, len(best))
	for id := range best {
		ids = append(ids, id)
	}
	return ids, true
}

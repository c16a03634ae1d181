// Package compact gives back the memory of maps that deletions emptied. A
// Go map never shrinks: one that once held a million threads keeps their
// buckets after they are all deleted. A Tracker remembers a map's
// high-water mark, and Shrink rebuilds the map once most of it is gone, at
// an amortized O(1) per deletion.
package compact

import "maps"

// MinPeak is the size below which a map is left as it is: small maps cost
// little, and rebuilding them would cost more than it saves.
const MinPeak = 256

// Tracker is a map's high-water mark since it was last rebuilt. The zero
// value is ready to use. It is guarded by whatever guards the map.
type Tracker struct{ peak int }

// Grew records the map's size after an insertion.
func (t *Tracker) Grew(n int) {
	if n > t.peak {
		t.peak = n
	}
}

// Shrink returns m, or a copy of it in a fresh map when it has fallen to a
// quarter of its high-water mark; call it after deletions and keep what it
// returns.
func Shrink[M ~map[K]V, K comparable, V any](m M, t *Tracker) M {
	if t.peak < MinPeak || len(m) > t.peak/4 {
		return m
	}
	fresh := make(M, len(m))
	maps.Copy(fresh, m)
	t.peak = len(m)
	return fresh
}

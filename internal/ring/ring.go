// Package ring is the replay buffer of a thread: the most recent events in
// sequence order, capped by count and by total size, evicting whole
// events from the oldest.
//
// A Buffer is not safe for concurrent use; its owner locks it.
package ring

// Item is what a Buffer holds: something with a sequence number and a size.
type Item interface {
	Sequence() uint64
	Size() int
}

// Buffer holds the newest items within its caps.
type Buffer[T Item] struct {
	items    []T // circular; len(items) is the capacity in use
	head     int // index of the oldest item
	n        int // items held
	bytes    int
	maxItems int
	maxBytes int
}

// New returns a buffer holding at most maxItems items and maxBytes bytes
// (a single item larger than maxBytes is still kept, alone).
func New[T Item](maxItems, maxBytes int) *Buffer[T] {
	if maxItems < 1 {
		maxItems = 1
	}
	return &Buffer[T]{maxItems: maxItems, maxBytes: maxBytes}
}

// Len is the number of items held.
func (b *Buffer[T]) Len() int { return b.n }

// Bytes is the total size of the items held.
func (b *Buffer[T]) Bytes() int { return b.bytes }

// Push appends an item (its sequence number must be above every held one)
// and evicts the oldest items until both caps hold again. It returns how
// many items it evicted.
func (b *Buffer[T]) Push(it T) int {
	evicted := 0
	for b.n > 0 && (b.n >= b.maxItems || b.bytes+it.Size() > b.maxBytes) {
		b.pop()
		evicted++
	}
	if b.n == len(b.items) {
		b.grow()
	}
	b.items[(b.head+b.n)%len(b.items)] = it
	b.n++
	b.bytes += it.Size()
	return evicted
}

// PopOldest evicts the oldest item, if any.
func (b *Buffer[T]) PopOldest() {
	if b.n > 0 {
		b.pop()
	}
}

func (b *Buffer[T]) pop() {
	var zero T
	b.bytes -= b.items[b.head].Size()
	b.items[b.head] = zero
	b.head = (b.head + 1) % len(b.items)
	b.n--
}

func (b *Buffer[T]) grow() {
	size := 2 * len(b.items)
	if size < 16 {
		size = 16
	}
	if size > b.maxItems {
		size = b.maxItems
	}
	items := make([]T, size)
	for i := 0; i < b.n; i++ {
		items[i] = b.items[(b.head+i)%len(b.items)]
	}
	b.items, b.head = items, 0
}

// Oldest is the sequence number of the oldest item held, or 0.
func (b *Buffer[T]) Oldest() uint64 {
	if b.n == 0 {
		return 0
	}
	return b.items[b.head].Sequence()
}

// After calls fn for each item with a sequence number above seq, oldest
// first, until fn returns false.
func (b *Buffer[T]) After(seq uint64, fn func(T) bool) {
	// Binary search for the first item after seq: sequence numbers rise.
	lo, hi := 0, b.n
	for lo < hi {
		mid := (lo + hi) / 2
		if b.items[(b.head+mid)%len(b.items)].Sequence() <= seq {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	for i := lo; i < b.n; i++ {
		if !fn(b.items[(b.head+i)%len(b.items)]) {
			return
		}
	}
}

// Clear drops every item and gives the memory back.
func (b *Buffer[T]) Clear() {
	b.items, b.head, b.n, b.bytes = nil, 0, 0, 0
}

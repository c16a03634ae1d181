package ring

import (
	"testing"

	"github.com/stretchr/testify/require"
)

type item struct{ seq, size int }

func (i item) Sequence() uint64 { return uint64(i.seq) }
func (i item) Size() int        { return i.size }

func seqs(b *Buffer[item], after uint64) []int {
	var out []int
	b.After(after, func(i item) bool { out = append(out, i.seq); return true })
	return out
}

func TestBufferCapsByCount(t *testing.T) {
	b := New[item](3, 1<<20)
	for s := 1; s <= 5; s++ {
		b.Push(item{s, 10})
	}
	require.Equal(t, []int{3, 4, 5}, seqs(b, 0))
	require.Equal(t, []int{5}, seqs(b, 4))
	require.Empty(t, seqs(b, 5))
	require.Equal(t, uint64(3), b.Oldest())
	require.Equal(t, 30, b.Bytes())
}

func TestBufferCapsByBytesEvictingWholeEvents(t *testing.T) {
	b := New[item](100, 100)
	b.Push(item{1, 40})
	b.Push(item{2, 40})
	require.Equal(t, 1, b.Push(item{3, 40}), "the oldest goes")
	require.Equal(t, []int{2, 3}, seqs(b, 0))
	require.Equal(t, 2, b.Push(item{4, 150}), "an item over the cap is kept alone")
	require.Equal(t, []int{4}, seqs(b, 0))
	require.Equal(t, 150, b.Bytes())
}

func TestBufferWrapsAndSearches(t *testing.T) {
	b := New[item](40, 1<<20)
	for s := 1; s <= 1000; s++ {
		b.Push(item{s, 1})
		if s%7 == 0 {
			got := seqs(b, uint64(s-3))
			require.Equal(t, []int{s - 2, s - 1, s}, got)
		}
	}
	require.Equal(t, 40, b.Len())
	b.Clear()
	require.Equal(t, 0, b.Len())
	require.Empty(t, seqs(b, 0))
}

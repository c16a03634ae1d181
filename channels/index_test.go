package channels

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFilterMatches(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		f       Filter
		channel string
		custom  string
		ns      Namespace
		want    bool
	}{
		{"all", All, Messages, "", Namespace{"a", "b"}, true},
		{"channel", Filter{Channels: []string{Messages}, Depth: Unlimited}, Tools, "", nil, false},
		{"custom matches named", Filter{Channels: []string{Custom}, Depth: Unlimited}, Custom, "progress", nil, true},
		{"named custom", Filter{Channels: []string{"custom:progress"}, Depth: Unlimited}, Custom, "progress", nil, true},
		{"other named custom", Filter{Channels: []string{"custom:progress"}, Depth: Unlimited}, Custom, "other", nil, false},
		{"prefix", Filter{Namespaces: []Namespace{{"a"}}, Depth: Unlimited}, Messages, "", Namespace{"a", "b"}, true},
		{"not prefix", Filter{Namespaces: []Namespace{{"a"}}, Depth: Unlimited}, Messages, "", Namespace{"b"}, false},
		{"depth 0", Filter{Namespaces: []Namespace{{"a"}}, Depth: 0}, Messages, "", Namespace{"a", "b"}, false},
		{"depth 1", Filter{Namespaces: []Namespace{{"a"}}, Depth: 1}, Messages, "", Namespace{"a", "b"}, true},
		{"root depth 0", Filter{Depth: 0}, Messages, "", Namespace{"a"}, false},
		{"root depth 0 root", Filter{Depth: 0}, Messages, "", nil, true},
	}
	for _, c := range cases {
		require.Equal(t, c.want, c.f.Matches(c.channel, c.custom, c.ns), c.name)
	}
}

// TestIndexAgreesWithFilter: on random filters and events, the index finds
// exactly the subscriptions whose filters match.
func TestIndexAgreesWithFilter(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	segs := []string{"a", "b", "c"}
	randNS := func(max int) Namespace {
		n := r.IntN(max + 1)
		ns := make(Namespace, n)
		for i := range ns {
			ns[i] = segs[r.IntN(len(segs))]
		}
		return ns
	}
	chans := []string{Messages, Tools, Custom, "custom:x", "custom:y", Values}
	x := NewIndex[int]()
	filters := map[int]Filter{}
	for id := 0; id < 300; id++ {
		var f Filter
		for i := r.IntN(3); i > 0; i-- {
			f.Channels = append(f.Channels, chans[r.IntN(len(chans))])
		}
		for i := r.IntN(3); i > 0; i-- {
			f.Namespaces = append(f.Namespaces, randNS(2))
		}
		f.Depth = r.IntN(4) - 1
		filters[id] = f
		x.Add(uint64(id), f, id)
	}
	// Remove a third, to exercise removal.
	for id := 0; id < 300; id += 3 {
		x.Remove(uint64(id), filters[id])
		delete(filters, id)
	}
	require.Equal(t, len(filters), x.Len())
	for i := 0; i < 2000; i++ {
		ch := []string{Messages, Tools, Custom, Values, Lifecycle}[r.IntN(5)]
		name := ""
		if ch == Custom {
			name = []string{"", "x", "y", "z"}[r.IntN(4)]
		}
		ns := randNS(3)
		var got []int
		x.Match(ch, name, ns, func(id int) { got = append(got, id) })
		slices.Sort(got)
		got = slices.Compact(got)
		var want []int
		for id, f := range filters {
			if f.Matches(ch, name, ns) {
				want = append(want, id)
			}
		}
		slices.Sort(want)
		require.Equal(t, want, got, "event %s %q %v", ch, name, ns)
	}
}

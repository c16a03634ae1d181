package channels

// Index finds the subscriptions an event matches. Each subscription is
// stored once per channel key and namespace prefix of its filter; matching
// walks only the trie paths the event's channel and namespace lead to.
//
// A subscription whose filter has several channels or prefixes that all
// match an event is visited once per match: callers deliver each event at
// most once per subscriber (by remembering the last sequence number given
// to it). Index is not safe for concurrent use.
type Index[S any] struct {
	roots map[string]*trieNode[S]
	size  int
}

type trieNode[S any] struct {
	children map[string]*trieNode[S]
	entries  []indexEntry[S]
}

type indexEntry[S any] struct {
	id    uint64
	depth int
	sub   S
}

// NewIndex returns an empty index.
func NewIndex[S any]() *Index[S] {
	return &Index[S]{roots: map[string]*trieNode[S]{}}
}

// Len is the number of subscriptions in the index.
func (x *Index[S]) Len() int { return x.size }

// Add stores sub, known by id, under every channel and prefix of f.
func (x *Index[S]) Add(id uint64, f Filter, sub S) {
	prefixes := f.Namespaces
	if len(prefixes) == 0 {
		prefixes = []Namespace{nil}
	}
	for _, key := range f.channelKeys() {
		root := x.roots[key]
		if root == nil {
			root = &trieNode[S]{}
			x.roots[key] = root
		}
		for _, p := range prefixes {
			n := root
			for _, seg := range p {
				child := n.children[seg]
				if child == nil {
					if n.children == nil {
						n.children = map[string]*trieNode[S]{}
					}
					child = &trieNode[S]{}
					n.children[seg] = child
				}
				n = child
			}
			n.entries = append(n.entries, indexEntry[S]{id: id, depth: f.Depth, sub: sub})
		}
	}
	x.size++
}

// Remove deletes the subscription added with id and f.
func (x *Index[S]) Remove(id uint64, f Filter) {
	prefixes := f.Namespaces
	if len(prefixes) == 0 {
		prefixes = []Namespace{nil}
	}
	removed := false
	for _, key := range f.channelKeys() {
		root := x.roots[key]
		if root == nil {
			continue
		}
		for _, p := range prefixes {
			if root.remove(id, p) {
				removed = true
			}
		}
		if root.empty() {
			delete(x.roots, key)
		}
	}
	if removed {
		x.size--
	}
}

// remove deletes id from the node at path p, pruning emptied nodes.
func (n *trieNode[S]) remove(id uint64, p Namespace) bool {
	if len(p) > 0 {
		child := n.children[p[0]]
		if child == nil {
			return false
		}
		ok := child.remove(id, p[1:])
		if child.empty() {
			delete(n.children, p[0])
		}
		return ok
	}
	for i, e := range n.entries {
		if e.id == id {
			last := len(n.entries) - 1
			n.entries[i] = n.entries[last]
			var zero indexEntry[S]
			n.entries[last] = zero
			n.entries = n.entries[:last]
			return true
		}
	}
	return false
}

func (n *trieNode[S]) empty() bool { return len(n.entries) == 0 && len(n.children) == 0 }

// Match calls fn for every subscription whose filter matches an event of
// channel (its custom name, for custom events) in namespace ns.
func (x *Index[S]) Match(channel, name string, ns Namespace, fn func(S)) {
	x.matchKey(channel, ns, fn)
	x.matchKey(anyChannel, ns, fn)
	if channel == Custom && name != "" {
		x.matchKey(CustomPrefix+name, ns, fn)
	}
}

func (x *Index[S]) matchKey(key string, ns Namespace, fn func(S)) {
	n := x.roots[key]
	for depth := 0; n != nil; depth++ {
		below := len(ns) - depth
		for i := range n.entries {
			if e := &n.entries[i]; e.depth < 0 || below <= e.depth {
				fn(e.sub)
			}
		}
		if depth == len(ns) {
			return
		}
		n = n.children[ns[depth]]
	}
}

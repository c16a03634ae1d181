// Package channels owns how events are addressed and routed: channel
// names, namespace paths, subscription filters, and the index that finds
// the subscriptions an event matches without looking at the others.
//
// # Matching
//
// An event has a channel (its method: "messages", "lifecycle", ...), for
// custom events a name, and a namespace (a path in the agent tree). A
// [Filter] matches it when one of its channels matches (`custom` matches
// every custom event, `custom:NAME` those named NAME) and its namespace
// starts with one of the filter's prefixes with at most Depth segments
// below it. A filter with no prefixes matches every namespace.
//
// # The index
//
// [Index] keeps, per channel key, a trie of namespace segments whose nodes
// list the subscriptions whose prefix ends there. Matching an event walks
// one path of one or two tries, so its cost depends on the subscriptions
// that match, not on how many the thread has. The index is not safe for
// concurrent use; its owner (a thread) locks it.
package channels

import (
	"strings"
)

// The protocol's channels.
const (
	Values      = "values"
	Updates     = "updates"
	Messages    = "messages"
	Tools       = "tools"
	Lifecycle   = "lifecycle"
	Input       = "input"
	Checkpoints = "checkpoints"
	Tasks       = "tasks"
	Custom      = "custom"
)

// CustomPrefix starts the names of named custom channels (custom:NAME).
const CustomPrefix = "custom:"

// Known lists the protocol's channels (named custom channels aside).
var Known = []string{Values, Updates, Messages, Tools, Lifecycle, Input, Checkpoints, Tasks, Custom}

// Valid reports whether name is a channel a filter may ask for.
func Valid(name string) bool {
	if strings.HasPrefix(name, CustomPrefix) {
		return len(name) > len(CustomPrefix)
	}
	for _, k := range Known {
		if k == name {
			return true
		}
	}
	return false
}

// ChannelOf is the channel of an event method: input.requested and
// input.answered travel on the input channel; every other method is its own
// channel.
func ChannelOf(method string) string {
	if strings.HasPrefix(method, "input.") {
		return Input
	}
	return method
}

// Namespace is a path in the agent tree; the root is empty.
type Namespace []string

// HasPrefix reports whether ns starts with prefix.
func (ns Namespace) HasPrefix(prefix Namespace) bool {
	if len(prefix) > len(ns) {
		return false
	}
	for i, p := range prefix {
		if ns[i] != p {
			return false
		}
	}
	return true
}

// Key is a string that identifies the namespace (segments joined by a
// byte that cannot appear in them unescaped).
func (ns Namespace) Key() string { return strings.Join(ns, "\x00") }

// Equal reports whether two namespaces are the same path.
func (ns Namespace) Equal(o Namespace) bool {
	return len(ns) == len(o) && ns.HasPrefix(o)
}

// Unlimited is the Depth of a filter that matches any depth.
const Unlimited = -1

// Filter selects events by channel and namespace.
type Filter struct {
	// Channels to receive; empty means every channel.
	Channels []string
	// Namespaces are prefixes; empty means the whole tree.
	Namespaces []Namespace
	// Depth is how many segments below a prefix an event may be;
	// Unlimited (or any negative value) for no limit.
	Depth int
}

// All is the filter that matches every event.
var All = Filter{Depth: Unlimited}

// Matches reports whether the filter selects an event of the given
// channel, custom name and namespace. It is the reference the index agrees
// with; delivery uses the index.
func (f Filter) Matches(channel, name string, ns Namespace) bool {
	return f.matchesChannel(channel, name) && f.matchesNamespace(ns)
}

func (f Filter) matchesChannel(channel, name string) bool {
	if len(f.Channels) == 0 {
		return true
	}
	for _, c := range f.Channels {
		if c == channel || (channel == Custom && name != "" && c == CustomPrefix+name) {
			return true
		}
	}
	return false
}

func (f Filter) matchesNamespace(ns Namespace) bool {
	if len(f.Namespaces) == 0 {
		return f.Depth < 0 || len(ns) <= f.Depth
	}
	for _, p := range f.Namespaces {
		if ns.HasPrefix(p) && (f.Depth < 0 || len(ns)-len(p) <= f.Depth) {
			return true
		}
	}
	return false
}

// channelKeys are the index keys a filter's subscription is stored under.
func (f Filter) channelKeys() []string {
	if len(f.Channels) == 0 {
		return []string{anyChannel}
	}
	return f.Channels
}

// anyChannel is the index key of filters without channels.
const anyChannel = "\x00any"

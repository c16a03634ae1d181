package server

import (
	"bytes"
	"math"
	"unicode/utf8"
	"unsafe"

	"github.com/agentstream/agentstream/channels"
)

// routing is what DecodeEvent reads of an event besides its bytes.
type routing struct {
	method, id string
	seq        uint64
	hasSeq     bool
	namespace  []string
	name       string
	hasName    bool
}

// decodeRouting reads the routing fields of an event in the exact layout
// encodeEventJSON writes (what every node stores and publishes), without
// encoding/json, which was most of what receiving another node's event
// cost. It reports false, and DecodeEvent falls back to encoding/json,
// for anything else: another member order, white space, an escaped
// string. It does not validate the data member: stored events are what
// a node encoded.
func decodeRouting(b []byte) (r routing, ok bool) {
	p := parser{b: b}
	if !p.lit(`{"type":"event",`) {
		return r, false
	}
	if p.lit(`"event_id":`) {
		if r.id, ok = p.str(); !ok || !p.lit(`,"seq":`) {
			return r, false
		}
		if r.seq, ok = p.uint(); !ok || !p.lit(`,`) {
			return r, false
		}
		r.hasSeq = true
	}
	if !p.lit(`"method":`) {
		return r, false
	}
	if r.method, ok = p.str(); !ok || !p.lit(`,"params":{"namespace":[`) {
		return r, false
	}
	for !p.lit(`]`) {
		if len(r.namespace) > 0 && !p.lit(`,`) {
			return r, false
		}
		var seg string
		if seg, ok = p.str(); !ok {
			return r, false
		}
		r.namespace = append(r.namespace, seg)
	}
	if !p.lit(`,"timestamp":`) {
		return r, false
	}
	if _, ok = p.uint(); !ok {
		return r, false
	}
	if p.lit(`,"node":`) {
		if _, ok = p.str(); !ok {
			return r, false
		}
	}
	if !p.lit(`,"data":`) || !bytes.HasSuffix(b, []byte("}}")) {
		return r, false
	}
	if p.lit(`{"name":`) {
		if r.name, ok = p.str(); !ok {
			return r, false
		}
		r.hasName = true
	} else if r.method == channels.Custom && !p.lit(`{"payload":`) {
		return r, false // custom data in another layout: its name may be further on
	}
	return r, true
}

// parser reads b from i on.
type parser struct {
	b []byte
	i int
}

// lit consumes s if b continues with it.
func (p *parser) lit(s string) bool {
	if len(p.b)-p.i < len(s) || string(p.b[p.i:p.i+len(s)]) != s {
		return false
	}
	p.i += len(s)
	return true
}

// str consumes a JSON string with no escapes in it. The string it returns
// shares b's memory (DecodeEvent keeps b as the event's JSON, never
// modified), so reading an event allocates for none of its strings.
func (p *parser) str() (string, bool) {
	if !p.lit(`"`) {
		return "", false
	}
	end := bytes.IndexByte(p.b[p.i:], '"')
	if end < 0 {
		return "", false
	}
	s := p.b[p.i : p.i+end]
	for _, c := range s {
		if c == '\\' || c < 0x20 {
			return "", false
		}
	}
	if !utf8.Valid(s) {
		return "", false // encoding/json reads invalid bytes as U+FFFD
	}
	p.i += end + 1
	if len(s) == 0 {
		return "", true
	}
	return unsafe.String(&s[0], len(s)), true
}

// uint consumes an unsigned integer: digits, no leading zero but for 0
// itself, within 64 bits.
func (p *parser) uint() (uint64, bool) {
	j := p.i
	var n uint64
	for j < len(p.b) && j-p.i < 19 && isDigit(p.b[j]) { // 19 digits cannot overflow
		n = n*10 + uint64(p.b[j]-'0')
		j++
	}
	if j < len(p.b) && isDigit(p.b[j]) { // a 20th digit may
		d := uint64(p.b[j] - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, false
		}
		n = n*10 + d
		j++
		if j < len(p.b) && isDigit(p.b[j]) {
			return 0, false
		}
	}
	if j == p.i || p.b[p.i] == '0' && j-p.i > 1 {
		return 0, false // no digit, or a leading zero (not JSON)
	}
	p.i = j
	return n, true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

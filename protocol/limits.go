package protocol

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// DecodeLimits bound what one frame may cost to decode. A command is small
// (a method, an id and params whose largest parts are a run's input or an
// interrupt's answer), so a frame nested deeper, or holding more values,
// than a command could reasonably need is refused by a linear scan of its
// bytes, before anything is decoded or allocated.
//
// With the defaults and a 1 MiB frame, the worst a frame can cost is one
// scan of its bytes (about a millisecond) when it is refused, and when it is
// accepted a decode of at most MaxValues values: a few MB of memory and a
// few milliseconds of CPU (measured in TestWorstFrameCost).
type DecodeLimits struct {
	// MaxDepth is the deepest nesting of arrays and maps (DefaultMaxDepth).
	MaxDepth int
	// MaxValues is the most values in one frame, counting every array,
	// map, map key and scalar (DefaultMaxValues).
	MaxValues int
}

// The defaults of DecodeLimits.
const (
	DefaultMaxDepth  = 32
	DefaultMaxValues = 10_000
)

func (l DecodeLimits) withDefaults() DecodeLimits {
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	if l.MaxValues <= 0 {
		l.MaxValues = DefaultMaxValues
	}
	return l
}

// LimitError is a frame refused by DecodeLimits before it was decoded.
type LimitError struct {
	// Limit names the bound: "depth" or "values".
	Limit string
	Max   int
}

func (e *LimitError) Error() string {
	if e.Limit == "depth" {
		return fmt.Sprintf("nested deeper than %d levels", e.Max)
	}
	return fmt.Sprintf("more than %d values in one frame", e.Max)
}

// Check refuses a JSON text deeper or with more values than l allows (zero
// fields: the defaults), by one scan of its bytes, before anything is
// decoded: a *LimitError. It does not check that the text is well formed.
func (l DecodeLimits) Check(data []byte) error { return l.withDefaults().checkJSON(data) }

// checkJSON scans a JSON text once, without decoding it, and refuses one
// deeper or with more values than l allows. It does not check that the text
// is well formed: the decoder that follows does.
func (l DecodeLimits) checkJSON(data []byte) error {
	depth, values := 0, 0
	inString := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
			values++ // a string, or a key
		case '{', '[':
			depth++
			values++
			if depth > l.MaxDepth {
				return &LimitError{Limit: "depth", Max: l.MaxDepth}
			}
		case '}', ']':
			depth--
		case 't', 'f', 'n', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			values++
			// Skip the rest of the literal: one value, however long.
			for i+1 < len(data) && strings.IndexByte("{}[],:\" \t\r\n", data[i+1]) < 0 {
				i++
			}
		}
		if values > l.MaxValues {
			return &LimitError{Limit: "values", Max: l.MaxValues}
		}
	}
	return nil
}

// errCBORTruncated is a CBOR item that runs past the end of its frame.
var errCBORTruncated = errors.New("an item runs past the end of the frame")

// NoJSONError is a CBOR frame holding an item that has no JSON equivalent:
// a command means the same in both encodings.
type NoJSONError struct{ What string }

func (e *NoJSONError) Error() string { return e.What + ", which has no JSON equivalent" }

// checkCBOR walks one CBOR item once, without decoding it, and refuses one
// deeper or with more values than l allows, truncated, followed by more
// bytes, or holding an item JSON cannot say (a byte string, a tag, a
// simple value other than false, true and null, a NaN or infinite float,
// a map key that is not text): a *NoJSONError.
func (l DecodeLimits) checkCBOR(data []byte) error {
	end, err := l.scanCBOR(data)
	if err == nil && end != len(data) {
		return errors.New("extra data after the command")
	}
	return err
}

// scanCBOR walks the CBOR item at the start of data and returns where it
// ends.
func (l DecodeLimits) scanCBOR(data []byte) (int, error) {
	// pending[k] is how many items the k-th open container still holds
	// (-1: indefinite length, ended by a break byte); keys[k] is set for a
	// map and counts its items read so far, for telling keys from values.
	pending := make([]int64, 0, 8)
	keys := make([]int64, 0, 8)
	values := 0
	pos := 0
	for {
		if pos >= len(data) {
			return 0, errCBORTruncated
		}
		opened := false
		if data[pos] == 0xff && len(pending) > 0 && pending[len(pending)-1] == -1 {
			pos++
			pending = pending[:len(pending)-1]
			keys = keys[:len(keys)-1] // the parent counts it below
		} else {
			values++
			if values > l.MaxValues {
				return 0, &LimitError{Limit: "values", Max: l.MaxValues}
			}
			major, arg, indefinite, next, err := cborHead(data, pos)
			if err != nil {
				return 0, err
			}
			if err := jsonEquivalent(data, pos, major, keys); err != nil {
				return 0, err
			}
			pos = next
			switch major {
			case 2, 3: // byte and text strings
				if pos, err = cborString(data, pos, major, arg, indefinite); err != nil {
					return 0, err
				}
			case 4, 5: // arrays and maps
				if len(pending) >= l.MaxDepth {
					return 0, &LimitError{Limit: "depth", Max: l.MaxDepth}
				}
				count := int64(-1)
				if !indefinite {
					if arg > uint64(len(data)) { // each item takes a byte at least
						return 0, errCBORTruncated
					}
					count = int64(arg)
					if major == 5 {
						count *= 2
					}
				}
				pending = append(pending, count)
				if major == 5 {
					keys = append(keys, 0)
				} else {
					keys = append(keys, -1)
				}
				opened = true // its items are counted as they are read
			case 6: // a tag: the item it tags follows
				continue
			}
		}
		if !opened && len(pending) > 0 {
			if pending[len(pending)-1] > 0 {
				pending[len(pending)-1]-- // one item of the open container was read
			}
			if keys[len(keys)-1] >= 0 {
				keys[len(keys)-1]++
			}
		}
		for len(pending) > 0 && pending[len(pending)-1] == 0 {
			pending = pending[:len(pending)-1] // a container ended: one item of its parent
			keys = keys[:len(keys)-1]
			if len(pending) > 0 && pending[len(pending)-1] > 0 {
				pending[len(pending)-1]--
			}
			if len(keys) > 0 && keys[len(keys)-1] >= 0 {
				keys[len(keys)-1]++
			}
		}
		if len(pending) == 0 {
			return pos, nil
		}
	}
}

// jsonEquivalent refuses the CBOR item whose head is at pos (of major
// type major) when JSON has nothing like it; keys says, for the innermost
// open container, whether it is a map and how many of its items were read
// (an even count: this item is a key).
func jsonEquivalent(data []byte, pos int, major byte, keys []int64) error {
	if n := len(keys); n > 0 && keys[n-1] >= 0 && keys[n-1]%2 == 0 && major != 3 {
		return &NoJSONError{What: "a map key that is not text"}
	}
	switch major {
	case 2:
		return &NoJSONError{What: "a byte string"}
	case 6:
		return &NoJSONError{What: "a tag"}
	case 7:
		switch info := data[pos] & 0x1f; info {
		case 20, 21, 22: // false, true, null
		case 25, 26, 27:
			if nonFinite(data[pos+1:], info) {
				return &NoJSONError{What: "a NaN or infinite number"}
			}
		default:
			return &NoJSONError{What: fmt.Sprintf("the simple value %d", info)}
		}
	}
	return nil
}

// nonFinite reports whether the half (info 25), single (26) or double
// (27) precision float at the start of b is NaN or infinite: its exponent
// bits are all set.
func nonFinite(b []byte, info byte) bool {
	switch info {
	case 25:
		return len(b) >= 2 && binary.BigEndian.Uint16(b)&0x7c00 == 0x7c00
	case 26:
		return len(b) >= 4 && binary.BigEndian.Uint32(b)&0x7f800000 == 0x7f800000
	}
	return len(b) >= 8 && binary.BigEndian.Uint64(b)&0x7ff0000000000000 == 0x7ff0000000000000
}

// cborString skips a string's content starting at pos: its length, or its
// chunks up to the break byte.
func cborString(data []byte, pos int, major byte, n uint64, indefinite bool) (int, error) {
	if !indefinite {
		if uint64(len(data)-pos) < n {
			return 0, errCBORTruncated
		}
		return pos + int(n), nil
	}
	for {
		if pos >= len(data) {
			return 0, errCBORTruncated
		}
		if data[pos] == 0xff {
			return pos + 1, nil
		}
		m, n, ind, next, err := cborHead(data, pos)
		if err != nil {
			return 0, err
		}
		if m != major || ind {
			return 0, errors.New("a string chunk of another kind")
		}
		if uint64(len(data)-next) < n {
			return 0, errCBORTruncated
		}
		pos = next + int(n)
	}
}

// cborHead reads the head of the CBOR item at pos: its major type, its
// argument (a length, a count or a value) and where its content starts.
func cborHead(data []byte, pos int) (major byte, arg uint64, indefinite bool, next int, err error) {
	b := data[pos]
	major, info := b>>5, b&0x1f
	pos++
	switch {
	case info < 24:
		return major, uint64(info), false, pos, nil
	case info <= 27:
		n := 1 << (info - 24)
		if len(data)-pos < n {
			return 0, 0, false, 0, errCBORTruncated
		}
		switch n {
		case 1:
			arg = uint64(data[pos])
		case 2:
			arg = uint64(binary.BigEndian.Uint16(data[pos:]))
		case 4:
			arg = uint64(binary.BigEndian.Uint32(data[pos:]))
		default:
			arg = binary.BigEndian.Uint64(data[pos:])
		}
		if major == 7 {
			arg = 0 // a float or simple value: no content follows
		}
		return major, arg, false, pos + n, nil
	case info == 31 && major >= 2 && major <= 5:
		return major, 0, true, pos, nil
	}
	return 0, 0, false, 0, fmt.Errorf("additional information %d in major type %d", info, major)
}

// PeekID reads a command's id from the start of a frame without decoding
// the frame: the value of a top-level "id" member that comes within the
// first 4 KiB. It is for answering a frame refused before it was decoded
// (rate_limited); nil when there is no such id.
func PeekID(data []byte, isCBOR bool) *uint64 {
	if len(data) > 4096 {
		data = data[:4096]
	}
	if isCBOR {
		return peekCBORID(data)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil
		}
		if k == "id" {
			var n json.Number
			if dec.Decode(&n) != nil {
				return nil
			}
			f, err := n.Float64()
			if err != nil {
				return nil
			}
			return commandID(f)
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return nil
		}
	}
	return nil
}

func peekCBORID(data []byte) *uint64 {
	major, pairs, indefinite, pos, err := cborHead(data, 0)
	if err != nil || major != 5 || indefinite {
		return nil
	}
	for range min(pairs, 64) {
		km, kn, kind, kpos, err := cborHead(data, pos)
		if err != nil || km != 3 || kind || uint64(len(data)-kpos) < kn {
			return nil
		}
		key := string(data[kpos : kpos+int(kn)])
		pos = kpos + int(kn)
		end, err := cborSkip(data, pos)
		if err != nil {
			return nil
		}
		if key == "id" {
			vm, v, _, _, err := cborHead(data, pos)
			if err != nil || vm != 0 || v > maxJSInt {
				return nil
			}
			return &v
		}
		pos = end
	}
	return nil
}

// cborSkip returns where the item at pos ends.
func cborSkip(data []byte, pos int) (int, error) {
	n, err := DecodeLimits{MaxDepth: DefaultMaxDepth, MaxValues: len(data) + 1}.scanCBOR(data[pos:])
	return pos + n, err
}

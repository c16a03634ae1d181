package server

import (
	"encoding/json"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/agentstream/agentstream/protocol"
)

// JSONAppender is a payload that writes its own JSON. Publishing a custom
// event ([RunContext.Custom]) whose payload is one calls AppendJSON
// instead of encoding/json, whose reflection is most of what publishing a
// small event costs. AppendJSON must append exactly one compact, valid
// JSON value, the same as json.Marshal would make of the payload (that is
// not checked); the built-in firehose's payload is one.
type JSONAppender interface {
	AppendJSON(b []byte) []byte
}

// scratch holds the buffers events are encoded in before they are copied
// into one of exactly their size.
var scratch = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// encodeEventJSON writes an event the server builds as JSON: the envelope
// and params by hand, the data member with encoding/json (custom data by
// hand too, and its payload by its own AppendJSON when it has one). The
// result is the JSON of the generated ServerEvent types
// (TestEncodeEventJSONMatchesTheGeneratedTypes checks every kind),
// without their reflection and re-compaction at every level, which were
// most of the cost of publishing an event. It is written into a pooled
// buffer and copied into one allocation of its exact size.
func encodeEventJSON(method, id string, seq uint64, h header, data any) ([]byte, error) {
	sp := scratch.Get().(*[]byte)
	defer func() {
		if cap(*sp) <= 64<<10 {
			*sp = (*sp)[:0]
			scratch.Put(sp)
		}
	}()
	b := (*sp)[:0]
	b = append(b, `{"type":"event",`...)
	if seq > 0 {
		b = append(b, `"event_id":`...)
		b = appendString(b, id)
		b = append(b, `,"seq":`...)
		b = strconv.AppendUint(b, seq, 10)
		b = append(b, ',')
	}
	b = append(b, `"method":`...)
	b = appendString(b, method)
	b = append(b, `,"params":{"namespace":[`...)
	for i, seg := range h.ns {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, seg)
	}
	b = append(b, `],"timestamp":`...)
	b = strconv.AppendUint(b, h.ts, 10)
	if h.node != nil {
		b = append(b, `,"node":`...)
		b = appendString(b, *h.node)
	}
	b = append(b, `,"data":`...)
	var err error
	if custom, ok := data.(protocol.CustomData); ok && custom.Extra == nil {
		b = append(b, '{')
		if custom.Name != nil {
			b = append(b, `"name":`...)
			b = appendString(b, *custom.Name)
			b = append(b, ',')
		}
		b = append(b, `"payload":`...)
		if b, err = appendValue(b, custom.Payload); err != nil {
			return nil, err
		}
		b = append(b, '}')
	} else if b, err = appendValue(b, data); err != nil {
		return nil, err
	}
	b = append(b, "}}"...)
	*sp = b
	return append(make([]byte, 0, len(b)), b...), nil
}

// appendValue appends v's JSON: its own when it is a JSONAppender,
// encoding/json's otherwise.
func appendValue(b []byte, v any) ([]byte, error) {
	if a, ok := v.(JSONAppender); ok {
		return a.AppendJSON(b), nil
	}
	d, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, d...), nil
}

// AppendJSONString appends s as a JSON string, escaped exactly as
// encoding/json escapes it: for a [JSONAppender]'s strings.
func AppendJSONString(b []byte, s string) []byte { return appendString(b, s) }

// appendString appends s as a JSON string. Plain ASCII is copied as is;
// anything else goes through encoding/json, so escaping (HTML characters,
// invalid UTF-8, U+2028) is exactly its.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' || c >= utf8.RuneSelf {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

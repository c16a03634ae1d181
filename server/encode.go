package server

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/agentstream/agentstream/protocol"
)

// encodeEventJSON writes an event the server builds as JSON: the envelope
// and params by hand, the data member with encoding/json (by hand too for
// custom data). The result is the JSON of the generated ServerEvent types
// (TestEncodeEventJSONMatchesTheGeneratedTypes checks every kind), without
// their reflection and re-compaction at every level, which were most of
// the cost of publishing an event.
func encodeEventJSON(method, id string, seq uint64, h header, data any) ([]byte, error) {
	// The data member: custom data is written below from its payload's
	// JSON, anything else is encoded whole here.
	custom, isCustom := data.(protocol.CustomData)
	isCustom = isCustom && custom.Extra == nil
	var d []byte
	var err error
	if isCustom {
		d, err = json.Marshal(custom.Payload)
	} else {
		d, err = json.Marshal(data)
	}
	if err != nil {
		return nil, err
	}
	// The exact size for plain text (escapes add to it): the literal parts,
	// two numbers of at most 20 digits, the texts and the data.
	size := 96 + 40 + len(id) + len(method) + len(d)
	for _, seg := range h.ns {
		size += len(seg) + 3
	}
	if h.node != nil {
		size += 10 + len(*h.node)
	}
	if isCustom {
		size += 24
		if custom.Name != nil {
			size += len(*custom.Name)
		}
	}
	b := make([]byte, 0, size)
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
	if isCustom {
		b = append(b, '{')
		if custom.Name != nil {
			b = append(b, `"name":`...)
			b = appendString(b, *custom.Name)
			b = append(b, ',')
		}
		b = append(b, `"payload":`...)
		b = append(b, d...)
		b = append(b, '}')
	} else {
		b = append(b, d...)
	}
	return append(b, "}}"...), nil
}

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

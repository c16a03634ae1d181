package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/agentstream/agentstream/runtime/cddlrt"
	"github.com/santhosh-tekuri/jsonschema/v5"
)

// eventSchemas maps each event method to the compiled schema of its
// event, built once, on first use.
var eventSchemas = sync.OnceValues(func() (map[string]*jsonschema.Schema, error) {
	return methodSchemas("ServerEvent")
})

// ProducerEvent is one event a producer publishes: the typed event, and
// the time it names (milliseconds; 0 when it named none, for the server
// to stamp).
type ProducerEvent struct {
	Event     ServerEventVariant
	Timestamp uint64
}

// SplitBatch splits a producer's batch of events (POST
// /threads/{id}/events) into its events without reading them: a JSON
// array of events, or with ndjson one event per line (blank lines
// skipped). A batch of no event, or of more than maxEvents
// (resource_exhausted), is refused. Splitting first lets a server count a
// batch (its rate limit) before it spends on reading it.
func SplitBatch(body []byte, ndjson bool, maxEvents int) ([][]byte, *ErrorResponse) {
	var items [][]byte
	if ndjson {
		for rest := body; len(rest) > 0 && len(items) <= maxEvents; {
			line, after, _ := bytes.Cut(rest, []byte("\n"))
			if line = bytes.TrimSpace(line); len(line) > 0 {
				items = append(items, line)
			}
			rest = after
		}
	} else {
		var errResp *ErrorResponse
		if items, errResp = splitArray(body, maxEvents); errResp != nil {
			return nil, errResp
		}
	}
	if len(items) == 0 {
		return nil, NewError(nil, ErrorCodeInvalidArgument, "the batch holds no event")
	}
	if len(items) > maxEvents {
		return nil, NewError(nil, ErrorCodeResourceExhausted, "a batch holds at most %d events (--ingest-max-events)", maxEvents)
	}
	return items, nil
}

// ProducerEvents reads the events of a batch (SplitBatch). Each is a
// protocol event exactly as clients receive it, without seq and event_id
// (the server assigns them) and with params.timestamp optional; each is
// checked against the generated JSON Schema of its method's event, within
// d's limits. The first event that fails refuses the whole batch: the
// ErrorResponse's message starts with its index and the JSON path of the
// problem (`[2].params.data.delta: ...`). An event over maxEventBytes is
// resource_exhausted.
func (d Decoder) ProducerEvents(items [][]byte, maxEventBytes int) ([]ProducerEvent, *ErrorResponse) {
	s, err := eventSchemas()
	if err != nil {
		return nil, NewError(nil, ErrorCodeUnknownError, "%v", err)
	}
	out := make([]ProducerEvent, 0, len(items))
	for i, item := range items {
		if len(item) > maxEventBytes {
			return nil, NewError(nil, ErrorCodeResourceExhausted, "[%d]: an event is at most %d bytes (--ingest-max-event-bytes), this one has %d", i, maxEventBytes, len(item))
		}
		e, errResp := d.producerEvent(s, item)
		if errResp != nil {
			errResp.Message = fmt.Sprintf("[%d]%s", i, pathTail(errResp.Message))
			return nil, errResp
		}
		out = append(out, e)
	}
	return out, nil
}

// pathTail joins an event's error message onto its index: "params.x: ..."
// becomes ".params.x: ...", and a message about the event itself ": ...".
func pathTail(msg string) string {
	for _, whole := range []string{"event: ", "command: "} {
		if strings.HasPrefix(msg, whole) {
			return msg[len(whole)-2:]
		}
	}
	return "." + msg
}

// producerEvent checks and decodes one event of a batch: in one pass
// with the strict decoder (the event's method picks its rule), with
// params.timestamp put in as 0 when the producer left it out. An event
// the strict decoder refuses is read again through the JSON Schema, only
// to word the error (its path and rule), as commands are.
func (d Decoder) producerEvent(schemas map[string]*jsonschema.Schema, item []byte) (ProducerEvent, *ErrorResponse) {
	if err := d.Limits.withDefaults().checkJSON(item); err != nil {
		return ProducerEvent{}, d.refuse(err)
	}
	if !utf8.Valid(item) {
		return ProducerEvent{}, NewError(nil, ErrorCodeInvalidArgument, "event: malformed JSON: not valid UTF-8")
	}
	var params []byte
	var assigned string
	if cddlrt.EachMember(item, func(key string, raw []byte) error {
		switch key {
		case "seq", "event_id", "eventId":
			assigned = key
		case "params":
			params = raw
		}
		return nil
	}) != nil || params == nil || assigned != "" {
		return d.producerEventViaSchema(schemas, item, nil)
	}
	var rawTS []byte
	if cddlrt.EachMember(params, func(key string, raw []byte) error {
		if key == "timestamp" {
			rawTS = raw
		}
		return nil
	}) != nil {
		return d.producerEventViaSchema(schemas, item, nil)
	}
	typed := item
	if rawTS == nil { // the server stamps it: 0 for the decoder
		typed = withZeroTimestamp(item, params)
	}
	var e ServerEvent
	strictErr := cddlrt.DecodeStrictJSON(typed, &e)
	if strictErr != nil || e.Value == nil {
		return d.producerEventViaSchema(schemas, item, strictErr)
	}
	if _, missed := e.Value.(*ServerEventEventsMissed); missed {
		return ProducerEvent{}, NewError(nil, ErrorCodeInvalidArgument, "method: events.missed is the server's own notice")
	}
	var ts uint64
	if rawTS != nil {
		var f float64
		if json.Unmarshal(rawTS, &f) == nil {
			if id := commandID(f); id != nil {
				ts = *id
			}
		}
	}
	return ProducerEvent{Event: e.Value, Timestamp: ts}, nil
}

// withZeroTimestamp returns a copy of item with "timestamp":0 first in its
// params object (params is a subslice of item).
func withZeroTimestamp(item, params []byte) []byte {
	at := cap(item) - cap(params) + bytes.IndexByte(params, '{') + 1
	member := `"timestamp":0,`
	if bytes.Equal(bytes.TrimSpace(params[bytes.IndexByte(params, '{')+1:]), []byte("}")) {
		member = `"timestamp":0`
	}
	out := make([]byte, 0, len(item)+len(member))
	out = append(out, item[:at]...)
	out = append(out, member...)
	return append(out, item[at:]...)
}

// producerEventViaSchema reads an event the strict decoder refused (with
// strictErr, or nil when the event's shape stopped it before) through the
// JSON Schema of its method, for an error that names what is wrong. An
// event the schema accepts is still refused with the strict decoder's
// reason, unless that reason is only a member the generated types cannot
// check (cddlrt.ErrUnchecked).
func (d Decoder) producerEventViaSchema(schemas map[string]*jsonschema.Schema, item []byte, strictErr error) (ProducerEvent, *ErrorResponse) {
	v, errResp := decodeJSON(item)
	if errResp != nil {
		errResp.Message = "event: " + errResp.Message
		return ProducerEvent{}, errResp
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return ProducerEvent{}, NewError(nil, ErrorCodeInvalidArgument, "event: an event is a JSON object")
	}
	for _, assigned := range []string{"seq", "event_id", "eventId"} {
		if _, has := obj[assigned]; has {
			return ProducerEvent{}, NewError(nil, ErrorCodeInvalidArgument, "%s: the server assigns it; leave it out", assigned)
		}
	}
	method, _ := obj["method"].(string)
	if method == "events.missed" {
		return ProducerEvent{}, NewError(nil, ErrorCodeInvalidArgument, "method: %s is the server's own notice", method)
	}
	s, ok := schemas[method]
	if !ok {
		return ProducerEvent{}, NewError(nil, ErrorCodeInvalidArgument, "method: %q is not an event method of the protocol", method)
	}
	var ts uint64
	if params, ok := obj["params"].(map[string]any); ok {
		if t, has := params["timestamp"]; has {
			if id := commandID(t); id != nil {
				ts = *id
			}
		} else {
			params["timestamp"] = 0.0 // for the schema; the server stamps it
		}
	}
	if err := s.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return ProducerEvent{}, NewError(nil, ErrorCodeInvalidArgument, "%s", describe(ve))
		}
		return ProducerEvent{}, NewError(nil, ErrorCodeInvalidArgument, "%v", err)
	}
	if strictErr != nil && !errors.Is(strictErr, cddlrt.ErrUnchecked) {
		return ProducerEvent{}, NewError(nil, ErrorCodeInvalidArgument, "event: %v", strictErr)
	}
	// The typed event from the bytes themselves: a missing timestamp
	// decodes as 0, which the server replaces with its own.
	var e ServerEvent
	if err := json.Unmarshal(item, &e); err != nil || e.Value == nil {
		return ProducerEvent{}, NewError(nil, ErrorCodeInvalidArgument, "event: not an event this server knows (%v)", err)
	}
	return ProducerEvent{Event: e.Value, Timestamp: ts}, nil
}

// splitArray splits a JSON array into its items' texts by one scan of its
// bytes, without decoding or checking them (each item is decoded, and
// checked, on its own: ProducerEvents): splitting a hostile batch costs
// one pass over it, whatever it holds. It stops past maxItems + 1 items.
func splitArray(body []byte, maxItems int) ([][]byte, *ErrorResponse) {
	notArray := NewError(nil, ErrorCodeInvalidArgument, "a batch of events is a JSON array (or NDJSON with Content-Type application/x-ndjson)")
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '[' {
		if len(body) > 0 && (body[0] == '{' || body[0] == '"' || body[0] == 't' || body[0] == 'f' || body[0] == 'n' || body[0] == '-' || '0' <= body[0] && body[0] <= '9') {
			return nil, notArray
		}
		return nil, NewError(nil, ErrorCodeInvalidArgument, "malformed JSON: the body is not a JSON array")
	}
	var items [][]byte
	depth, start, inString := 0, -1, false
	item := func(end int) *ErrorResponse {
		if start < 0 {
			return NewError(nil, ErrorCodeInvalidArgument, "malformed JSON: an empty item at byte %d", end)
		}
		items = append(items, bytes.TrimSpace(body[start:end]))
		start = -1
		return nil
	}
	for i := 1; i < len(body); i++ {
		c := body[i]
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
		case ' ', '\t', '\n', '\r':
		case '"':
			inString = true
			if start < 0 {
				start = i
			}
		case '[', '{':
			if start < 0 {
				start = i
			}
			depth++
		case ']', '}':
			if depth > 0 {
				depth--
				continue
			}
			if c != ']' {
				return nil, NewError(nil, ErrorCodeInvalidArgument, "malformed JSON: an unexpected '}' at byte %d", i)
			}
			if start >= 0 || len(items) > 0 {
				if err := item(i); err != nil {
					return nil, err
				}
			}
			if i != len(body)-1 {
				return nil, NewError(nil, ErrorCodeInvalidArgument, "malformed JSON: text after the batch's array at byte %d", i+1)
			}
			return items, nil
		case ',':
			if depth == 0 {
				if err := item(i); err != nil {
					return nil, err
				}
				if len(items) > maxItems {
					return items, nil // too many: the caller refuses it
				}
			}
		default:
			if start < 0 {
				start = i
			}
		}
	}
	return nil, NewError(nil, ErrorCodeInvalidArgument, "malformed JSON: the batch's array does not end")
}

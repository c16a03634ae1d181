package protocol

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/agentstream/agentstream/runtime/cddlrt"
	"github.com/santhosh-tekuri/jsonschema/v5"
)

// schemaJSON is the JSON Schema generated from protocol.cddl.
//
//go:embed schema.json
var schemaJSON []byte

// maxJSInt is the largest integer JavaScript represents exactly (JsUint).
const maxJSInt = 1<<53 - 1

// commandSchemas maps each method agentstream accepts to the compiled
// schema of its command. It is built once, from the tagged choice that
// the generator wrote for ClientCommand.
var commandSchemas = sync.OnceValues(func() (map[string]*jsonschema.Schema, error) {
	return methodSchemas("ClientCommand")
})

// methodSchemas compiles, for the tagged choice def of the embedded schema
// (a choice told apart by "method"), the schema of each method's variant:
// a frame is checked against its own method's alone.
func methodSchemas(def string) (map[string]*jsonschema.Schema, error) {
	var doc struct {
		Defs map[string]struct {
			AllOf []struct {
				If struct {
					Properties struct {
						Method struct {
							Const string `json:"const"`
						} `json:"method"`
					} `json:"properties"`
				} `json:"if"`
				Then struct {
					Ref string `json:"$ref"`
				} `json:"then"`
			} `json:"allOf"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(schemaJSON, &doc); err != nil {
		return nil, fmt.Errorf("protocol: embedded schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	if err := c.AddResource("protocol.json", bytes.NewReader(schemaJSON)); err != nil {
		return nil, fmt.Errorf("protocol: embedded schema: %w", err)
	}
	out := map[string]*jsonschema.Schema{}
	for _, branch := range doc.Defs[def].AllOf {
		method, ref := branch.If.Properties.Method.Const, branch.Then.Ref
		if method == "" || ref == "" {
			continue
		}
		s, err := c.Compile("protocol.json" + ref)
		if err != nil {
			return nil, fmt.Errorf("protocol: compiling the schema of %s: %w", method, err)
		}
		out[method] = s
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("protocol: the embedded schema defines no %s", def)
	}
	return out, nil
}

// eventStreamRequestSchema is compiled once, on first use: compiling
// compiles the whole document, which must not happen once per request.
var eventStreamRequestSchema = sync.OnceValues(func() (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	if err := c.AddResource("protocol.json", bytes.NewReader(schemaJSON)); err != nil {
		return nil, err
	}
	return c.Compile("protocol.json#/$defs/EventStreamRequest")
})

// DecodeEventStreamRequest reads the body of an SSE stream request,
// returning the ErrorResponse (with a null id) to send when it is invalid.
func DecodeEventStreamRequest(data []byte) (*EventStreamRequest, *ErrorResponse) {
	return Decoder{}.EventStreamRequest(data)
}

// Decoder decodes frames and request bodies within its Limits (zero
// fields: the defaults). The package's Decode functions are a zero Decoder.
type Decoder struct {
	Limits DecodeLimits
	// OnLimit, when set, is called with the limit ("depth" or "values") of
	// each frame refused by Limits, for counting.
	OnLimit func(limit string)
}

// refuse answers a frame that Limits refused before decoding.
func (d Decoder) refuse(err error) *ErrorResponse {
	var le *LimitError
	if errors.As(err, &le) && d.OnLimit != nil {
		d.OnLimit(le.Limit)
	}
	if le != nil {
		return NewError(nil, ErrorCodeInvalidArgument, "command: %v (a limit of this server)", err)
	}
	return NewError(nil, ErrorCodeInvalidArgument, "%v", err)
}

// EventStreamRequest is DecodeEventStreamRequest within d's limits.
func (d Decoder) EventStreamRequest(data []byte) (*EventStreamRequest, *ErrorResponse) {
	if err := d.Limits.withDefaults().checkJSON(data); err != nil {
		return nil, d.refuse(err)
	}
	v, errResp := decodeJSON(data)
	if errResp != nil {
		return nil, errResp
	}
	s, err := eventStreamRequestSchema()
	if err != nil {
		return nil, NewError(nil, ErrorCodeUnknownError, "%v", err)
	}
	if err := s.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			msg := describe(ve)
			if rest, ok := strings.CutPrefix(msg, "command: "); ok { // the whole body
				msg = "the stream request: " + rest
				if strings.Contains(rest, "'channels'") {
					msg += `; it names the channels to stream, as {"channels": ["messages", "lifecycle"]}`
				}
			}
			return nil, NewError(nil, ErrorCodeInvalidArgument, "%s", msg)
		}
		return nil, NewError(nil, ErrorCodeInvalidArgument, "%v", err)
	}
	var req EventStreamRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, NewError(nil, ErrorCodeInvalidArgument, "%v", err)
	}
	return &req, nil
}

// Methods lists the command methods agentstream accepts.
func Methods() []string {
	schemas, err := commandSchemas()
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(schemas))
	for m := range schemas {
		out = append(out, m)
	}
	return out
}

// DecodeCommand reads one JSON command frame. It returns the typed command,
// or the ErrorResponse to send back when the frame is not a valid command:
//   - malformed JSON, or a frame that is not an object: invalid_argument
//     with a null id;
//   - a method the server does not know: unknown_command;
//   - anything the schema rejects: invalid_argument, whose message names
//     the JSON path and the schema rule broken, such as
//     `params.assistant_id: expected string, but got number (rule RunStartParams)`.
//
// The error's id is the command's when the frame has a usable one.
func DecodeCommand(data []byte) (*ClientCommand, *ErrorResponse) {
	return Decoder{}.Command(data)
}

// Command is DecodeCommand within d's limits.
//
// A valid command is decoded once, straight into the generated types, by
// the strict decoder (cddlrt.DecodeStrictJSON: every member, null, variant
// and value checked as the schema does; TestStrictDecoderAgreesWithTheSchema
// holds the two to the same answers). Only a frame the strict decoder
// refuses is read again through the JSON Schema, whose error names the
// path and rule a client is told.
func (d Decoder) Command(data []byte) (*ClientCommand, *ErrorResponse) {
	if err := d.Limits.withDefaults().checkJSON(data); err != nil {
		return nil, d.refuse(err)
	}
	if !utf8.Valid(data) {
		return nil, NewError(nil, ErrorCodeInvalidArgument, "malformed JSON: not valid UTF-8")
	}
	var cmd ClientCommand
	strictErr := cddlrt.DecodeStrictJSON(data, &cmd)
	if strictErr == nil && cmd.Value != nil {
		return &cmd, nil
	}
	return d.commandViaSchema(data, strictErr)
}

// commandViaSchema reads a JSON frame the strict decoder refused (with
// strictErr) through the JSON Schema, for an error that names what is
// wrong. A frame the schema accepts is still refused with the strict
// decoder's reason, unless that reason is only a member the generated
// types cannot check (cddlrt.ErrUnchecked), which the schema did: then
// the frame is decoded into its method's variant.
func (d Decoder) commandViaSchema(data []byte, strictErr error) (*ClientCommand, *ErrorResponse) {
	// Numbers decode as float64 for validation, which is exact for every
	// integer the protocol allows (up to 2^53-1); the typed decode below
	// reads the frame itself.
	v, errResp := decodeJSON(data)
	if errResp != nil {
		return nil, errResp
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, NewError(nil, ErrorCodeInvalidArgument, "a command must be a JSON object")
	}
	id := commandID(obj["id"])
	method, ok := obj["method"].(string)
	if !ok {
		return nil, NewError(id, ErrorCodeInvalidArgument, "method: a command needs a text member \"method\"")
	}
	schemas, err := commandSchemas()
	if err != nil {
		return nil, NewError(id, ErrorCodeUnknownError, "%v", err)
	}
	s, ok := schemas[method]
	if !ok {
		return nil, NewError(id, ErrorCodeUnknownCommand, "unknown method %q", method)
	}
	if err := s.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return nil, NewError(id, ErrorCodeInvalidArgument, "%s", describe(ve))
		}
		return nil, NewError(id, ErrorCodeInvalidArgument, "%v", err)
	}
	if strictErr != nil && !errors.Is(strictErr, cddlrt.ErrUnchecked) {
		return nil, NewError(id, ErrorCodeInvalidArgument, "%v", strictErr)
	}
	// The method is known, so decode straight into its variant rather than
	// through ClientCommand's own dispatch.
	variant := clientCommandVariants[method]()
	if err := json.Unmarshal(data, variant); err != nil {
		// The schema accepted it, so this is a disagreement between the
		// schema and the generated types: report it rather than hide it.
		return nil, NewError(id, ErrorCodeInvalidArgument, "%v", err)
	}
	return &ClientCommand{Value: variant}, nil
}

// DecodeCommandCBOR reads one CBOR command frame (the WebSocket's
// agentstream.cbor subprotocol). A valid frame is decoded once by the
// strict decoder; one it refuses is checked through its JSON form, so it
// is answered with the same errors as JSON; a frame that is not
// well-formed CBOR, or has no JSON equivalent (byte strings, tags, simple
// values other than false, true and null, NaN and infinities, map keys
// that are not text), is invalid_argument with a null id.
func DecodeCommandCBOR(data []byte) (*ClientCommand, *ErrorResponse) {
	return Decoder{}.CommandCBOR(data)
}

// CommandCBOR is DecodeCommandCBOR within d's limits.
func (d Decoder) CommandCBOR(data []byte) (*ClientCommand, *ErrorResponse) {
	if err := d.Limits.withDefaults().checkCBOR(data); err != nil {
		var le *LimitError
		if errors.As(err, &le) {
			return nil, d.refuse(err)
		}
		var nj *NoJSONError
		if errors.As(err, &nj) {
			return nil, NewError(nil, ErrorCodeInvalidArgument, "CBOR without a JSON equivalent: %v", err)
		}
		return nil, NewError(nil, ErrorCodeInvalidArgument, "malformed CBOR: %v", err)
	}
	// Every item has a JSON equivalent (checked above), so a command the
	// strict decoder takes is the command its JSON form is.
	var cmd ClientCommand
	if cddlrt.DecodeStrictCBOR(data, &cmd) == nil && cmd.Value != nil {
		jsonNumbers(reflect.ValueOf(cmd.Value))
		return &cmd, nil
	}
	// Refused, or a CBOR spelling the strict decoder does not take (an
	// integer written as a float): read its JSON form, as JSON is read.
	var v any
	if err := cddlrt.CBORDecMode.Unmarshal(data, &v); err != nil {
		return nil, NewError(nil, ErrorCodeInvalidArgument, "malformed CBOR: %v", err)
	}
	j, err := json.Marshal(v)
	if err != nil {
		return nil, NewError(nil, ErrorCodeInvalidArgument, "CBOR without a JSON equivalent: %v", err)
	}
	return d.Command(j)
}

// jsonNumbers turns the numbers a CBOR decode put in values typed any
// (uint64, int64) into what a JSON decode puts there, so that a command
// means the same to the server in both encodings: float64 in members typed
// any (a run's config read as float64, as from JSON), and json.Number, for
// integers and floats, in a generated type's Extra (kept as decoded from
// JSON with UseNumber). v is a value reached from a decoded command,
// changed in place.
func jsonNumbers(v reflect.Value) { numbersAs(v, false) }

func numbersAs(v reflect.Value, extra bool) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			numbersAs(v.Elem(), extra)
		}
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < v.NumField(); i++ {
			if f := v.Field(i); f.CanSet() {
				numbersAs(f, extra || (t.Field(i).Name == "Extra" && t.Field(i).Tag.Get("json") == "-"))
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return
		}
		for i := 0; i < v.Len(); i++ {
			numbersAs(v.Index(i), extra)
		}
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			e := it.Value()
			if e.Kind() == reflect.Interface && !e.IsNil() {
				if n, ok := jsonNumber(e.Elem(), extra); ok {
					v.SetMapIndex(it.Key(), n)
					continue
				}
			}
			// Maps and slices share their backing store, pointers point.
			numbersAs(e, extra)
		}
	case reflect.Interface:
		if v.IsNil() {
			return
		}
		if n, ok := jsonNumber(v.Elem(), extra); ok {
			if v.CanSet() {
				v.Set(n)
			}
			return
		}
		numbersAs(v.Elem(), extra)
	}
}

// jsonNumber is what a JSON decode would hold for the number in v: a
// float64, or in an Extra a json.Number.
func jsonNumber(v reflect.Value, extra bool) (reflect.Value, bool) {
	var f float64
	var text string
	switch v.Kind() {
	case reflect.Uint64:
		f, text = float64(v.Uint()), strconv.FormatUint(v.Uint(), 10)
	case reflect.Int64:
		f, text = float64(v.Int()), strconv.FormatInt(v.Int(), 10)
	case reflect.Float64, reflect.Float32:
		if !extra {
			return v, false
		}
		text = strconv.FormatFloat(v.Float(), 'g', -1, 64)
	default:
		return v, false
	}
	if extra {
		return reflect.ValueOf(json.Number(text)), true
	}
	return reflect.ValueOf(f), true
}

// decodeJSON reads a message for validation. Text that is not UTF-8 is
// refused rather than quietly turned into U+FFFD (RFC 8259 section 8.1).
func decodeJSON(data []byte) (any, *ErrorResponse) {
	if !utf8.Valid(data) {
		return nil, NewError(nil, ErrorCodeInvalidArgument, "malformed JSON: not valid UTF-8")
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, NewError(nil, ErrorCodeInvalidArgument, "malformed JSON: %s", jsonProblem(err))
	}
	return v, nil
}

// NewError builds an ErrorResponse; id is nil when the command's id is
// unknown.
func NewError(id *uint64, code ErrorCode, format string, args ...any) *ErrorResponse {
	e := &ErrorResponse{Code: code, Message: fmt.Sprintf(format, args...)}
	if id != nil {
		v := JsUint(*id)
		e.ID = &v
	}
	return e
}

// commandID reads a command's id: a JSON integer from 0 to 2^53-1.
func commandID(v any) *uint64 {
	f, ok := v.(float64)
	if !ok || f < 0 || f > maxJSInt || f != math.Trunc(f) {
		return nil
	}
	u := uint64(f)
	return &u
}

func jsonProblem(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		if se.Offset == 0 && se.Error() == "unexpected end of JSON input" {
			return "empty frame"
		}
		return fmt.Sprintf("%s (at byte %d)", se.Error(), se.Offset)
	}
	return err.Error()
}

// describe turns a schema violation into `path: problem (rule Name)`,
// reporting the most specific cause.
func describe(ve *jsonschema.ValidationError) string {
	leaf := deepest(ve)
	path := jsonPath(leaf.InstanceLocation)
	msg := summary(leaf)
	if choices(leaf) && strings.HasSuffix(leaf.KeywordLocation, "/anyOf") {
		// A value that fits none of a choice's alternatives.
		var alts []string
		for _, c := range leaf.Causes {
			alts = append(alts, summary(c))
		}
		msg = "matches none of the choices: " + strings.Join(alts, "; or ")
	}
	if rule := ruleOf(leaf.AbsoluteKeywordLocation); rule != "" {
		msg += " (rule " + rule + ")"
	}
	return path + ": " + msg
}

// summary is the message of ve's first most specific cause.
func summary(ve *jsonschema.ValidationError) string {
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	return ve.Message
}

// choices reports whether ve is a failed choice (anyOf): several causes,
// all about the value ve is about.
func choices(ve *jsonschema.ValidationError) bool {
	if len(ve.Causes) < 2 {
		return false
	}
	for _, c := range ve.Causes {
		if c.InstanceLocation != ve.InstanceLocation {
			return false
		}
	}
	return true
}

// deepest follows the causes down to the violation that names the most
// specific member, stopping at a failed choice.
func deepest(ve *jsonschema.ValidationError) *jsonschema.ValidationError {
	for len(ve.Causes) > 0 && !choices(ve) {
		best := ve.Causes[0]
		for _, c := range ve.Causes[1:] {
			if len(c.InstanceLocation) > len(best.InstanceLocation) {
				best = c
			}
		}
		ve = best
	}
	return ve
}

// jsonPath turns a JSON pointer (/params/namespaces/0) into a path
// (params.namespaces[0]); the whole command is "command".
func jsonPath(pointer string) string {
	if pointer == "" || pointer == "/" {
		return "command"
	}
	var b strings.Builder
	for _, part := range strings.Split(strings.TrimPrefix(pointer, "/"), "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		if _, err := strconv.Atoi(part); err == nil {
			b.WriteString("[" + part + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(part)
	}
	return b.String()
}

// ruleOf names the schema rule a keyword location is in: the innermost
// inlined definition (titled with its rule) on the way, or else the last
// `$defs/Name` of the location.
func ruleOf(loc string) string {
	i := strings.Index(loc, "#")
	if i < 0 {
		return ""
	}
	doc, err := schemaDoc()
	if err != nil {
		return ""
	}
	rule, prev := "", ""
	var node any = doc
	for _, part := range strings.Split(strings.TrimPrefix(loc[i+1:], "/"), "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		if prev == "$defs" {
			rule = part
		}
		prev = part
		switch n := node.(type) {
		case map[string]any:
			node = n[part]
		case []any:
			k, err := strconv.Atoi(part)
			if err != nil || k < 0 || k >= len(n) {
				return rule
			}
			node = n[k]
		default:
			return rule
		}
		if m, ok := node.(map[string]any); ok {
			if t, ok := m["title"].(string); ok {
				rule = t
			}
		}
	}
	return rule
}

// schemaDoc is the embedded schema as plain data, for naming rules in
// errors.
var schemaDoc = sync.OnceValues(func() (map[string]any, error) {
	var doc map[string]any
	err := json.Unmarshal(schemaJSON, &doc)
	return doc, err
})

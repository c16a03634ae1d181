package protocol

import (
	"bytes"
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentstream/agentstream/runtime/cddlrt"
	"github.com/fxamacker/cbor/v2"
	"github.com/stretchr/testify/require"
)

// TestDecodeCommandAcceptsEveryCommand: one valid frame per method decodes
// into the variant of that method.
func TestDecodeCommandAcceptsEveryCommand(t *testing.T) {
	t.Parallel()
	cases := []struct {
		frame string
		want  any
	}{
		{`{"id": 1, "method": "run.start", "params": {"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "hi"}]}, "config": {"configurable": {"checkpoint_id": "c1"}}, "metadata": {"k": 1}, "langsmith_tracer": {"project_name": "p"}, "multitask_strategy": "enqueue", "multitaskStrategy": "enqueue"}}`, &ClientCommandRunStart{}},
		{`{"id": 2, "method": "run.cancel", "params": {"run_id": "r1"}}`, &ClientCommandRunCancel{}},
		{`{"id": 3, "method": "subscription.subscribe", "params": {"channels": ["messages", "custom", "custom:progress"], "namespaces": [[], ["researcher"]], "depth": 1}}`, &ClientCommandSubscriptionSubscribe{}},
		{`{"id": 4, "method": "subscription.unsubscribe", "params": {"subscription_id": "s1"}}`, &ClientCommandSubscriptionUnsubscribe{}},
		{`{"id": 5, "method": "subscription.reconnect", "params": {"run_id": "r1", "last_event_id": "41", "subscriptions": ["s1"]}}`, &ClientCommandSubscriptionReconnect{}},
		{`{"id": 6, "method": "agent.getTree", "params": {}}`, &ClientCommandAgentGetTree{}},
		{`{"id": 7, "method": "input.respond", "params": {"namespace": [], "interrupt_id": "i1", "response": {"approved": true}, "update": {"x": 1}, "goto": "node_a"}}`, &ClientCommandInputRespond{}},
		{`{"id": 8, "method": "input.respond", "params": {"responses": [{"namespace": [], "interrupt_id": "i1", "response": 1}, {"namespace": ["a"], "interrupt_id": "i2", "response": 2}], "goto": [{"node": "n", "input": 1}, "m"], "strict_resume": true}}`, &ClientCommandInputRespond{}},
		{`{"id": 9, "method": "input.inject", "params": {"namespace": [], "message": {"role": "user", "content": "also this"}}}`, &ClientCommandInputInject{}},
		{`{"id": 10, "method": "state.get", "params": {"namespace": [], "keys": ["messages"]}}`, &ClientCommandStateGet{}},
		{`{"id": 11, "method": "state.listCheckpoints", "params": {"limit": 10, "before": "c9"}}`, &ClientCommandStateListCheckpoints{}},
		{`{"id": 12, "method": "state.fork", "params": {"checkpoint_id": "c3", "input": null}}`, &ClientCommandStateFork{}},
		{`{"id": 13, "method": "run.start", "params": {"assistant_id": "echo", "input": null}, "trace": "extra members of a command are allowed"}`, &ClientCommandRunStart{}},
		{`{"id": 14, "method": "auth.refresh", "params": {"token": "a.b.c"}}`, &ClientCommandAuthRefresh{}},
	}
	methods := map[string]bool{}
	for _, tc := range cases {
		cmd, errResp := DecodeCommand([]byte(tc.frame))
		require.Nil(t, errResp, "%s: %+v", tc.frame, errResp)
		require.IsType(t, tc.want, cmd.Value, tc.frame)
		var probe struct{ Method string }
		require.NoError(t, json.Unmarshal([]byte(tc.frame), &probe))
		methods[probe.Method] = true
	}
	all := Methods()
	sort.Strings(all)
	for _, m := range all {
		require.True(t, methods[m], "no valid case for %s", m)
	}

	// The batch form of input.respond decodes as such.
	cmd, _ := DecodeCommand([]byte(cases[7].frame))
	many, ok := cmd.Value.(*ClientCommandInputRespond).Params.Value.(*InputRespondMany)
	require.True(t, ok)
	require.Len(t, many.Responses, 2)
	require.True(t, *many.StrictResume)
}

// TestDecodeCommandErrors: each kind of bad frame gets its exact error
// code, id and message.
func TestDecodeCommandErrors(t *testing.T) {
	t.Parallel()
	id := func(n uint64) *JsUint { v := JsUint(n); return &v }
	cases := []struct {
		name  string
		frame string
		code  ErrorCode
		id    *JsUint
		msg   string
	}{
		{"malformed", `{"id": 1, "method": `, ErrorCodeInvalidArgument, nil, "malformed JSON: unexpected end of JSON input (at byte 20)"},
		{"empty", ``, ErrorCodeInvalidArgument, nil, "malformed JSON: empty frame"},
		{"trailing data", `{"id": 1, "method": "agent.getTree", "params": {}} {}`, ErrorCodeInvalidArgument, nil, "malformed JSON: invalid character '{' after top-level value (at byte 52)"},
		{"not an object", `[1, 2]`, ErrorCodeInvalidArgument, nil, "a command must be a JSON object"},
		{"no method", `{"id": 4, "params": {}}`, ErrorCodeInvalidArgument, id(4), `method: a command needs a text member "method"`},
		{"method not text", `{"id": 5, "method": 7}`, ErrorCodeInvalidArgument, id(5), `method: a command needs a text member "method"`},
		{"unknown method", `{"id": 6, "method": "run.explode", "params": {}}`, ErrorCodeUnknownCommand, id(6), `unknown method "run.explode"`},
		{"wrong type", `{"id": 7, "method": "run.start", "params": {"assistant_id": 42, "input": null}}`, ErrorCodeInvalidArgument, id(7),
			"params.assistant_id: expected string, but got number (rule RunStartParams)"},
		{"missing member", `{"id": 8, "method": "run.start", "params": {"input": null}}`, ErrorCodeInvalidArgument, id(8),
			"params: missing properties: 'assistant_id' (rule RunStartParams)"},
		{"unknown member of a closed map", `{"id": 9, "method": "state.get", "params": {"namespace": [], "color": "red"}}`, ErrorCodeInvalidArgument, id(9),
			"params: additionalProperties 'color' not allowed (rule StateGetParams)"},
		{"bad enum", `{"id": 10, "method": "run.start", "params": {"assistant_id": "a", "input": 1, "multitask_strategy": "sometimes"}}`, ErrorCodeInvalidArgument, id(10),
			`params.multitask_strategy: value must be one of "reject", "rollback", "interrupt", "enqueue" (rule MultitaskStrategy)`},
		{"bad channel", `{"id": 11, "method": "subscription.subscribe", "params": {"channels": ["messages", "gossip"]}}`, ErrorCodeInvalidArgument, id(11),
			`params.channels[1]: does not match pattern '^(?:values|updates|messages|tools|lifecycle|input|checkpoints|tasks|custom|(?:custom:.+))$' (rule Channel)`},
		{"bad namespace", `{"id": 12, "method": "state.get", "params": {"namespace": ["a", 3]}}`, ErrorCodeInvalidArgument, id(12),
			"params.namespace[1]: expected string, but got number (rule Namespace)"},
		{"negative id", `{"id": -1, "method": "agent.getTree", "params": {}}`, ErrorCodeInvalidArgument, nil,
			"id: must be >= 0 but found -1 (rule JsUint)"},
		{"missing params", `{"id": 14, "method": "agent.getTree"}`, ErrorCodeInvalidArgument, id(14),
			"command: missing properties: 'params' (rule ClientCommandAgentGetTree)"},
		{"respond with neither form", `{"id": 15, "method": "input.respond", "params": {"namespace": []}}`, ErrorCodeInvalidArgument, id(15),
			"params: matches none of the choices: missing properties: 'interrupt_id', 'response'; or missing properties: 'responses' (rule InputRespondParams)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cmd, e := DecodeCommand([]byte(tc.frame))
			require.Nil(t, cmd)
			require.NotNil(t, e)
			require.Equal(t, tc.code, e.Code)
			require.True(t, reflect.DeepEqual(tc.id, e.ID), "id: want %v, got %v", tc.id, e.ID)
			require.Equal(t, tc.msg, e.Message)
			// The error itself is a valid ErrorResponse on the wire.
			b, err := json.Marshal(e)
			require.NoError(t, err)
			var back ErrorResponse
			require.NoError(t, json.Unmarshal(b, &back))
		})
	}
}

func TestDecodeCommandNeverPanics(t *testing.T) {
	t.Parallel()
	for _, frame := range []string{`null`, `"x"`, `1e999`, `{"id": 1e3, "method": "x"}`, `{"method": null}`, `{"id": 99999999999999999999, "method": "agent.getTree", "params": {}}`, "\xff\xfe"} {
		_, e := DecodeCommand([]byte(frame))
		require.NotNil(t, e, frame)
	}
}

// FuzzDecodeCommand: no frame makes DecodeCommand panic, and it returns
// exactly one of a command and an error.
func FuzzDecodeCommand(f *testing.F) {
	f.Add([]byte(`{"id": 1, "method": "run.start", "params": {"assistant_id": "echo", "input": null}}`))
	f.Add([]byte(`{"id": 2, "method": "input.respond", "params": {"responses": []}}`))
	f.Add([]byte(`{"id": 3, "method": "subscription.subscribe", "params": {"channels": ["custom:x"]}}`))
	f.Fuzz(func(t *testing.T, frame []byte) {
		cmd, e := DecodeCommand(frame)
		if (cmd == nil) == (e == nil) {
			t.Fatalf("want exactly one of a command and an error, got %v and %v", cmd, e)
		}
	})
}

// BenchmarkDecodeCommand is decoding plus validating typical commands.
func BenchmarkDecodeCommand(b *testing.B) {
	frames := map[string]string{
		"run.start":              `{"id": 17, "method": "run.start", "params": {"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "What is the weather in Paris today?"}]}, "config": {"configurable": {"model": "gpt"}}, "multitask_strategy": "enqueue"}}`,
		"subscription.subscribe": `{"id": 18, "method": "subscription.subscribe", "params": {"channels": ["messages", "tools", "lifecycle", "custom:progress"], "namespaces": [[], ["researcher"]], "depth": 2}}`,
	}
	if _, err := commandSchemas(); err != nil {
		b.Fatal(err)
	}
	for name, frame := range frames {
		data := []byte(frame)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, e := DecodeCommand(data); e != nil {
					b.Fatal(e.Message)
				}
			}
		})
		c, ok := cborOf(data)
		if !ok {
			b.Fatal("no CBOR form")
		}
		b.Run(name+"/cbor", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, e := DecodeCommandCBOR(c); e != nil {
					b.Fatal(e.Message)
				}
			}
		})
	}
}

// TestStrictDecodeFindsWhatTheSchemaFinds: the generated Go decoders in
// strict mode (cddlrt.DecodeStrictJSON: required members, closed maps,
// Validate) reject each invalid command of TestDecodeCommandErrors that
// reaches the JSON Schema, at the same JSON path and naming the rule.
func TestStrictDecodeFindsWhatTheSchemaFinds(t *testing.T) {
	t.Parallel()
	cases := []struct{ frame, schemaMsg, rule string }{
		{`{"id": 7, "method": "run.start", "params": {"assistant_id": 42, "input": null}}`,
			"params.assistant_id: expected string, but got number (rule RunStartParams)", ""},
		{`{"id": 8, "method": "run.start", "params": {"input": null}}`,
			"params: missing properties: 'assistant_id' (rule RunStartParams)", "RunStartParams"},
		{`{"id": 9, "method": "state.get", "params": {"namespace": [], "color": "red"}}`,
			"params: additionalProperties 'color' not allowed (rule StateGetParams)", "StateGetParams"},
		{`{"id": 10, "method": "run.start", "params": {"assistant_id": "a", "input": 1, "multitask_strategy": "sometimes"}}`,
			`params.multitask_strategy: value must be one of "reject", "rollback", "interrupt", "enqueue" (rule MultitaskStrategy)`, ""},
		{`{"id": 11, "method": "subscription.subscribe", "params": {"channels": ["messages", "gossip"]}}`,
			`params.channels[1]: does not match pattern '^(?:values|updates|messages|tools|lifecycle|input|checkpoints|tasks|custom|(?:custom:.+))$' (rule Channel)`, "Channel"},
		{`{"id": 12, "method": "state.get", "params": {"namespace": ["a", 3]}}`,
			"params.namespace[1]: expected string, but got number (rule Namespace)", ""},
		{`{"id": -1, "method": "agent.getTree", "params": {}}`,
			"id: must be >= 0 but found -1 (rule JsUint)", ""},
		{`{"id": 14, "method": "agent.getTree"}`,
			"command: missing properties: 'params' (rule ClientCommandAgentGetTree)", "ClientCommandAgentGetTree"},
		{`{"id": 15, "method": "input.respond", "params": {"namespace": []}}`,
			"params: matches none of the choices: missing properties: 'interrupt_id', 'response'; or missing properties: 'responses' (rule InputRespondParams)", ""},
	}
	for _, tc := range cases {
		// The JSON Schema still says what it says.
		_, e := DecodeCommand([]byte(tc.frame))
		require.NotNil(t, e)
		require.Equal(t, tc.schemaMsg, e.Message)

		var cmd ClientCommand
		err := cddlrt.DecodeStrictJSON([]byte(tc.frame), &cmd)
		require.Error(t, err, tc.frame)
		var ve *cddlrt.ValidationError
		require.ErrorAs(t, err, &ve, "%s: %v", tc.frame, err)
		wantPath, _, _ := strings.Cut(tc.schemaMsg, ":")
		if wantPath == "command" {
			wantPath = ""
		}
		require.Equal(t, wantPath, ve.Path, "%s: %v", tc.frame, err)
		if tc.rule != "" {
			require.Equal(t, tc.rule, ve.Rule, "%v", err)
		}
	}
	// What the schema accepts, the strict decode accepts.
	for _, ok := range []string{
		`{"id": 1, "method": "run.start", "params": {"assistant_id": "a", "input": null, "multitask_strategy": "enqueue"}}`,
		`{"id": 2, "method": "subscription.subscribe", "params": {"channels": ["messages", "custom:progress"]}}`,
		`{"id": 3, "method": "input.respond", "params": {"namespace": [], "interrupt_id": "i", "response": true}}`,
		`{"id": 4, "method": "agent.getTree", "params": {}}`,
	} {
		_, e := DecodeCommand([]byte(ok))
		require.Nil(t, e, ok)
		var cmd ClientCommand
		require.NoError(t, cddlrt.DecodeStrictJSON([]byte(ok), &cmd), ok)
		b, err := cbor.Marshal(cmd)
		require.NoError(t, err)
		var back ClientCommand
		require.NoError(t, cddlrt.DecodeStrictCBOR(b, &back), "through CBOR: %s", ok)
	}
}

// BenchmarkDecodeStrict is the generated decoders in strict mode
// (cddlrt.DecodeStrictJSON), against a plain decode, for the same
// commands as BenchmarkDecodeCommand (target for run.start: under 20 µs).
func BenchmarkDecodeStrict(b *testing.B) {
	frames := map[string]string{
		"run.start":              `{"id": 17, "method": "run.start", "params": {"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "What is the weather in Paris today?"}]}, "config": {"configurable": {"model": "gpt"}}, "multitask_strategy": "enqueue"}}`,
		"subscription.subscribe": `{"id": 18, "method": "subscription.subscribe", "params": {"channels": ["messages", "tools", "lifecycle", "custom:progress"], "namespaces": [[], ["researcher"]], "depth": 2}}`,
	}
	for name, frame := range frames {
		data := []byte(frame)
		b.Run(name+"/strict", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				var cmd ClientCommand
				if err := cddlrt.DecodeStrictJSON(data, &cmd); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/plain", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				var cmd ClientCommand
				if err := json.Unmarshal(data, &cmd); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestStrictDecoderAgreesWithTheSchema compares the two readers of a
// command: the generated strict decoder (cddlrt.DecodeStrictJSON and
// DecodeStrictCBOR), which DecodeCommand uses for every frame, and the JSON
// Schema with a typed decode after it, which DecodeCommand falls back to
// for the error of a frame the strict decoder refuses. Over the valid
// frames of the tests above and every mutation of them (each member
// removed; each value, at every depth, replaced by a value of every JSON
// kind), in JSON and in CBOR, both accept the same frames, as the same
// command.
func TestStrictDecoderAgreesWithTheSchema(t *testing.T) {
	t.Parallel()
	seeds := []string{
		`{"id": 1, "method": "run.start", "params": {"assistant_id": "echo", "input": {"messages": [{"role": "user", "content": "hi"}]}, "config": {"configurable": {"checkpoint_id": "c1"}, "token_delay_ms": 5}, "metadata": {"k": 1}, "multitask_strategy": "enqueue"}}`,
		`{"id": 2, "method": "run.cancel", "params": {"run_id": "r1"}}`,
		`{"id": 3, "method": "subscription.subscribe", "params": {"channels": ["messages", "custom:progress"], "namespaces": [[], ["researcher"]], "depth": 1}}`,
		`{"id": 4, "method": "subscription.unsubscribe", "params": {"subscription_id": "s1"}}`,
		`{"id": 5, "method": "subscription.reconnect", "params": {"run_id": "r1", "last_event_id": "41", "subscriptions": ["s1"]}}`,
		`{"id": 6, "method": "agent.getTree", "params": {}}`,
		`{"id": 7, "method": "input.respond", "params": {"namespace": [], "interrupt_id": "i1", "response": {"approved": true}, "goto": "node_a"}}`,
		`{"id": 8, "method": "input.respond", "params": {"responses": [{"namespace": ["a"], "interrupt_id": "i2", "response": 2}], "goto": [{"node": "n", "input": 1}, "m"], "strict_resume": true}}`,
		`{"id": 9, "method": "input.inject", "params": {"namespace": [], "message": {"role": "user", "content": "also this"}}}`,
		`{"id": 10, "method": "state.get", "params": {"namespace": [], "keys": ["messages"]}}`,
		`{"id": 11, "method": "state.listCheckpoints", "params": {"limit": 10, "before": "c9"}}`,
		`{"id": 12, "method": "state.fork", "params": {"checkpoint_id": "c3", "input": null}}`,
		`{"id": 14, "method": "auth.refresh", "params": {"token": "a.b.c"}}`,
	}
	kinds := []any{nil, true, 0.0, -1.0, 1.5, 9007199254740993.0, "", "x", []any{}, []any{"x"}, map[string]any{}, map[string]any{"x": 1.0}}
	var frames [][]byte
	for _, s := range seeds {
		frames = append(frames, []byte(s))
		var v any
		require.NoError(t, json.Unmarshal([]byte(s), &v))
		mutate(v, func(m any) {
			b, err := json.Marshal(m)
			require.NoError(t, err)
			frames = append(frames, b)
		}, kinds)
	}
	for _, tc := range []string{`{"id": 1, "method": "run.explode", "params": {}}`, `[1, 2]`, `null`, `{"id": 99999999999999999999, "method": "agent.getTree", "params": {}}`, "{\"id\": 1, \"method\": \"run.cancel\", \"params\": {\"run_id\": \"\xff\"}}"} {
		frames = append(frames, []byte(tc))
	}
	both, cborFrames := 0, 0
	for _, f := range frames {
		var strict ClientCommand
		strictErr := cddlrt.DecodeStrictJSON(f, &strict)
		strictOK := utf8.Valid(f) && strictErr == nil && strict.Value != nil
		viaSchema, e := Decoder{}.commandViaSchema(f, nil)
		switch {
		case strictOK && e != nil:
			t.Errorf("the strict decoder accepts what the schema refuses (%s): %s", e.Message, f)
		case strictOK:
			both++
			require.Equal(t, viaSchema, &strict, "the same command either way: %s", f)
		case e == nil:
			t.Errorf("the schema accepts what the strict decoder refuses (%v): %s", strictErr, f)
		}
		// The same frame in CBOR, integers as integers.
		c, ok := cborOf(f)
		if !ok {
			continue
		}
		cborFrames++
		var strictCBOR ClientCommand
		cborOK := cddlrt.DecodeStrictCBOR(c, &strictCBOR) == nil && strictCBOR.Value != nil
		require.Equal(t, e == nil, cborOK, "the schema and the strict CBOR decoder agree on %s", f)
		if cborOK {
			jsonNumbers(reflect.ValueOf(strictCBOR.Value)) // as DecodeCommandCBOR does
			require.Equal(t, viaSchema, &strictCBOR, "the same command from CBOR: %s", f)
		}
		fromCBOR, ce := DecodeCommandCBOR(c)
		require.Equal(t, e == nil, ce == nil, "DecodeCommandCBOR agrees: %s", f)
		if ce == nil {
			require.Equal(t, viaSchema, fromCBOR)
		}
	}
	t.Logf("%d frames (%d also in CBOR): %d accepted", len(frames), cborFrames, both)
	require.Greater(t, both, len(seeds))
	require.Greater(t, cborFrames, len(frames)/2)
}

// cborOf encodes a JSON frame as CBOR, integers as CBOR integers (as a
// CBOR client writes them), or reports that it has no CBOR form here (not
// UTF-8, not JSON, or an integer out of range).
func cborOf(f []byte) ([]byte, bool) {
	if !utf8.Valid(f) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(f))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil, false
	}
	var conv func(any) (any, bool)
	conv = func(x any) (any, bool) {
		switch x := x.(type) {
		case json.Number:
			if i, err := x.Int64(); err == nil {
				return i, true
			}
			if u, err := strconv.ParseUint(string(x), 10, 64); err == nil {
				return u, true
			}
			fl, err := x.Float64()
			return fl, err == nil
		case []any:
			for i := range x {
				var ok bool
				if x[i], ok = conv(x[i]); !ok {
					return nil, false
				}
			}
		case map[string]any:
			for k := range x {
				var ok bool
				if x[k], ok = conv(x[k]); !ok {
					return nil, false
				}
			}
		}
		return x, true
	}
	v, ok := conv(v)
	if !ok {
		return nil, false
	}
	b, err := cbor.Marshal(v)
	return b, err == nil
}

// TestMemberNamesAreCaseSensitive: a member spelled like a known one in
// another case is not that member. In an open map the schema lets it
// through as an extension, and encoding/json would decode it into the
// known member's field unchecked: subscription.subscribe with
// "Channels": ["bogus"] used to subscribe to a channel the schema forbids.
func TestMemberNamesAreCaseSensitive(t *testing.T) {
	for _, f := range []string{
		`{"id": 1, "method": "subscription.subscribe", "params": {"channels": ["messages"], "Channels": ["bogus"]}}`,
		`{"id": 1, "method": "subscription.subscribe", "params": {"channels": ["messages"], "CHANNELS": ["messages"]}}`,
		`{"id": 1, "method": "subscription.subscribe", "params": {"channels": ["messages"], "depth": 1, "Depth": -5}}`,
	} {
		cmd, e := DecodeCommand([]byte(f))
		require.Nil(t, cmd, f)
		require.NotNil(t, e, f)
		require.Equal(t, ErrorCodeInvalidArgument, e.Code)
		require.Contains(t, e.Message, "member names are case-sensitive", f)
		c, ok := cborOf([]byte(f))
		require.True(t, ok)
		cmd, e = DecodeCommandCBOR(c)
		require.Nil(t, cmd, f)
		require.NotNil(t, e, f)
	}
	// Another member (an extension) is still let through.
	cmd, e := DecodeCommand([]byte(`{"id": 1, "method": "subscription.subscribe", "params": {"channels": ["messages"], "x_trace": 1}}`))
	require.Nil(t, e)
	require.Equal(t, []Channel{"messages"}, cmd.Value.(*ClientCommandSubscriptionSubscribe).Params.Channels)
}

// mutate calls fn with copies of v: each map member removed, and each
// value at every depth replaced by each of kinds.
func mutate(v any, fn func(any), kinds []any) {
	var walk func(cur any, rebuild func(any) any)
	walk = func(cur any, rebuild func(any) any) {
		switch c := cur.(type) {
		case map[string]any:
			for k, mv := range c {
				without := maps.Clone(c)
				delete(without, k)
				fn(rebuild(without))
				walk(mv, func(x any) any {
					cp := maps.Clone(c)
					cp[k] = x
					return rebuild(cp)
				})
			}
		case []any:
			for i, ev := range c {
				walk(ev, func(x any) any {
					cp := slices.Clone(c)
					cp[i] = x
					return rebuild(cp)
				})
			}
		}
		if rebuild != nil {
			for _, k := range kinds {
				fn(rebuild(k))
			}
		}
	}
	walk(v, func(x any) any { return x })
}

// TestStreamRequestErrorsNameTheRequest: a stream request's body that is
// wrong as a whole is said to be the stream request's (not a command's),
// with what it needs.
func TestStreamRequestErrorsNameTheRequest(t *testing.T) {
	_, e := DecodeEventStreamRequest([]byte(`{}`))
	require.NotNil(t, e)
	require.Equal(t, ErrorCodeInvalidArgument, e.Code)
	require.True(t, strings.HasPrefix(e.Message, "the stream request: missing properties: 'channels'"), e.Message)
	require.Contains(t, e.Message, `{"channels": ["messages", "lifecycle"]}`)
	_, e = DecodeEventStreamRequest([]byte(`{"channels": ["nope"]}`))
	require.NotNil(t, e)
	require.True(t, strings.HasPrefix(e.Message, "channels[0]: "), e.Message)
}

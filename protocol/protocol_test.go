package protocol

import (
	"encoding/json"
	"testing"

	"github.com/agentstream/agentstream/internal/testkit/gentest"
	"github.com/fxamacker/cbor/v2"
	"github.com/stretchr/testify/require"
)

// seedExamples are the JSON examples of the protocol's README
// (../shared/seeds/004_716ced66f4410f99.txt), with member names converted
// to snake_case as they travel on the wire (assistantId is assistant_id);
// values, and the members of application data such as `input`, are as
// the README has them.
var seedExamples = []struct {
	name string
	json string
	into func() any
}{
	{"EventStreamRequest", `{"channels": ["messages", "updates", "lifecycle"], "namespaces": [[]], "depth": 2, "since": 123}`,
		func() any { return new(EventStreamRequest) }},
	{"Command run.start", `{"id": 1, "method": "run.start", "params": {"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "Hello"}]}}}`,
		func() any { return new(Command) }},
	{"ClientCommand run.start", `{"id": 1, "method": "run.start", "params": {"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "Hello"}]}}}`,
		func() any { return new(ClientCommand) }},
	{"CommandResponse", `{"type": "success", "id": 1, "result": {"run_id": "run_123"}, "meta": {"applied_through_seq": 42}}`,
		func() any { return new(CommandResponse) }},
	{"ErrorResponse", `{"type": "error", "id": 1, "error": "invalid_argument", "message": "assistantId is required"}`,
		func() any { return new(ErrorResponse) }},
	{"Event messages", `{"type": "event", "event_id": "evt_123", "seq": 43, "method": "messages", "params": {"namespace": [], "timestamp": 1710000000000, "data": {"event": "message-start", "role": "ai", "id": "msg_123"}}}`,
		func() any { return new(Event) }},
	{"ServerEvent messages", `{"type": "event", "event_id": "evt_123", "seq": 43, "method": "messages", "params": {"namespace": [], "timestamp": 1710000000000, "data": {"event": "message-start", "role": "ai", "id": "msg_123"}}}`,
		func() any { return new(ServerEvent) }},
	{"text-delta", `{"event": "content-block-delta", "index": 0, "delta": {"type": "text-delta", "text": "Hello "}}`,
		func() any { return new(ContentBlockDeltaData) }},
	{"data-delta", `{"event": "content-block-delta", "index": 1, "delta": {"type": "data-delta", "data": "UklGR...", "encoding": "base64"}}`,
		func() any { return new(ContentBlockDeltaData) }},
	{"block-delta", `{"event": "content-block-delta", "index": 1, "delta": {"type": "block-delta", "fields": {"type": "tool_call_chunk", "id": "call_123", "name": "search", "args": "{\"query\":"}}}`,
		func() any { return new(ContentBlockDeltaData) }},
	{"content-block-finish", `{"event": "content-block-finish", "index": 1, "content": {"type": "tool_call", "id": "call_123", "name": "search", "args": {"query": "weather"}}}`,
		func() any { return new(ContentBlockFinishData) }},
	// Issue 15: Message, anything the server sends, is a sum type
	// dispatched on "type", then (for events) on "method".
	{"Message success", `{"type": "success", "id": 1, "result": {"run_id": "run_123"}, "meta": {"applied_through_seq": 42}}`,
		func() any { return new(Message) }},
	{"Message error", `{"type": "error", "id": 1, "error": "invalid_argument", "message": "assistantId is required"}`,
		func() any { return new(Message) }},
	{"Message event", `{"type": "event", "event_id": "evt_123", "seq": 43, "method": "messages", "params": {"namespace": [], "timestamp": 1710000000000, "data": {"event": "message-start", "role": "ai", "id": "msg_123"}}}`,
		func() any { return new(Message) }},
	{"updates event", `{"method": "updates", "params": {"namespace": [], "timestamp": 1710000000000, "data": {"node": "agent", "values": {"messages": []}}}}`,
		func() any { return new(UpdatesEvent) }},
}

// TestSeedExamplesRoundTrip: every example decodes into the generated
// types and encodes back to equal JSON, directly and through CBOR.
func TestSeedExamplesRoundTrip(t *testing.T) {
	for _, ex := range seedExamples {
		t.Run(ex.name, func(t *testing.T) {
			v := ex.into()
			require.NoError(t, json.Unmarshal([]byte(ex.json), v))
			out, err := json.Marshal(v)
			require.NoError(t, err)
			require.JSONEq(t, ex.json, string(out))

			b, err := cbor.Marshal(v)
			require.NoError(t, err)
			back := ex.into()
			require.NoError(t, cbor.Unmarshal(b, back))
			out, err = json.Marshal(back)
			require.NoError(t, err)
			require.JSONEq(t, ex.json, string(out), "through CBOR")
		})
	}
}

func TestSeedExamplesDecodeToTheRightVariants(t *testing.T) {
	var ev ServerEvent
	require.NoError(t, json.Unmarshal([]byte(seedExamples[6].json), &ev))
	msg, ok := ev.Value.(*ServerEventMessages)
	require.True(t, ok, "%T", ev.Value)
	require.Equal(t, "evt_123", *msg.EventID)
	start, ok := msg.Params.Data.Value.(*MessageStartData)
	require.True(t, ok, "%T", msg.Params.Data.Value)
	require.Equal(t, MessageRoleAI, start.Role)

	var fin ContentBlockFinishData
	require.NoError(t, json.Unmarshal([]byte(seedExamples[10].json), &fin))
	call, ok := fin.Content.Value.(*ToolCall)
	require.True(t, ok, "%T", fin.Content.Value)
	require.Equal(t, "weather", call.Args["query"])
}

// TestMessageIsASumType: each kind of server message decodes into its
// own Go type, an event down to its method's payload.
func TestMessageIsASumType(t *testing.T) {
	decode := func(in string) MessageVariant {
		var m Message
		require.NoError(t, json.Unmarshal([]byte(in), &m))
		require.Nil(t, m.Unknown)
		return m.Value
	}
	require.IsType(t, &CommandResponse{}, decode(`{"type": "success", "id": 1, "result": {}}`))
	require.IsType(t, &ErrorResponse{}, decode(`{"type": "error", "id": null, "error": "invalid_argument", "message": "m"}`))
	ev, ok := decode(`{"type": "event", "event_id": "e-1", "seq": 1, "method": "lifecycle", "params": {"namespace": [], "timestamp": 1, "data": {"event": "running"}}}`).(*Event)
	require.True(t, ok)
	require.Equal(t, "event", ev.Type())
	var m Message
	require.NoError(t, json.Unmarshal([]byte(`{"type": "heartbeat", "at": 1}`), &m), "unknown kinds are kept (the union is open)")
	require.NotNil(t, m.Unknown)
}

// TestUnknownVariantsAreKept: readers ignore what they do not know, so a
// new delta type, content block or lifecycle cause decodes and round-trips.
func TestUnknownVariantsAreKept(t *testing.T) {
	for _, in := range []string{
		`{"event": "content-block-delta", "index": 0, "delta": {"type": "sparkle-delta", "sparkles": 3}}`,
		`{"event": "content-block-start", "index": 0, "content": {"type": "hologram", "frames": [1, 2]}}`,
	} {
		var m MessagesData
		require.NoError(t, json.Unmarshal([]byte(in), &m))
		out, err := json.Marshal(m)
		require.NoError(t, err)
		require.JSONEq(t, in, string(out))
	}
	var ld LifecycleData
	in := `{"event": "started", "cause": {"type": "timer", "every": "5m"}}`
	require.NoError(t, json.Unmarshal([]byte(in), &ld))
	require.NotNil(t, ld.Cause.Unknown)
	out, err := json.Marshal(ld)
	require.NoError(t, err)
	require.JSONEq(t, in, string(out))
}

// TestGeneratedFilesAreFresh runs every `//go:generate` line of doc.go
// with --check: a stale generated file fails the test with a diff. doc.go
// generates Go, three JSON Schemas (the server's, bindings/jsonschema, the
// npm package's), TypeScript and Python.
func TestGeneratedFilesAreFresh(t *testing.T) { gentest.Fresh(t, "doc.go", 6) }

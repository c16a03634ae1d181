package ws

import (
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentstream/agentstream/internal/testkit/wstest"
	"github.com/agentstream/agentstream/transport/internal/wsframe"
	"github.com/fxamacker/cbor/v2"
	"github.com/stretchr/testify/require"
)

// TestBadWebSocketInput is the WebSocket half of the abuse review's table:
// each row is what a client sends after the handshake and either the
// ErrorResponse code it must get in-band (the connection staying usable,
// which a ping then shows) or the close code the connection must end with.
func TestBadWebSocketInput(t *testing.T) {
	base := serve(t, Options{})
	text := func(s string) []byte { return wstest.ClientFrame(true, wsframe.OpText, []byte(s), true) }
	binary_ := func(b []byte) []byte { return wstest.ClientFrame(true, wsframe.OpBinary, b, true) }
	cborOf := func(v any) []byte {
		b, err := cbor.Marshal(v)
		require.NoError(t, err)
		return binary_(b)
	}
	closeFrame := func(code uint16, reason string) []byte {
		return wstest.ClientFrame(true, wsframe.OpClose, append(binary.BigEndian.AppendUint16(nil, code), reason...), true)
	}
	deepJSON := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	deepCBOR := append([]byte(strings.Repeat("\x81", 10000)), 0)
	for _, tc := range []struct {
		name, proto string
		send        []byte
		code        string // the ErrorResponse's code, or
		close       uint16 // the close frame's status
	}{
		// JSON commands (text frames).
		{"malformed JSON", "", text(`{"id": 1,`), "invalid_argument", 0},
		{"not an object", "", text(`"hello"`), "invalid_argument", 0},
		{"unknown method", "", text(`{"id": 1, "method": "nope", "params": {}}`), "unknown_command", 0},
		{"id of the wrong type", "", text(`{"id": [], "method": "state.get", "params": {}}`), "invalid_argument", 0},
		{"params of the wrong type", "", text(`{"id": 1, "method": "subscription.subscribe", "params": {"channels": "all"}}`), "invalid_argument", 0},
		{"an unknown channel", "", text(`{"id": 1, "method": "subscription.subscribe", "params": {"channels": ["nope"]}}`), "invalid_argument", 0},
		{"nesting 10,000 deep", "", text(`{"id": 1, "method": "state.get", "params": ` + deepJSON + `}`), "invalid_argument", 0},
		{"1 MiB of empty maps (refused before decoding)", "", text(`{"id": 1, "method": "run.start", "params": {"assistant_id": "echo", "input": [` + strings.Repeat(`{},`, 300_000) + `{}]}}`), "invalid_argument", 0},
		{"unsubscribe what was never subscribed", "", text(`{"id": 1, "method": "subscription.unsubscribe", "params": {"subscription_id": "sub_x"}}`), "no_such_subscription", 0},
		{"reconnect with an id this server never gave", "", text(`{"id": 1, "method": "subscription.reconnect", "params": {"run_id": "r", "last_event_id": "a-b-c"}}`), "invalid_argument", 0},
		{"firehose size 1e14 (was a crash)", "", text(`{"id": 1, "method": "run.start", "params": {"assistant_id": "firehose", "input": {"size": 1e14}}}`), "invalid_argument", 0},
		{"answer an interrupt that is not pending", "", text(`{"id": 1, "method": "input.respond", "params": {"namespace": [], "interrupt_id": "i", "response": 1}}`), "no_such_interrupt", 0},
		{"a binary frame without the CBOR subprotocol", "", binary_([]byte{0xa0}), "invalid_argument", 0},
		// CBOR commands (binary frames on agentstream.cbor).
		{"CBOR: unknown method", CBORSubprotocol, cborOf(map[string]any{"id": 1, "method": "nope", "params": map[string]any{}}), "unknown_command", 0},
		{"CBOR: malformed", CBORSubprotocol, binary_([]byte{0xff}), "invalid_argument", 0},
		{"CBOR: truncated", CBORSubprotocol, binary_([]byte{0xa3, 0x62, 'i', 'd'}), "invalid_argument", 0},
		{"CBOR bomb: an array of 2^32-1 elements", CBORSubprotocol, binary_([]byte{0x9a, 0xff, 0xff, 0xff, 0xff}), "invalid_argument", 0},
		{"CBOR bomb: a map of 2^64-1 pairs", CBORSubprotocol, binary_([]byte{0xbb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}), "invalid_argument", 0},
		{"CBOR bomb: a 4 GiB byte string", CBORSubprotocol, binary_([]byte{0x5a, 0xff, 0xff, 0xff, 0xff}), "invalid_argument", 0},
		{"CBOR: nesting 10,000 deep", CBORSubprotocol, binary_(deepCBOR), "invalid_argument", 0},
		{"CBOR: 100,000 empty maps (refused before decoding)", CBORSubprotocol, cborOf(map[string]any{"id": 1, "method": "run.start", "params": map[string]any{"assistant_id": "echo", "input": make([]map[string]any, 100_000)}}), "invalid_argument", 0},
		{"CBOR: a byte-string key", CBORSubprotocol, binary_([]byte{0xa1, 0x41, 0x01, 0x01}), "invalid_argument", 0},
		{"CBOR: invalid UTF-8 in a text string", CBORSubprotocol, binary_([]byte{0xa1, 0x62, 'i', 'd', 0x62, 0xff, 0xfe}), "invalid_argument", 0},
		// Frame violations: the connection ends with the RFC 6455 status.
		{"invalid UTF-8 in a text frame", "", text("{\"id\": 1, \"method\": \"\xff\"}"), "", 1007},
		{"close code 999", "", closeFrame(999, ""), "", 1002},
		{"close code 1005 (reserved)", "", closeFrame(1005, ""), "", 1002},
		{"close reason not UTF-8", "", closeFrame(1000, "\xff"), "", 1002},
		{"unmasked data frame", "", wstest.ClientFrame(true, wsframe.OpText, []byte(`{}`), false), "", 1002},
		{"reserved opcode 3", "", wstest.ClientFrame(true, 0x3, nil, true), "", 1002},
		{"continuation with nothing to continue", "", wstest.ClientFrame(true, 0x0, []byte("x"), true), "", 1002},
		{"reserved bit set", "", append([]byte{0x80 | 0x40 | wsframe.OpText}, wstest.ClientFrame(true, wsframe.OpText, []byte("{}"), true)[1:]...), "", 1002},
		{"a header declaring 1 GiB", "", []byte{0x82, 0x80 | 127, 0, 0, 0, 0, 0x40, 0, 0, 0, 1, 2, 3, 4}, "", 1009},
		{"fragmented ping", "", wstest.ClientFrame(false, wsframe.OpPing, nil, true), "", 1002},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, r := dialWith(t, base, "bad", tc.proto, nil)
			_, err := conn.Write(tc.send)
			require.NoError(t, err)
			_, op, payload, err := wstest.ReadFrame(r)
			require.NoError(t, err)
			if tc.close != 0 {
				require.Equal(t, byte(wsframe.OpClose), op, "%q", payload)
				require.GreaterOrEqual(t, len(payload), 2)
				require.Equal(t, tc.close, binary.BigEndian.Uint16(payload), "%q", payload[2:])
				return
			}
			var e struct {
				Type, Error string
			}
			if tc.proto == CBORSubprotocol {
				require.Equal(t, byte(wsframe.OpBinary), op)
				require.NoError(t, cbor.Unmarshal(payload, &e), "%x", payload)
			} else {
				require.Equal(t, byte(wsframe.OpText), op)
				require.NoError(t, json.Unmarshal(payload, &e), "%s", payload)
			}
			require.Equal(t, "error", e.Type)
			require.Equal(t, tc.code, e.Error, "%q", payload)
			// The connection is still there.
			_, err = conn.Write(wstest.ClientFrame(true, wsframe.OpPing, []byte("alive"), true))
			require.NoError(t, err)
			_, op, payload, err = wstest.ReadFrame(r)
			require.NoError(t, err)
			require.Equal(t, byte(wsframe.OpPong), op)
			require.Equal(t, "alive", string(payload))
		})
	}
}

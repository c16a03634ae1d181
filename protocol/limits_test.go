package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDecodeLimitsJSON(t *testing.T) {
	l := DecodeLimits{MaxDepth: 4, MaxValues: 20}
	cases := []struct {
		name, frame string
		refused     string // "" accepted, else the limit
	}{
		{"a command", `{"id":1,"method":"run.start","params":{"assistant_id":"echo","input":{"a":[1,2,3]}}}`, ""},
		{"depth at the limit", `[[[[1]]]]`, ""},
		{"one deeper", `[[[[[1]]]]]`, "depth"},
		{"brackets in strings are text", `{"a":"[[[[[[[[[[{{{{{{{{{","b":"\"[[[[[[[["}`, ""},
		{"values at the limit", `[` + strings.Repeat(`1,`, 18) + `1]`, ""},
		{"one more value", `[` + strings.Repeat(`1,`, 19) + `1]`, "values"},
		{"empty maps count", `[` + strings.Repeat(`{},`, 19) + `{}]`, "values"},
		{"long literals are one value", `[` + strings.Repeat("9", 5000) + `, true, false, null]`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := l.checkJSON([]byte(c.frame))
			if c.refused == "" {
				assert.NoError(t, err)
				return
			}
			var le *LimitError
			require.ErrorAs(t, err, &le)
			assert.Equal(t, c.refused, le.Limit)
		})
	}
}

func TestDecodeLimitsCBOR(t *testing.T) {
	l := DecodeLimits{MaxDepth: 4, MaxValues: 20}
	enc := func(v any) []byte {
		b, err := cbor.Marshal(v)
		require.NoError(t, err)
		return b
	}
	indefinite := []byte{0x9f, 0x01, 0x02, 0xbf, 0x61, 'a', 0x01, 0xff, 0x7f, 0x61, 'x', 0x61, 'y', 0xff, 0xff}
	cases := []struct {
		name    string
		frame   []byte
		refused string // "" accepted, "depth"/"values" a limit, "nojson" no JSON equivalent, "malformed" anything else
	}{
		{"a command", enc(map[string]any{"id": 1, "method": "run.start", "params": map[string]any{"input": []any{1.5, "x", true, nil, float32(2), "k"}}}), ""},
		{"depth at the limit", enc([]any{[]any{[]any{[]any{1}}}}), ""},
		{"one deeper", enc([]any{[]any{[]any{[]any{[]any{1}}}}}), "depth"},
		{"values at the limit", enc(make([]any, 19)), ""},
		{"one more value", enc(make([]any, 20)), "values"},
		{"map pairs count twice", enc(map[string]int{"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6, "g": 7, "h": 8, "i": 9, "j": 10}), "values"},
		{"indefinite lengths", indefinite, ""},
		{"a tag", enc(cbor.Tag{Number: 1, Content: 5}), "nojson"},
		{"a byte string", enc(map[string]any{"input": []byte{1}}), "nojson"},
		{"NaN", enc([]any{math.NaN()}), "nojson"},
		{"an infinite half float", []byte{0x81, 0xf9, 0x7c, 0x00}, "nojson"},
		{"a finite half float", []byte{0x81, 0xf9, 0x3c, 0x00}, ""},
		{"undefined", []byte{0x81, 0xf7}, "nojson"},
		{"a simple value", []byte{0x81, 0xf8, 0x20}, "nojson"},
		{"an integer key", enc(map[int]string{1: "x"}), "nojson"},
		{"an integer key after a text one", []byte{0xa2, 0x61, 'a', 0x01, 0x02, 0x03}, "nojson"},
		{"an integer key in an indefinite map", []byte{0xbf, 0x61, 'a', 0x80, 0x02, 0x03, 0xff}, "nojson"},
		{"an array value before a text key", []byte{0xbf, 0x61, 'a', 0x9f, 0x01, 0xff, 0x61, 'b', 0x02, 0xff}, ""},
		{"truncated", enc(map[string]any{"a": "bcdef"})[:5], "malformed"},
		{"a count larger than the frame", []byte{0x9b, 0, 0, 0, 1, 0, 0, 0, 0}, "malformed"},
		{"extra bytes", append(enc(1), 1), "malformed"},
		{"a stray break", []byte{0xff}, "malformed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := l.checkCBOR(c.frame)
			switch c.refused {
			case "":
				assert.NoError(t, err)
			case "malformed":
				require.Error(t, err)
				var le *LimitError
				assert.NotErrorAs(t, err, &le)
				var nj *NoJSONError
				assert.NotErrorAs(t, err, &nj)
			case "nojson":
				var nj *NoJSONError
				require.ErrorAs(t, err, &nj)
			default:
				var le *LimitError
				require.ErrorAs(t, err, &le)
				assert.Equal(t, c.refused, le.Limit)
			}
		})
	}
}

func TestPeekID(t *testing.T) {
	long := strings.Repeat("x", 1<<20)
	for _, c := range []struct {
		frame string
		id    any
	}{
		{`{"id":7,"method":"x"}`, uint64(7)},
		{`{"method":"x","params":{"id":3,"a":[1,{"b":2}]},"id":9}`, uint64(9)},
		{`{"method":"x","params":{"id":3}}`, nil},
		{`{"id":-1}`, nil},
		{`{"id":1.5}`, nil},
		{`[1,2]`, nil},
		{`{"params":"` + long + `","id":4}`, nil}, // past the first 4 KiB
		{`{"id":5,"params":"` + long + `"}`, uint64(5)},
		{`{"id":6,"params":` + strings.Repeat("[", 100000), uint64(6)},
	} {
		got := PeekID([]byte(c.frame), false)
		if c.id == nil {
			assert.Nil(t, got, c.frame[:min(len(c.frame), 60)])
		} else if assert.NotNil(t, got, c.frame[:min(len(c.frame), 60)]) {
			assert.Equal(t, c.id, *got)
		}
		var v any
		if json.Unmarshal([]byte(c.frame), &v) == nil {
			b, err := cbor.Marshal(v)
			require.NoError(t, err)
			if c.id == nil && !strings.Contains(c.frame, long) {
				assert.Nil(t, PeekID(b, true), "CBOR of %s", c.frame[:min(len(c.frame), 60)])
			}
		}
	}
	b, err := cbor.Marshal(map[string]any{"method": "x", "params": map[string]any{"id": 3, "l": []int{1, 2}}, "id": 11})
	require.NoError(t, err)
	if got := PeekID(b, true); assert.NotNil(t, got) {
		assert.Equal(t, uint64(11), *got)
	}
}

// amplificationFrames are the frames an adversarial review found to cost
// ~100x their size to decode: many tiny containers in one frame.
func amplificationFrames(t *testing.T) map[string][]byte {
	const n = 917_504
	empty := make([]map[string]any, n)
	for i := range empty {
		empty[i] = map[string]any{}
	}
	cb, err := cbor.Marshal(map[string]any{"id": 1, "method": "run.start", "params": map[string]any{"assistant_id": "echo", "input": empty}})
	require.NoError(t, err)
	var js bytes.Buffer
	js.WriteString(`{"id":1,"method":"run.start","params":{"assistant_id":"echo","input":[`)
	for js.Len() < 1<<20-10 {
		js.WriteString(`{},`)
	}
	js.WriteString(`{}]}}`)
	deep := `{"id":1,"method":"run.start","params":{"assistant_id":"echo","input":` + strings.Repeat("[", 500_000) + strings.Repeat("]", 500_000) + `}}`
	return map[string][]byte{"cbor_empty_maps": cb, "json_empty_maps": js.Bytes(), "json_deep": []byte(deep)}
}

// costOf measures the bytes allocated and the time one decode takes.
func costOf(decode func()) (allocated uint64, took time.Duration) {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	decode()
	took = time.Since(start)
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, took
}

// TestWorstFrameCost decodes the amplification frames and the largest
// frame the limits accept, and bounds what each allocates. (The time is
// logged, not asserted: these machines are too noisy for that.) Before the
// limits, the CBOR frame allocated about 110 MB.
func TestWorstFrameCost(t *testing.T) {
	d := Decoder{}
	// The schema is compiled on first use: not part of any frame's cost.
	_, resp := d.Command([]byte(`{"id":1,"method":"run.start","params":{"assistant_id":"echo","input":{}}}`))
	require.Nil(t, resp)
	for name, frame := range amplificationFrames(t) {
		isCBOR := strings.HasPrefix(name, "cbor")
		var resp *ErrorResponse
		alloc, took := costOf(func() {
			if isCBOR {
				_, resp = d.CommandCBOR(frame)
			} else {
				_, resp = d.Command(frame)
			}
		})
		t.Logf("%s: %d bytes refused in %v, %d bytes allocated", name, len(frame), took, alloc)
		require.NotNil(t, resp, name)
		assert.Equal(t, ErrorCodeInvalidArgument, resp.Code)
		assert.Contains(t, resp.Message, "a limit of this server")
		assert.Less(t, alloc, uint64(64<<10), "%s: a refused frame allocates next to nothing", name)
	}
	// The most a frame within the limits can hold: DefaultMaxValues-13
	// empty maps in a run's input.
	items := make([]string, DefaultMaxValues-13) // the rest of the command holds 13 values
	for i := range items {
		items[i] = "{}"
	}
	frame := []byte(fmt.Sprintf(`{"id":1,"method":"run.start","params":{"assistant_id":"echo","input":{"messages":[%s]}}}`, strings.Join(items, ",")))
	alloc, took := costOf(func() { _, resp = d.Command(frame) })
	t.Logf("largest accepted JSON shape: %d bytes decoded in %v, %d bytes allocated", len(frame), took, alloc)
	assert.Nil(t, resp)
	assert.Less(t, alloc, uint64(16<<20))
	cb, ok := cborOf(frame) // integers as CBOR integers, as a CBOR client sends them
	require.True(t, ok)
	alloc, took = costOf(func() { _, resp = d.CommandCBOR(cb) })
	t.Logf("largest accepted CBOR shape: %d bytes decoded in %v, %d bytes allocated", len(cb), took, alloc)
	assert.Nil(t, resp)
	assert.Less(t, alloc, uint64(24<<20))
}

func BenchmarkRefuseAmplificationFrame(b *testing.B) {
	frames := amplificationFrames(&testing.T{})
	for name, frame := range frames {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(frame)))
			for b.Loop() {
				if strings.HasPrefix(name, "cbor") {
					Decoder{}.CommandCBOR(frame)
				} else {
					Decoder{}.Command(frame)
				}
			}
		})
	}
}

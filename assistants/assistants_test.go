package assistants

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWordsKeepTheirFollowingSpace(t *testing.T) {
	cases := map[string][]string{
		"Hello  big world": {"Hello  ", "big ", "world"},
		"  leading":        {"  leading"},
		"trailing \n":      {"trailing \n"},
		"one":              {"one"},
		"":                 nil,
		"a\tb\nc":          {"a\t", "b\n", "c"},
	}
	for in, want := range cases {
		got := Words(in)
		require.Equal(t, want, got, "%q", in)
		require.Equal(t, in, strings.Join(got, ""), "the words give back the text")
	}
}

// The abuse review's remote crash: firehose inputs that ran the server out
// of memory or a core are refused before a run starts.
func TestBuiltinInputsAreBounded(t *testing.T) {
	user := map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}}
	for _, tc := range []struct {
		name      string
		check     func(any, map[string]any) error
		input     any
		config    map[string]any
		wantError string
	}{
		{"firehose defaults", checkFirehose, nil, nil, ""},
		{"firehose in bounds", checkFirehose, map[string]any{"count": 1000.0, "rate": 500.0, "size": 1024.0}, nil, ""},
		{"firehose size 1e14", checkFirehose, map[string]any{"size": 1e14}, nil, "size: 1e+14 is not a whole number from 0 to 1048576"},
		{"firehose 2e8 bytes a time", checkFirehose, map[string]any{"size": 2e8, "count": 3.0}, nil, "size:"},
		{"firehose a billion events", checkFirehose, map[string]any{"count": 1e9, "rate": 0.0}, nil, "count: 1e+09 is not a whole number"},
		{"firehose negative", checkFirehose, map[string]any{"count": -1.0}, nil, "count:"},
		{"firehose fraction", checkFirehose, map[string]any{"count": 1.5}, nil, "count:"},
		{"firehose not a number", checkFirehose, map[string]any{"rate": "fast"}, nil, "rate:"},
		{"firehose rate too high", checkFirehose, map[string]any{"rate": 1e7}, nil, "rate:"},
		{"firehose rate so low the interval overflows", checkFirehose, map[string]any{"rate": 1e-300}, nil, "rate: 1e-300 is below 0.001"},
		{"firehose too many bytes in all", checkFirehose, map[string]any{"count": 1e6, "size": 1048576.0}, nil, "count × size"},
		{"firehose not an object", checkFirehose, "lots", nil, "input must be"},
		{"echo", checkEcho, user, map[string]any{"token_delay_ms": 5.0}, ""},
		{"echo no message", checkEcho, map[string]any{}, nil, "input.messages"},
		{"echo delay too long", checkEcho, user, map[string]any{"token_delay_ms": 1e12}, "config.token_delay_ms"},
		{"demo delay not a number", checkDemo, nil, map[string]any{"configurable": map[string]any{"token_delay_ms": "slow"}}, "config.token_delay_ms"},
		{"demo", checkDemo, nil, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.check(tc.input, tc.config)
			if tc.wantError == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantError)
		})
	}
}

// TestFirehosePayloadWritesWhatEncodingJSONWould checks the firehose
// payload's own JSON byte for byte against encoding/json's.
func TestFirehosePayloadWritesWhatEncodingJSONWould(t *testing.T) {
	for _, f := range []firehoseEvent{
		{},
		{Index: 7, TS: 1763950000000000000, Pad: strings.Repeat("x", 36)},
		{Index: -1, TS: -5, Pad: "<&> \"\\ \u2028 é \x01"},
	} {
		want, err := json.Marshal(f)
		require.NoError(t, err)
		require.Equal(t, string(want), string(f.AppendJSON(nil)))
	}
}

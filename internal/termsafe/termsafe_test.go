package termsafe

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// attacks are texts that act on a terminal when printed raw.
var attacks = map[string]string{
	"clipboard (OSC 52)": "\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07",
	"window title":       "\x1b]0;pwned\x1b\\",
	"clear screen":       "\x1b[2J\x1b[H",
	"8-bit CSI (C1)":     "\u009b2J",
	"forged line":        "ok\n12:00:00.000 /            lifecycle completed",
	"carriage return":    "safe text\rEVIL",
	"bidi override":      "txt.\u202eexe.sh",
	"isolate":            "\u2066abc\u2069",
	"not UTF-8":          "a\xff\xfeb",
	"backspace and bell": "abc\b\b\b\x07",
}

func TestStringLeavesNoControl(t *testing.T) {
	for name, s := range attacks {
		got := String(s)
		for _, r := range strings.ReplaceAll(got, Continuation, "") {
			require.False(t, unsafe(r) || r == '\n' || r == '\r' || r == 0xfffd, "%s: %q left %U in %q", name, s, r, got)
		}
		for i, line := range strings.Split(got, "\n") {
			if i > 0 {
				require.True(t, strings.HasPrefix(line, "             | "), "%s: a line of its own: %q", name, line)
			}
		}
	}
	assert.Equal(t, `\x1b[2J\x1b[H`, String(attacks["clear screen"]))
	assert.Equal(t, `txt.\u202eexe.sh`, String(attacks["bidi override"]))
	assert.Equal(t, `a\xff\xfeb`, String(attacks["not UTF-8"]))
	for _, s := range []string{"plain", "tab\there", "héllo wörld ✓ 日本語 🚀", ""} {
		assert.Equal(t, s, String(s), "text without controls is printed as it is")
	}
}

func TestJSONStaysValidAndMeansTheSame(t *testing.T) {
	for name, s := range attacks {
		if name == "not UTF-8" {
			continue
		}
		raw, err := json.Marshal(map[string]string{"text": s}) // escapes C0, not C1 or bidi
		require.NoError(t, err)
		got := JSON(raw)
		for _, r := range string(got) {
			require.False(t, unsafe(r) || r == '\n', "%s: %U left in %s", name, r, got)
		}
		var back map[string]string
		require.NoError(t, json.Unmarshal(got, &back), "%s: %s", name, got)
		require.Equal(t, s, back["text"], name)
	}
	// A raw control byte in a (malformed) text is escaped too.
	assert.Equal(t, `{"a":"\u001b[2J"}`, string(JSON([]byte("{\"a\":\"\x1b[2J\"}"))))
	assert.Equal(t, `{"a":1}`, string(JSON([]byte(`{"a":1}`))))
}

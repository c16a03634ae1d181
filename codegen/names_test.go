package codegen

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFieldCase(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, snake, camel string }{
		{"assistantId", "assistant_id", "assistantId"},
		{"appliedThroughSeq", "applied_through_seq", "appliedThroughSeq"},
		{"HTTPServer", "http_server", "HTTPServer"},
		{"tool_call_id", "tool_call_id", "toolCallId"},
		{"id", "id", "id"},
		{"corner-radius", "corner-radius", "corner-radius"},
	}
	for _, c := range cases {
		require.Equal(t, c.snake, CaseSnake.Apply(c.in), c.in)
		require.Equal(t, c.camel, CaseCamel.Apply(c.in), c.in)
		require.Equal(t, c.in, CasePreserve.Apply(c.in))
	}
	require.Equal(t, "RunStart", goName("run.start"))
	require.Equal(t, "AssistantID", goName("assistantId"))
	require.Equal(t, "JsInt", goName("js-int"))
	require.Equal(t, "X1", goName("1"))
}

func TestJSONSchemaRoot(t *testing.T) {
	src := []byte("first = int\nsecond = { a: text }\n")
	for _, tc := range []struct {
		name, root, want string
	}{
		{"the first rule by default", "", "#/$defs/first"},
		{"the rule asked for", "second", "#/$defs/second"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := Compile("s.cddl", src, Options{Lang: LangJSONSchema, Root: tc.root})
			require.NoError(t, err)
			var doc struct {
				Ref string `json:"$ref"`
			}
			require.NoError(t, json.Unmarshal(out, &doc))
			require.Equal(t, tc.want, doc.Ref)
		})
	}
	_, _, err := Compile("s.cddl", src, Options{Lang: LangJSONSchema, Root: "third"})
	require.ErrorContains(t, err, `root rule "third" is not defined`)
}

package codegen

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

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

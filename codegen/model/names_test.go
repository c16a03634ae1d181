package model

import (
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
	require.Equal(t, "RunStart", GoName("run.start"))
	require.Equal(t, "AssistantID", GoName("assistantId"))
	require.Equal(t, "JsInt", GoName("js-int"))
	require.Equal(t, "X1", GoName("1"))
}

package server_test

import (
	"testing"

	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/stretchr/testify/require"
)

// TestCancelMidMessageClosesIt: a run cancelled while its message streams
// ends that message with the protocol's error event (code cancelled)
// before the run's lifecycle end; nothing is left open.
func TestCancelMidMessageClosesIt(t *testing.T) {
	s := newServer(t, server.Config{})
	sub, _, _ := s.Subscribe("t", all, nil)
	defer sub.Close()
	resp := do(t, s, "t", &protocol.ClientCommandRunStart{Params: protocol.RunStartParams{
		AssistantID: "echo", Input: userInput("one two three four five six seven eight"),
		Config: map[string]any{"token_delay_ms": float64(200)},
	}})
	runID := *resp.Result.(protocol.RunResult).RunID
	collect(t, sub, func(e *server.Event) bool {
		m, ok := e.Payload.(*protocol.ServerEventMessages)
		if !ok {
			return false
		}
		_, delta := m.Params.Data.Value.(*protocol.ContentBlockDeltaData)
		return delta
	})
	do(t, s, "t", &protocol.ClientCommandRunCancel{Params: protocol.RunCancelParams{RunID: &runID}})
	rest := collect(t, sub, rootEnded)
	var kinds []string
	for _, e := range rest {
		kinds = append(kinds, describe(e))
	}
	require.GreaterOrEqual(t, len(rest), 2)
	msgErr, ok := rest[len(rest)-2].Payload.(*protocol.ServerEventMessages)
	require.True(t, ok, "%v", kinds)
	d, ok := msgErr.Params.Data.Value.(*protocol.MessageErrorData)
	require.True(t, ok, "the message's error comes right before the run's end: %v", kinds)
	require.Equal(t, "cancelled", *d.Code)
	require.Contains(t, d.Message, "did not finish")
	require.Equal(t, runID, d.Extra["run_id"], "it carries the run id, as the other message events do")
	end := rest[len(rest)-1].Payload.(*protocol.ServerEventLifecycle).Params.Data
	require.True(t, *end.Cancelled)
}

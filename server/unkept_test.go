package server_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
)

// refusingState is a MemoryState whose value writes fail, as a full disk
// refuses them.
type refusingState struct{ *server.MemoryState }

func (refusingState) SetValues(context.Context, string, map[string]any) error {
	return errors.New("the disk is nearly full")
}

// TestARunWhoseStateIsNotKeptFails: an assistant that writes its values
// and ignores the store's refusal still ends failed, naming the refusal:
// a run that ended well would be answered with values that are not
// kept.
func TestARunWhoseStateIsNotKeptFails(t *testing.T) {
	mem := server.NewMemoryState()
	stores := server.MemoryStores(server.NewMemoryLog(server.DefaultBufferEvents, server.DefaultBufferBytes), mem)
	stores.State = refusingState{mem}
	s := newServer(t, server.Config{Stores: stores})
	s.Register("careless", server.AssistantFunc(func(_ context.Context, rc *server.RunContext) error {
		_ = rc.Values(map[string]any{"n": 1}) // refused, and not said
		return nil
	}))
	sub, _, err := s.Subscribe("t", channels.All, nil)
	require.NoError(t, err)
	defer sub.Close()
	start(t, s, "t", "careless", nil)
	got := collect(t, sub, rootEnded)
	l, ok := got[len(got)-1].Payload.(*protocol.ServerEventLifecycle)
	require.True(t, ok)
	require.Equal(t, protocol.AgentStatusFailed, l.Params.Data.Event)
	require.NotNil(t, l.Params.Data.Error)
	require.Contains(t, *l.Params.Data.Error, "not kept")
	require.Contains(t, *l.Params.Data.Error, "nearly full")
}

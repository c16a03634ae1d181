package inproc_test

import (
	"context"
	"errors"
	"testing"

	"github.com/agentstream/agentstream/assistants"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport/inproc"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCommandErrorsAreTyped(t *testing.T) {
	srv := server.New(server.Config{})
	defer srv.Close(context.Background())
	assistants.Register(srv)
	c := inproc.Connect(srv, "t")
	defer c.Close()
	_, err := c.Start(context.Background(), "missing", nil)
	var ce *inproc.CommandError
	require.True(t, errors.As(err, &ce))
	require.Equal(t, protocol.ErrorCodeInvalidArgument, ce.Code())
	resp, err := c.Do(context.Background(), &protocol.ClientCommandSubscriptionSubscribe{Params: protocol.SubscribeParams{Channels: []protocol.Channel{"values"}}})
	require.NoError(t, err)
	require.NotEmpty(t, resp.Result.(protocol.SubscribeResult).SubscriptionID)
}

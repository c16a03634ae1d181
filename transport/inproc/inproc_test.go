package inproc_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentstream/agentstream/assistants"
	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/internal/testkit/servetest"
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

func TestSubscriptionsThroughDoAreRead(t *testing.T) {
	srv := server.New(server.Config{})
	defer srv.Close(context.Background())
	assistants.Register(srv)
	c := inproc.Connect(srv, "t")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Do(ctx, &protocol.ClientCommandSubscriptionSubscribe{Params: protocol.SubscribeParams{Channels: []protocol.Channel{"lifecycle"}}})
	require.NoError(t, err)
	id := resp.Result.(protocol.SubscribeResult).SubscriptionID
	_, err = c.Start(ctx, "echo", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "a b"}}})
	require.NoError(t, err)
	var statuses []protocol.AgentStatus
	for len(statuses) == 0 || statuses[len(statuses)-1] != protocol.AgentStatusCompleted {
		e, err := c.Next(ctx)
		require.NoError(t, err)
		statuses = append(statuses, e.Payload.(*protocol.ServerEventLifecycle).Params.Data.Event)
	}
	require.Equal(t, []protocol.AgentStatus{protocol.AgentStatusStarted, protocol.AgentStatusRunning, protocol.AgentStatusCompleted}, statuses)
	_, err = c.Do(ctx, &protocol.ClientCommandSubscriptionUnsubscribe{Params: protocol.UnsubscribeParams{SubscriptionID: id}})
	require.NoError(t, err)
	_, err = c.Do(ctx, &protocol.ClientCommandSubscriptionUnsubscribe{Params: protocol.UnsubscribeParams{SubscriptionID: id}})
	var ce *inproc.CommandError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, protocol.ErrorCodeNoSuchSubscription, ce.Code())
	c.Close()
	_, err = c.Next(ctx)
	require.ErrorIs(t, err, server.ErrClosed)
}

// TestConnectAs: a relaying program opens clients as its users; a user's
// client may not use another user's thread, a command is authorized
// again, and the stream ends when the credential expires.
func TestConnectAs(t *testing.T) {
	srv := server.New(server.Config{})
	defer srv.Close(context.Background())
	assistants.Register(srv)
	alice := &auth.Principal{Subject: "alice", Expires: time.Now().Add(300 * time.Millisecond)}
	c, err := inproc.ConnectAs(srv, alice, "t")
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Start(context.Background(), "echo", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}})
	require.NoError(t, err)
	require.Equal(t, "alice", servetest.Owner(t, srv, "t"))

	_, err = inproc.ConnectAs(srv, &auth.Principal{Subject: "bob"}, "t")
	require.ErrorIs(t, err, server.ErrPermissionDenied)
	_, err = inproc.ConnectAs(srv, nil, "t")
	require.ErrorIs(t, err, server.ErrUnauthenticated)
	admin, err := inproc.ConnectAs(srv, &auth.Principal{Subject: "root", Admin: true}, "t")
	require.NoError(t, err)
	defer admin.Close()

	_, err = c.Do(context.Background(), &protocol.ClientCommandSubscriptionSubscribe{Params: protocol.SubscribeParams{Channels: []protocol.Channel{"lifecycle"}}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for err == nil {
		_, err = c.Next(ctx)
	}
	require.ErrorIs(t, err, server.ErrCredentialExpired)
}

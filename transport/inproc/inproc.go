// Package inproc is the in-process transport: a Go program talks to an
// embedded agentstream server with typed commands and typed events, with
// no serialization in between.
//
// A [Client] is bound to one thread. [Client.Do] sends any command and
// returns the typed response; [Client.Subscribe] opens a filtered stream
// with an optional cursor whose events carry their protocol payload as Go
// values (server.Event.Payload). Subscription commands
// (subscription.subscribe and friends) work too, through the client's
// session.
package inproc

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
)

// Client is an in-process connection to one thread of a server.
type Client struct {
	srv     *server.Server
	session *server.Session
	nextID  atomic.Uint64
}

// Connect opens a client on thread threadID of srv (the thread is created
// by the first run.start, or by subscribing).
func Connect(srv *server.Server, threadID string) *Client {
	return &Client{srv: srv, session: srv.NewSession(threadID)}
}

// Thread is the client's thread.
func (c *Client) Thread() string { return c.session.Thread() }

// CommandError is a command's ErrorResponse as a Go error.
type CommandError struct{ Response *protocol.ErrorResponse }

func (e *CommandError) Error() string {
	return fmt.Sprintf("%s: %s", e.Response.Error, e.Response.Message)
}

// Code is the protocol error code.
func (e *CommandError) Code() protocol.ErrorCode { return e.Response.Error }

// Do sends a command (any ClientCommand variant; its ID is set for you
// when zero) and returns the typed response. A protocol error comes back
// as a *CommandError.
func (c *Client) Do(ctx context.Context, cmd protocol.ClientCommandVariant) (*protocol.CommandResponse, error) {
	if id, _ := protocol.CommandIDOf(cmd); id == 0 {
		protocol.SetCommandID(cmd, c.nextID.Add(1))
	}
	resp, errResp := c.session.Do(ctx, &protocol.ClientCommand{Value: cmd}, nil)
	if errResp != nil {
		return nil, &CommandError{Response: errResp}
	}
	return resp, nil
}

// Start is run.start: it starts (or resumes, or feeds) a run of assistant
// on the thread and returns the run id.
func (c *Client) Start(ctx context.Context, assistant string, input any) (string, error) {
	resp, err := c.Do(ctx, &protocol.ClientCommandRunStart{Params: protocol.RunStartParams{AssistantID: assistant, Input: input}})
	if err != nil {
		return "", err
	}
	r, ok := resp.Result.(protocol.RunResult)
	if !ok || r.RunID == nil {
		return "", errors.New("inproc: run.start returned no run id")
	}
	return *r.RunID, nil
}

// Subscribe opens a stream of the thread's events matching f, after cursor
// (every buffered event when cursor is nil).
func (c *Client) Subscribe(f channels.Filter, cursor *uint64) (*server.Subscription, error) {
	sub, _, err := c.srv.Subscribe(c.Thread(), f, cursor)
	return sub, err
}

// Close ends the client's session subscriptions.
func (c *Client) Close() { c.session.Close() }

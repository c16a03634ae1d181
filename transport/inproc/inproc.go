// Package inproc is the in-process transport: a Go program talks to an
// embedded agentstream server with typed commands and typed events, with
// no serialization in between.
//
// A [Client] is bound to one thread and is a session of the server's, as a
// WebSocket connection is: [Client.Do] sends any command, subscription
// commands included, and returns the typed response; [Client.Next] reads
// the events of the client's subscriptions merged into one stream, in
// sequence order and each once, with their protocol payload as Go values
// (server.Event.Payload). [Client.Subscribe] opens a separate stream of
// one filter, for a reader of its own.
//
// [Connect] trusts its caller, the program that embeds the server. A
// program that relays threads to its own users opens each client with
// [ConnectAs] and the user's principal: the thread is authorized as over
// the network (server.Authorize, at connect and for every command), and
// the client's stream ends with server.ErrCredentialExpired when the
// principal's credential expires.
package inproc

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
)

// Client is an in-process connection to one thread of a server. Its
// methods are safe for concurrent use, but one goroutine at a time reads
// with Next.
type Client struct {
	srv     *server.Server
	session *server.Session
	nextID  atomic.Uint64
	as      *auth.Principal // nil: the trusted embedder
}

// Connect opens a client on thread threadID of srv (the thread is created
// by the first run.start, or by subscribing).
func Connect(srv *server.Server, threadID string) *Client {
	return &Client{srv: srv, session: srv.NewSession(threadID)}
}

// ConnectAs opens a client on thread threadID of srv acting as principal
// p: it fails with an error wrapping server.ErrPermissionDenied when p may
// not use the thread (server.ErrUnauthenticated for a nil p), every
// command is authorized again, and the client's stream ends with
// server.ErrCredentialExpired at p.Expires.
func ConnectAs(srv *server.Server, p *auth.Principal, threadID string) (*Client, error) {
	if err := srv.Authorize(p, threadID, true); err != nil {
		return nil, err
	}
	c := &Client{srv: srv, session: srv.NewSession(threadID), as: p}
	c.session.ExpireAt(p.Expires)
	return c, nil
}

// Thread is the client's thread.
func (c *Client) Thread() string { return c.session.Thread() }

// CommandError is a command's ErrorResponse as a Go error.
type CommandError struct{ Response *protocol.ErrorResponse }

func (e *CommandError) Error() string {
	return fmt.Sprintf("%s: %s", e.Response.Code, e.Response.Message)
}

// Code is the protocol error code.
func (e *CommandError) Code() protocol.ErrorCode { return e.Response.Code }

// Unwrap returns the ErrorResponse, for errors.As.
func (e *CommandError) Unwrap() error { return e.Response }

// Do sends a command (any ClientCommand variant; its ID is set for you
// when zero) and returns the typed response. A protocol error comes back
// as a *CommandError.
func (c *Client) Do(ctx context.Context, cmd protocol.ClientCommandVariant) (*protocol.CommandResponse, error) {
	if cmd.GetID() == 0 {
		cmd.SetID(c.nextID.Add(1))
	}
	if c.as != nil {
		if err := c.srv.Authorize(c.as, c.Thread(), true); err != nil {
			id := cmd.GetID()
			return nil, &CommandError{Response: protocol.NewError(&id, protocol.ErrorCodePermissionDenied, "%v", err)}
		}
	}
	resp, err := c.session.Do(ctx, &protocol.ClientCommand{Value: cmd})
	if err != nil {
		id := cmd.GetID()
		return nil, &CommandError{Response: protocol.ErrorResponseOf(&id, err)}
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

// Next returns the next event of the client's subscriptions (made with
// subscription.subscribe or subscription.reconnect through Do), waiting for
// one. It returns ctx.Err() when ctx ends, and once the client is closed
// and its queue drained, server.ErrClosed or the reason the stream ended
// (a *server.SlowConsumerError when the client read too slowly).
func (c *Client) Next(ctx context.Context) (*server.Event, error) {
	e, err := c.session.Next(ctx)
	if err != nil {
		return nil, err
	}
	return e.WithPayload() // a replayed event, or one from another node, carries its JSON only
}

// Subscribe opens a separate stream of the thread's events matching f,
// after cursor (every buffered event when cursor is nil), to be read with
// its own Next and closed with its Close.
func (c *Client) Subscribe(f channels.Filter, cursor *server.Cursor) (*server.Session, error) {
	if c.as != nil {
		if err := c.srv.Authorize(c.as, c.Thread(), true); err != nil {
			return nil, err
		}
	}
	ss, _, err := c.srv.Subscribe(c.Thread(), f, cursor)
	if err == nil && c.as != nil {
		ss.ExpireAt(c.as.Expires)
	}
	return ss, err
}

// Close ends the client's subscriptions.
func (c *Client) Close() { c.session.Close() }

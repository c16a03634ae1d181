package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// cmdConn is a thread's WebSocket for commands, over which they travel
// in-band as the official SDK sends them; it is dialed on first use and
// again after it drops. Its reader goroutine ends when the connection
// does.
type cmdConn struct {
	conn    *websocket.Conn
	mu      sync.Mutex
	pending map[uint64]chan []byte
	err     error // why the connection ended; set before done closes
	done    chan struct{}
}

// commandConn returns the thread's command connection, dialing it when
// there is none (or the last one ended).
func (t *Thread) commandConn(ctx context.Context) (*cmdConn, error) {
	t.cmdMu.Lock()
	defer t.cmdMu.Unlock()
	if cc := t.cmd; cc != nil {
		select {
		case <-cc.done:
		default:
			return cc, nil
		}
	}
	conn, err := t.dialWS(ctx)
	if err != nil {
		return nil, err
	}
	cc := &cmdConn{conn: conn, pending: map[uint64]chan []byte{}, done: make(chan struct{})}
	t.c.mu.Lock()
	if t.c.closed {
		t.c.mu.Unlock()
		_ = conn.Close(websocket.StatusNormalClosure, "")
		return nil, errClientClosed
	}
	t.c.cmds[cc] = struct{}{}
	t.c.mu.Unlock()
	t.cmd = cc
	go cc.read(t.c)
	return cc, nil
}

// dialWS opens a WebSocket to the thread's stream route, with the
// client's credentials: a refusal is the server's *Error.
func (t *Thread) dialWS(ctx context.Context) (*websocket.Conn, error) {
	u := "ws" + strings.TrimPrefix(t.c.url(t.path("/stream")), "http")
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	h := http.Header{}
	if err := t.c.authorize(ctx, h); err != nil {
		return nil, err
	}
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: t.c.http, HTTPHeader: h})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, httpError(resp)
		}
		return nil, fmt.Errorf("client: %w", err)
	}
	conn.SetReadLimit(int64(t.c.opts.MaxMessageBytes))
	return conn, nil
}

// read hands each answer to its waiting command until the connection ends.
func (cc *cmdConn) read(c *Client) {
	defer func() {
		c.mu.Lock()
		delete(c.cmds, cc)
		c.mu.Unlock()
	}()
	for {
		_, data, err := cc.conn.Read(context.Background())
		if err != nil {
			cc.mu.Lock()
			cc.err = closeError(err)
			cc.mu.Unlock()
			close(cc.done)
			return
		}
		var head struct {
			Type string  `json:"type"`
			ID   *uint64 `json:"id"`
		}
		if json.Unmarshal(data, &head) != nil || head.ID == nil || head.Type == "event" {
			continue
		}
		cc.mu.Lock()
		ch := cc.pending[*head.ID]
		delete(cc.pending, *head.ID)
		cc.mu.Unlock()
		if ch != nil {
			ch <- data
		}
	}
}

var errClientClosed = errors.New("client: closed")

func (cc *cmdConn) close() { _ = cc.conn.Close(websocket.StatusNormalClosure, "") }

// doWS sends a command over the thread's WebSocket and waits for its
// answer. A command whose connection drops before the answer fails with
// the connection's error (it may or may not have been carried out); the
// next command dials again.
func (t *Thread) doWS(ctx context.Context, id uint64, method string, body []byte, result any) error {
	cc, err := t.commandConn(ctx)
	if err != nil {
		return err
	}
	ch := make(chan []byte, 1)
	cc.mu.Lock()
	if cc.err != nil {
		cc.mu.Unlock()
		return cc.err
	}
	cc.pending[id] = ch
	cc.mu.Unlock()
	forget := func() {
		cc.mu.Lock()
		delete(cc.pending, id)
		cc.mu.Unlock()
	}
	if err := cc.conn.Write(ctx, websocket.MessageText, body); err != nil {
		forget()
		return fmt.Errorf("client: %s: %w", method, err)
	}
	select {
	case data := <-ch:
		return decodeAnswer(method, 0, data, result)
	case <-cc.done:
		forget()
		cc.mu.Lock()
		err := cc.err
		cc.mu.Unlock()
		return fmt.Errorf("client: %s: the connection ended before the answer: %w", method, err)
	case <-ctx.Done():
		forget()
		return ctx.Err()
	}
}

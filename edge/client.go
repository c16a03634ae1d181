package edge

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentstream/agentstream/auth"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client speaks to the upstream's HTTP routes.
type Client struct {
	base   string
	header http.Header // sent with every request (the API key, passed-through headers)
	http   *http.Client
	stream *http.Client // no overall timeout: streams last
}

// NewClient returns a client of the upstream at base (http://host:port);
// header is sent with every request.
func NewClient(base string, header http.Header) (*Client, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("edge: the upstream %q is not an http(s)://host:port URL", auth.RedactURL(base))
	}
	return &Client{base: strings.TrimSuffix(base, "/"), header: header.Clone(),
		http: &http.Client{Timeout: 30 * time.Second}, stream: &http.Client{}}, nil
}

// ErrUpstream wraps what the upstream answered with an HTTP error.
var ErrUpstream = errors.New("edge: the upstream refused")

func (c *Client) request(ctx context.Context, method, path string, body []byte) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// Do sends a request and returns the answer's status and body. An answer
// larger than MaxAnswerBytes, cut short or not JSON is an error
// (ErrUpstream), never a body passed on; an error status's plain text
// comes as {"detail": text}.
func (c *Client) Do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	return c.DoWith(ctx, method, path, body, nil)
}

// DoWith is Do with more headers (the caller's identity).
func (c *Client) DoWith(ctx context.Context, method, path string, body []byte, extra http.Header) (int, []byte, error) {
	req, err := c.request(ctx, method, path, body)
	if err != nil {
		return 0, nil, err
	}
	for k, v := range extra {
		req.Header[k] = v
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("edge: the upstream %s: %w", auth.RedactURL(c.base), err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes+1))
	switch {
	case err != nil:
		return 0, nil, fmt.Errorf("%w: %s %s: the answer was cut (%v)", ErrUpstream, method, path, err)
	case len(b) > MaxAnswerBytes:
		return 0, nil, fmt.Errorf("%w: %s %s: the answer is larger than %d bytes", ErrUpstream, method, path, MaxAnswerBytes)
	case len(b) > 0 && !json.Valid(b) && resp.StatusCode >= 400:
		// An error in plain text (the JavaScript server's 404s): its
		// status, and its text as {"detail": ...}.
		text := strings.ToValidUTF8(string(b[:min(len(b), 1024)]), "?")
		b, _ = json.Marshal(map[string]string{"detail": text})
	case len(b) > 0 && !json.Valid(b):
		return 0, nil, fmt.Errorf("%w: %s %s: the answer (%d, %d bytes) is not JSON", ErrUpstream, method, path, resp.StatusCode, len(b))
	}
	return resp.StatusCode, b, nil
}

// MaxAnswerBytes bounds an upstream's answer to a command or a state
// read: a larger one is an error (502 to the client), never passed on cut.
const MaxAnswerBytes = 8 << 20

// Check asks whether the upstream answers (GET /ok, LangGraph's health
// route).
func (c *Client) Check(ctx context.Context) error {
	status, body, err := c.Do(ctx, "GET", "/ok", nil)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("%w: GET /ok answered %d %s", ErrUpstream, status, bytes.TrimSpace(body))
	}
	return nil
}

// allChannels are the channels an upstream stream asks for: all of them.
var allChannels = []string{"messages", "tools", "lifecycle", "values", "updates", "checkpoints", "tasks", "custom", "input"}

// Stream reads the upstream's event stream of thread after seq since
// (every channel, every namespace), calling fn with each event's JSON
// until the stream ends, ctx ends or fn fails.
func (c *Client) Stream(ctx context.Context, thread string, since uint64, fn func([]byte) error) error {
	body := map[string]any{"channels": allChannels}
	if since > 0 {
		body["since"] = since
	}
	b, _ := json.Marshal(body)
	req, err := c.request(ctx, "POST", "/threads/"+url.PathEscape(thread)+"/stream/events", b)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.stream.Do(req)
	if err != nil {
		return fmt.Errorf("edge: the upstream's stream of %s: %w", thread, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("%w: its stream of %s answered %d %s", ErrUpstream, thread, resp.StatusCode, bytes.TrimSpace(msg))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var data []byte
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0:
			if len(data) > 0 {
				if err := fn(data); err != nil {
					return err
				}
				data = nil
			}
		case bytes.HasPrefix(line, []byte("data:")):
			d := bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, d...)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("edge: the upstream's stream of %s: %w", thread, err)
	}
	return io.ErrUnexpectedEOF // the upstream ended it: the caller resumes
}

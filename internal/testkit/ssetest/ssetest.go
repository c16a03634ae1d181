// Package ssetest reads Server-Sent Events streams in tests: it owns the
// one frame scanner the transport, engine and process tests share.
package ssetest

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"time"
)

// Frame is one SSE frame: its id (empty for frames without one), its
// event name and its data line.
type Frame struct {
	ID, Event, Data string
}

// Scan reads frames from r and calls fn with each, until fn returns false
// (Scan then returns nil) or r fails (its error: io.EOF when the stream
// ended). Comment lines (heartbeats) are skipped.
func Scan(r *bufio.Reader, fn func(Frame) bool) error {
	var f Frame
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case strings.HasPrefix(line, "id: "):
			f.ID = line[4:]
		case strings.HasPrefix(line, "event: "):
			f.Event = line[7:]
		case strings.HasPrefix(line, "data: "):
			f.Data = line[6:]
		case line == "" && f.Event != "":
			if !fn(f) {
				return nil
			}
			f = Frame{}
		}
	}
}

// Follow reads a stream through connections that end (a node stops, a
// stream is cut) and are opened again with the last id read as
// Last-Event-ID: open gives each connection's context (with its cancel)
// and URL, fn gets each frame and the connection's number (from 1). It
// returns when fn returns false or ctx ends; a connection that cannot be
// opened is tried again 50 ms later.
func Follow(ctx context.Context, open func(conn int) (context.Context, context.CancelFunc, string), fn func(conn int, f Frame) bool) {
	last := ""
	for conn := 1; ctx.Err() == nil; conn++ {
		cctx, cancel, url := open(conn)
		if !followOnce(cctx, url, last, func(f Frame) bool {
			if f.ID != "" {
				last = f.ID
			}
			return fn(conn, f)
		}) {
			cancel()
			return
		}
		cancel()
	}
}

// followOnce reads one connection; it reports false when fn said stop.
func followOnce(ctx context.Context, url, last string, fn func(Frame) bool) bool {
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	if last != "" {
		req.Header.Set("Last-Event-ID", last)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		if err == nil {
			resp.Body.Close()
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
		return true
	}
	defer resp.Body.Close()
	stopped := false
	_ = Scan(bufio.NewReader(resp.Body), func(f Frame) bool {
		stopped = !fn(f)
		return !stopped
	})
	return !stopped
}

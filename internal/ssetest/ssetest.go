// Package ssetest reads Server-Sent Events streams in tests: it owns the
// one frame scanner the transport, engine and process tests share.
package ssetest

import (
	"bufio"
	"strings"
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

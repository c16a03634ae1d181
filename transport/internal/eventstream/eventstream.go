// Package eventstream owns what every Server-Sent Events response of the
// transports has: its headers. (The streams themselves, the protocol's and
// the other wires', are package sse's.)
package eventstream

import "net/http"

// SetHeaders sets the headers of an event stream: not cached, not
// buffered by a proxy.
func SetHeaders(hdr http.Header) {
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("Connection", "keep-alive")
	hdr.Set("X-Accel-Buffering", "no")
}

// Package longlived owns what the handlers of long-lived connections (SSE
// streams and WebSockets, which serve a client for hours) share: the
// principal's stream slot, handed from the route that took it to the
// handler that keeps it until the connection ends (WithSlot, KeepSlot),
// and work done off the connection's goroutine so that its stack stays
// small (Shallow).
package longlived

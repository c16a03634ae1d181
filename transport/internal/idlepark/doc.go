// Package idlepark keeps idle sockets without a goroutine each. A server
// that gives every connection a goroutine blocked in a read pays for that
// goroutine's stack (4 KiB once it has grown) on every idle connection,
// half of what an idle WebSocket costs otherwise. A parked socket has no
// goroutine: one goroutine per Poller waits in epoll_wait for every parked
// socket and, when one becomes readable (or its peer hangs up, or it
// fails), starts a goroutine for it that carries on from where its owner
// parked it.
//
// A parked socket is resumed exactly once: by its readiness, or by Wake,
// which its owner calls before anything that needs its reader (closing it,
// a read deadline). The Poller's goroutine runs only while sockets are
// parked and ends by itself when none is.
//
// Parking needs epoll (Linux); elsewhere Park reports false and the owner
// waits as it would without this package.
package idlepark

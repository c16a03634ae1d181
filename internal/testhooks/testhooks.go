// Package testhooks holds what the core lets tests do that is no part of its
// API: package server sets each hook as it initializes, and the tests of
// other packages call it (package servetest's Sweep).
package testhooks

// Sweep runs a server's periodic sweep at once (idle buffers released,
// idle threads and expired dropped sessions forgotten); its argument is a
// *server.Server.
var Sweep func(srv any)

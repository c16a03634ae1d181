// Package edge puts agentstream in front of a LangGraph server (edge
// mode, `serve --upstream URL`): the assistants are the upstream's, the
// commands on a thread's runs and state are forwarded to it, and for each
// thread with subscribers here or a run under way the edge holds one
// upstream event stream, whose events it appends to the thread's log
// with their seq and ids (server.Mirrors.Append), so that every client gets the
// edge's replay, filters, reconnects and fan-out. It owns the upstream's
// HTTP client (Client) and the followers of the threads (Edge).
package edge

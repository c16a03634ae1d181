package edge

import (
	"encoding/json"
	"strings"

	"github.com/agentstream/agentstream/protocol"
)

// upEvent is what the edge reads of an upstream event.
type upEvent struct {
	Seq    uint64 `json:"seq"`
	Method string `json:"method"`
	Params struct {
		Namespace []string `json:"namespace"`
		Node      *string  `json:"node"`
		Timestamp uint64   `json:"timestamp"`
		Data      struct {
			Event      string `json:"event"` // any channel's: not only a status
			ToolCallID string `json:"tool_call_id"`
		} `json:"data"`
	} `json:"params"`
}

// read reads an upstream event (ok false for what is not one).
func read(b []byte) (upEvent, bool) {
	var ev upEvent
	return ev, json.Unmarshal(b, &ev) == nil && ev.Seq > 0
}

func (ev upEvent) root() bool { return ev.Method == "lifecycle" && len(ev.Params.Namespace) == 0 }

func nsKey(ns []string) string { return strings.Join(ns, "\x00") }

// under reports whether namespace ns is prefix's or below it.
func under(ns, prefix []string) bool {
	if len(ns) < len(prefix) {
		return false
	}
	for i := range prefix {
		if ns[i] != prefix[i] {
			return false
		}
	}
	return true
}

// openItem is a message or tool call the upstream opened and has not
// ended.
type openItem struct {
	ns   []string
	node *string
	tool string // a tool call's id; "" for a message
}

// closer keeps what a thread's upstream left open, so that the edge ends
// it as agentstream's own runs do: a namespace that ends (its lifecycle
// failed, interrupted or completed) with a message or a tool call open
// below it gets a messages `error` or a `tool-error` first (code
// cancelled when the edge cancelled the run). The upstream leaves them
// open when its run is cancelled.
type closer struct {
	open map[string]openItem // by namespace (and node) for messages, by id for tools
}

func (c *closer) see(ev upEvent) {
	if c.open == nil {
		c.open = map[string]openItem{}
	}
	node := ""
	if ev.Params.Node != nil {
		node = *ev.Params.Node
	}
	switch ev.Method {
	case "messages":
		k := "m\x00" + nsKey(ev.Params.Namespace) + "\x01" + node
		switch ev.Params.Data.Event {
		case "message-start":
			c.open[k] = openItem{ns: ev.Params.Namespace, node: ev.Params.Node}
		case "message-finish", "error":
			delete(c.open, k)
		}
	case "tools":
		k := "t\x00" + ev.Params.Data.ToolCallID
		switch ev.Params.Data.Event {
		case "tool-started":
			c.open[k] = openItem{ns: ev.Params.Namespace, node: ev.Params.Node, tool: ev.Params.Data.ToolCallID}
		case "tool-finished", "tool-error":
			delete(c.open, k)
		}
	}
}

// closing returns the events that end what is open below a namespace
// whose lifecycle ev ends it, and forgets them.
func (c *closer) closing(ev upEvent, cancelled bool) []protocol.ProducerEvent {
	if ev.Method != "lifecycle" {
		return nil
	}
	switch ev.Params.Data.Event {
	case "failed", "interrupted", "completed":
	default:
		return nil
	}
	code, why := ev.Params.Data.Event, "the run "+ev.Params.Data.Event+" before it ended"
	if cancelled {
		code, why = "cancelled", "the run was cancelled"
	}
	var out []protocol.ProducerEvent
	for k, it := range c.open {
		if !under(it.ns, ev.Params.Namespace) {
			continue
		}
		delete(c.open, k)
		ns := protocol.Namespace(append([]string{}, it.ns...))
		if it.tool != "" {
			out = append(out, protocol.ProducerEvent{Timestamp: ev.Params.Timestamp, Event: &protocol.ServerEventTools{Params: protocol.EventToolsParams{
				Namespace: ns, Node: it.node, Data: protocol.ToolsData{Value: &protocol.ToolErrorData{ToolCallID: it.tool, Message: why, Code: &code}}}}})
			continue
		}
		out = append(out, protocol.ProducerEvent{Timestamp: ev.Params.Timestamp, Event: &protocol.ServerEventMessages{Params: protocol.EventMessagesParams{
			Namespace: ns, Node: it.node, Data: protocol.MessagesData{Value: &protocol.MessageErrorData{Message: why, Code: &code}}}}})
	}
	return out
}

// asCancelled rewrites the root's end of a run the edge cancelled as
// agentstream ends one: `failed` with `cancelled` true (the upstream says
// `interrupted`).
func asCancelled(b []byte) []byte {
	var ev map[string]any
	if json.Unmarshal(b, &ev) != nil {
		return b
	}
	params, _ := ev["params"].(map[string]any)
	data, _ := params["data"].(map[string]any)
	if data == nil {
		return b
	}
	data["event"], data["cancelled"] = "failed", true
	out, err := json.Marshal(ev)
	if err != nil {
		return b
	}
	return out
}

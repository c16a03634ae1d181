package minimal

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/runtime/cddlrt"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport/internal/httpjson"
	"github.com/agentstream/agentstream/transport/wire"
)

// maxBody caps a request's body.
const maxBody = 1 << 20

// Handler serves POST /minimal/stream.
type Handler struct {
	wire.Context
}

// New returns the handler of the minimal token stream on c.Server, its
// streams served by c.Streams.
func New(c wire.Context) *Handler { return &Handler{Context: c.WithDefaults()} }

// Routes are the wire's one route: a stream (it starts a run and streams
// it), whose thread is in the body.
func (h *Handler) Routes() []wire.Route {
	return []wire.Route{{Method: "POST", Pattern: "/minimal/stream", Kind: wire.StreamRoute, Handler: h}}
}

// ServeHTTP starts the run and streams its frames until it ends.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		httpjson.Write(w, http.StatusUnsupportedMediaType, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "the body is JSON: Content-Type: application/json"))
		return
	}
	body, ok := h.ReadBody(w, r, maxBody, "request")
	if !ok {
		return
	}
	var req MinimalStreamRequest
	if err := cddlrt.DecodeStrictJSON(body, &req); err != nil {
		httpjson.Write(w, http.StatusBadRequest, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "%v", err))
		return
	}
	thread := ""
	if req.ThreadID != nil {
		thread = *req.ThreadID
	} else {
		var b [12]byte
		_, _ = rand.Read(b[:])
		thread = "min_" + hex.EncodeToString(b[:])
	}
	if !h.Thread(w, r, "thread_id", thread, true) {
		return
	}

	ss := h.Server.NewSession(thread)
	reject := protocol.MultitaskStrategyReject
	input := map[string]any{"messages": []any{map[string]any{"role": "user", "content": req.Message}}}
	resp, err := ss.Do(r.Context(), &protocol.ClientCommand{Value: &protocol.ClientCommandRunStart{ID: 1,
		Params: protocol.RunStartParams{AssistantID: req.AssistantID, Input: input, MultitaskStrategy: &reject}}})
	if err != nil {
		ss.Close()
		status, e := httpjson.CommandError(err)
		httpjson.Write(w, status, e)
		return
	}
	applied := uint64(0)
	if resp.Meta != nil && resp.Meta.AppliedThroughSeq != nil {
		applied = *resp.Meta.AppliedThroughSeq
	}
	// The run's events: those after the last one published before it
	// started, replayed from the buffer, then live.
	f := channels.Filter{Channels: []string{channels.Messages, channels.Tools, channels.Values, channels.Lifecycle, channels.Input}, Depth: channels.Unlimited}
	if _, _, err := ss.Subscribe(f, server.SeqCursor(applied)); err != nil {
		ss.Close()
		httpjson.Write(w, http.StatusServiceUnavailable, protocol.NewError(nil, protocol.ErrorCodeUnavailable, "%v", err))
		return
	}

	h.Streams.Serve(w, r, ss, wire.Stream{Frames: frames{thread: thread}, First: frame(nil, &MinimalStreamStart{}),
		Heartbeat: ": keep-alive\n\n", HeartbeatEvery: h.Heartbeat, Header: http.Header{"Agentstream-Thread": {thread}}})
}

// frame appends v as a data-only frame.
func frame(buf []byte, v MinimalFrameVariant) []byte {
	b, err := json.Marshal(MinimalFrame{Value: v})
	if err != nil {
		return buf
	}
	buf = append(buf, "data: "...)
	buf = append(buf, b...)
	return append(buf, "\n\n"...)
}

// frames makes the stream's frames of the run's events.
type frames struct{ thread string }

func (f frames) Append(buf []byte, e *server.Event) ([]byte, bool) {
	out, end := translate(e, f.thread)
	for _, v := range out {
		buf = frame(buf, v)
	}
	return buf, end
}

// AppendEnd ends the stream with an error frame saying why (the run goes
// on: read it back on its thread).
func (f frames) AppendEnd(buf []byte, err error) []byte {
	if err == nil {
		return frame(buf, &MinimalError{Message: "the server is shutting down"})
	}
	return frame(buf, &MinimalError{Message: fmt.Sprintf("the stream ended: %v", err)})
}

// translate turns one of the run's protocol events into frames; end says
// the stream ends after them.
func translate(e *server.Event, thread string) (frames []MinimalFrameVariant, end bool) {
	if e.Seq == 0 {
		// Not in the thread's stream: the state when the subscription was
		// made (values, before the run: left out), or a notice that events
		// were missed.
		if e.Method == "events.missed" {
			return []MinimalFrameVariant{&MinimalWarning{Message: "some of the run's events were missed (this stream fell behind the server's buffer)"}}, false
		}
		return nil, false
	}
	e, err := e.WithPayload()
	if err != nil {
		return []MinimalFrameVariant{&MinimalWarning{Message: fmt.Sprintf("an event could not be read: %v", err)}}, false
	}
	root := len(e.Namespace) == 0
	switch p := e.Payload.(type) {
	case *protocol.ServerEventMessages:
		switch d := p.Params.Data.Value.(type) {
		case *protocol.ContentBlockDeltaData:
			if t, ok := d.Delta.Value.(*protocol.TextDelta); ok && root && t.Text != "" {
				return []MinimalFrameVariant{&MinimalToken{Content: t.Text}}, false
			}
		case *protocol.MessageErrorData:
			return []MinimalFrameVariant{&MinimalWarning{Message: d.Message}}, false
		}
	case *protocol.ServerEventTools:
		switch d := p.Params.Data.Value.(type) {
		case *protocol.ToolStartedData:
			args := []byte("{}")
			if d.Input != nil {
				if b, err := json.Marshal(d.Input); err == nil {
					args = b
				}
			}
			return []MinimalFrameVariant{&MinimalToolCall{Name: d.ToolName, Arguments: string(args), CallID: d.ToolCallID}}, false
		case *protocol.ToolFinishedData:
			return []MinimalFrameVariant{&MinimalToolResult{Output: d.Output, CallID: d.ToolCallID}}, false
		case *protocol.ToolErrorData:
			return []MinimalFrameVariant{&MinimalWarning{Message: fmt.Sprintf("tool call %s failed: %s", d.ToolCallID, d.Message)}}, false
		}
	case *protocol.ServerEventValues:
		return []MinimalFrameVariant{workflowState(p.Params.Data)}, false
	case *protocol.ServerEventInputRequested:
		return []MinimalFrameVariant{&MinimalWarning{Message: fmt.Sprintf("the assistant asks for input (interrupt %s), which this stream cannot answer: answer it with input.respond on thread %s", p.Params.Data.InterruptID, thread)}}, false
	case *protocol.ServerEventLifecycle:
		if !root {
			return nil, false
		}
		switch p.Params.Data.Event {
		case protocol.AgentStatusCompleted:
			return []MinimalFrameVariant{&MinimalStreamEnd{}}, true
		case protocol.AgentStatusFailed:
			msg := "the run failed"
			if p.Params.Data.Error != nil && *p.Params.Data.Error != "" {
				msg = *p.Params.Data.Error
			}
			return []MinimalFrameVariant{&MinimalError{Message: msg}}, true
		case protocol.AgentStatusInterrupted:
			return []MinimalFrameVariant{&MinimalError{Message: fmt.Sprintf("the run is interrupted, waiting for input; it resumes through the protocol's input.respond on thread %s", thread)}}, true
		}
	}
	return nil, false
}

// workflowState is the workflow_state frame of a values event: the
// state's workflow_nodes and workflow_edges, those of their items that
// have the members a node or an edge needs.
func workflowState(values any) *MinimalWorkflowState {
	st := &MinimalWorkflowState{WorkflowNodes: []MinimalWorkflowNode{}, WorkflowEdges: []MinimalWorkflowEdge{}}
	m, _ := values.(map[string]any)
	convert := func(from any, to any) {
		if from == nil {
			return
		}
		if b, err := json.Marshal(from); err == nil {
			_ = json.Unmarshal(b, to)
		}
	}
	if items, ok := m["workflow_nodes"].([]any); ok {
		for _, it := range items {
			var n MinimalWorkflowNode
			convert(it, &n)
			if n.ID != "" {
				st.WorkflowNodes = append(st.WorkflowNodes, n)
			}
		}
	}
	if items, ok := m["workflow_edges"].([]any); ok {
		for _, it := range items {
			var ed MinimalWorkflowEdge
			convert(it, &ed)
			if ed.ID != "" {
				st.WorkflowEdges = append(st.WorkflowEdges, ed)
			}
		}
	}
	return st
}

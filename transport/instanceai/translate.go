package instanceai

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/runtime/cddlrt"
	"github.com/agentstream/agentstream/server"
)

// UserMessageEvent names the custom event a chat message is kept in (its
// payload a userMessage), so that the thread's messages can be rebuilt
// with the user's side; it is not a frame of the event stream.
const UserMessageEvent = "instance-ai.user-message"

// userMessage is the payload of a UserMessageEvent.
type userMessage struct {
	RunID string `json:"runId"`
	Text  string `json:"text"`
}

// unknownRun is the runId of events whose run-start is no longer kept.
const unknownRun = "run-unknown"

// view is what one protocol event is on this wire, made once for all the
// readers of the event (server.Event.View): a frame (with its encoding)
// or a user's message, or neither.
type view struct {
	frame IaEventVariant
	data  []byte // the frame as the stream writes it: id and data lines
	user  *userMessage
	ts    uint64 // the event's timestamp (Unix ms)
}

// viewKey keys this wire's views of events.
type viewKey struct{}

// translator turns a thread's protocol events, read in order, into
// Instance AI events. What it keeps (the run under way, its tool calls,
// what its subagents wrote) is learnt from the frames it makes, so that a
// reader handed a frame another reader made stays in step.
type translator struct {
	thread  string
	runID   string // "" before the first run-start
	root    string // the orchestrator's agentId
	tools   map[string]IaToolCallPayload
	written map[string]*strings.Builder // subagents' text, by agentId
}

func newTranslator(thread string) *translator {
	return &translator{thread: thread, tools: map[string]IaToolCallPayload{}, written: map[string]*strings.Builder{}}
}

// next returns the view of e (nil for an event that is none) and learns
// from it.
func (tr *translator) next(e *server.Event) *view {
	if tr.runID == "" {
		// Its run unknown here (the run-start is no longer kept), the view
		// is this reader's own: readers that know the run must not get
		// run-unknown from it. A view they made teaches this one the run.
		if v, ok := e.Viewed(viewKey{}); ok {
			vv, _ := v.(*view)
			if vv != nil {
				tr.learn(vv.frame)
			}
			return vv
		}
		v := tr.translate(e)
		if v != nil {
			tr.learn(v.frame)
		}
		return v
	}
	v, _ := e.View(viewKey{}, func() any { return tr.translate(e) }).(*view)
	if v != nil {
		tr.learn(v.frame)
	}
	return v
}

// learn keeps what later frames need of f. A reader that joined after
// its run's run-start left the buffer learns the run from the frames
// other readers made, so that the frames it is first to make say the same.
func (tr *translator) learn(f IaEventVariant) {
	if tr.runID == "" && f != nil {
		if run := runOf(f); run != "" && run != unknownRun {
			root, _, _ := strings.Cut(agentOf(f), "/")
			tr.runID, tr.root = run, root
		}
	}
	switch f := f.(type) {
	case *IaRunStart:
		tr.runID, tr.root = f.RunID, f.AgentID
		clear(tr.tools)
		clear(tr.written)
	case *IaToolCall:
		tr.tools[f.Payload.ToolCallID] = f.Payload
	case *IaTextDelta:
		if f.AgentID != tr.root {
			b := tr.written[f.AgentID]
			if b == nil {
				b = &strings.Builder{}
				tr.written[f.AgentID] = b
			}
			b.WriteString(f.Payload.Text)
		}
	case *IaAgentCompleted:
		delete(tr.written, f.AgentID)
	}
}

// agentID is the agentId of namespace ns in the run under way.
func (tr *translator) agentID(ns []string) string {
	root := tr.root
	if root == "" {
		root = "agent-unknown"
	}
	if len(ns) == 0 {
		return root
	}
	return root + "/" + strings.Join(ns, "/")
}

func (tr *translator) run() string {
	if tr.runID == "" {
		return unknownRun
	}
	return tr.runID
}

// translate makes the view of e from what the translator has learnt.
func (tr *translator) translate(e *server.Event) *view {
	if e.Seq == 0 {
		return nil // a notice: the handler reads those itself
	}
	switch e.Channel {
	case channels.Lifecycle, channels.Messages, channels.Tools, channels.Input:
	case channels.Custom:
		switch e.Name {
		case UserMessageEvent, "tasks-update", "status", "thread-title-updated", "filesystem-request":
		default:
			return nil
		}
	default:
		return nil
	}
	e, err := e.WithPayload()
	if err != nil {
		return nil
	}
	v := &view{}
	switch p := e.Payload.(type) {
	case *protocol.ServerEventLifecycle:
		v.ts, v.frame = p.Params.Timestamp, tr.lifecycle(e.Seq, p.Params.Namespace, p.Params.Data)
	case *protocol.ServerEventMessages:
		v.ts, v.frame = p.Params.Timestamp, tr.message(p.Params.Namespace, p.Params.Data)
	case *protocol.ServerEventTools:
		v.ts, v.frame = p.Params.Timestamp, tr.tool(p.Params.Namespace, p.Params.Data)
	case *protocol.ServerEventInputRequested:
		v.ts, v.frame = p.Params.Timestamp, tr.confirmation(p.Params.Namespace, p.Params.Data)
	case *protocol.ServerEventCustom:
		v.ts = p.Params.Timestamp
		v.frame, v.user = tr.custom(e.Name, p.Params.Namespace, p.Params.Data.Payload)
	}
	if v.frame == nil && v.user == nil {
		return nil
	}
	if v.frame != nil {
		b, err := json.Marshal(IaEvent{Value: v.frame})
		if err != nil {
			return nil
		}
		v.data = append(append(append(append([]byte("id: "), strconv.FormatUint(e.Seq, 10)...), "\ndata: "...), b...), "\n\n"...)
	}
	return v
}

func (tr *translator) lifecycle(seq uint64, ns protocol.Namespace, d protocol.LifecycleData) IaEventVariant {
	if len(ns) == 0 {
		switch d.Event {
		case protocol.AgentStatusStarted:
			n := strconv.FormatUint(seq, 10)
			return &IaRunStart{RunID: "run-" + n, AgentID: "agent-" + n, Payload: IaRunStartPayload{MessageID: "msg-" + n}}
		case protocol.AgentStatusCompleted:
			return &IaRunFinish{RunID: tr.run(), AgentID: tr.agentID(nil), Payload: IaRunFinishPayload{Status: IaRunFinishPayloadStatusCompleted}}
		case protocol.AgentStatusFailed:
			if d.Cancelled != nil && *d.Cancelled {
				reason := "user_cancelled"
				return &IaRunFinish{RunID: tr.run(), AgentID: tr.agentID(nil), Payload: IaRunFinishPayload{Status: IaRunFinishPayloadStatusCancelled, Reason: &reason}}
			}
			reason := "the run failed"
			if d.Error != nil && *d.Error != "" {
				reason = *d.Error
			}
			return &IaRunFinish{RunID: tr.run(), AgentID: tr.agentID(nil), Payload: IaRunFinishPayload{Status: IaRunFinishPayloadStatusError, Reason: &reason}}
		}
		return nil // running; interrupted: the run waits for a confirmation
	}
	role := ns[len(ns)-1]
	if d.GraphName != nil && *d.GraphName != "" {
		role = *d.GraphName
	}
	id := tr.agentID(ns)
	switch d.Event {
	case protocol.AgentStatusStarted:
		tools := []string{}
		if d.Cause != nil {
			// A delegating tool call names the subagent's tools, as the
			// seed's delegate tool does.
			if c, ok := d.Cause.Value.(*protocol.LifecycleCauseToolCall); ok {
				if list, ok := tr.tools[c.ToolCallID].Args["tools"].([]any); ok {
					for _, t := range list {
						if s, ok := t.(string); ok {
							tools = append(tools, s)
						}
					}
				}
			}
		}
		return &IaAgentSpawned{RunID: tr.run(), AgentID: id, Payload: IaAgentSpawnedPayload{ParentID: tr.agentID(ns[:len(ns)-1]), Role: role, Tools: tools}}
	case protocol.AgentStatusCompleted, protocol.AgentStatusFailed:
		result := ""
		if b := tr.written[id]; b != nil {
			result = b.String()
		}
		f := &IaAgentCompleted{RunID: tr.run(), AgentID: id, Payload: IaAgentCompletedPayload{Role: role, Result: result}}
		if d.Event == protocol.AgentStatusFailed {
			msg := "the subagent failed"
			if d.Error != nil && *d.Error != "" {
				msg = *d.Error
			}
			f.Payload.Error = &msg
		}
		return f
	}
	return nil
}

func (tr *translator) message(ns protocol.Namespace, d protocol.MessagesData) IaEventVariant {
	switch d := d.Value.(type) {
	case *protocol.ContentBlockDeltaData:
		switch delta := d.Delta.Value.(type) {
		case *protocol.TextDelta:
			if delta.Text != "" {
				return &IaTextDelta{RunID: tr.run(), AgentID: tr.agentID(ns), Payload: IaTextPayload{Text: delta.Text}}
			}
		case *protocol.ReasoningDelta:
			if delta.Reasoning != "" {
				return &IaReasoningDelta{RunID: tr.run(), AgentID: tr.agentID(ns), Payload: IaTextPayload{Text: delta.Reasoning}}
			}
		}
	case *protocol.MessageErrorData:
		return &IaError{RunID: tr.run(), AgentID: tr.agentID(ns), Payload: IaErrorPayload{Content: d.Message}}
	}
	return nil
}

func (tr *translator) tool(ns protocol.Namespace, d protocol.ToolsData) IaEventVariant {
	switch d := d.Value.(type) {
	case *protocol.ToolStartedData:
		return &IaToolCall{RunID: tr.run(), AgentID: tr.agentID(ns), Payload: IaToolCallPayload{ToolCallID: d.ToolCallID, ToolName: d.ToolName, Args: argsOf(d.Input)}}
	case *protocol.ToolFinishedData:
		return &IaToolResult{RunID: tr.run(), AgentID: tr.agentID(ns), Payload: IaToolResultPayload{ToolCallID: d.ToolCallID, Result: d.Output}}
	case *protocol.ToolErrorData:
		return &IaToolError{RunID: tr.run(), AgentID: tr.agentID(ns), Payload: IaToolErrorPayload{ToolCallID: d.ToolCallID, Error: d.Message}}
	}
	return nil
}

// argsOf is a tool's input as the args object the wire carries.
func argsOf(in any) map[string]any {
	switch v := in.(type) {
	case map[string]any:
		return v
	case nil:
		return map[string]any{}
	}
	return map[string]any{"input": in}
}

// RequestID is the requestId of interrupt interruptID of thread: both, so
// that POST /instance-ai/confirm/{requestId} finds the thread on any node.
func RequestID(thread, interruptID string) string { return thread + "~" + interruptID }

// splitRequestID undoes RequestID (a thread id has no "~").
func splitRequestID(id string) (thread, interruptID string, ok bool) {
	thread, interruptID, ok = strings.Cut(id, "~")
	return thread, interruptID, ok && thread != "" && interruptID != ""
}

// confirmation makes the confirmation-request of an interrupt from its
// payload: the seed's own members where it has them, or agentstream's
// built-in assistants' question and tool_call_id, and the tool call's
// name and args as the run's tool-call said them.
func (tr *translator) confirmation(ns protocol.Namespace, d protocol.InputRequestedData) IaEventVariant {
	m, _ := d.Payload.(map[string]any)
	str := func(keys ...string) string {
		for _, k := range keys {
			if s, ok := m[k].(string); ok {
				return s
			}
		}
		return ""
	}
	p := IaConfirmationPayload{RequestID: RequestID(tr.thread, d.InterruptID), ToolCallID: str("toolCallId", "tool_call_id"),
		ToolName: str("toolName", "tool_name"), Severity: IaConfirmationPayloadSeverityInfo, Message: str("message", "question")}
	call := tr.tools[p.ToolCallID]
	if p.ToolName == "" {
		p.ToolName = call.ToolName
	}
	if args, ok := m["args"].(map[string]any); ok {
		p.Args = args
	} else if call.Args != nil {
		p.Args = call.Args
	} else {
		p.Args = map[string]any{}
	}
	if s := IaConfirmationPayloadSeverity(str("severity")); s.Valid() {
		p.Severity = s
	}
	// The rich members, each taken when it has the seed's shape.
	fields := map[string]any{}
	if b, err := json.Marshal(p); err == nil {
		_ = json.Unmarshal(b, &fields)
	}
	for _, k := range []string{"inputType", "questions", "tasks", "introMessage", "credentialRequests", "credentialFlow", "setupRequests", "workflowId", "projectId", "domainAccess"} {
		if v, ok := m[k]; ok {
			fields[k] = v
			if _, ok := decodeAs[IaConfirmationPayload](fields); !ok {
				delete(fields, k)
			}
		}
	}
	if full, ok := decodeAs[IaConfirmationPayload](fields); ok {
		p = full
	}
	return &IaConfirmationRequest{RunID: tr.run(), AgentID: tr.agentID(ns), Payload: p}
}

// decodeAs reads v as a T, strictly (its schema's members only).
func decodeAs[T any](v any) (T, bool) {
	var out T
	b, err := json.Marshal(v)
	return out, err == nil && cddlrt.DecodeStrictJSON(b, &out) == nil
}

// custom makes the frame of a custom event whose name is one of the
// wire's own (its payload checked against the frame's), or reads a chat
// message; a payload of the wrong shape makes nothing.
func (tr *translator) custom(name string, ns protocol.Namespace, payload any) (IaEventVariant, *userMessage) {
	run, agent := tr.run(), tr.agentID(ns)
	switch name {
	case UserMessageEvent:
		if u, ok := decodeAs[userMessage](payload); ok && u.RunID != "" {
			return nil, &u
		}
	case "tasks-update":
		if p, ok := decodeAs[IaTasksUpdatePayload](payload); ok {
			return &IaTasksUpdate{RunID: run, AgentID: agent, Payload: p}, nil
		}
	case "status":
		if p, ok := decodeAs[IaStatusPayload](payload); ok {
			return &IaStatus{RunID: run, AgentID: agent, Payload: p}, nil
		}
	case "thread-title-updated":
		if p, ok := decodeAs[IaThreadTitleUpdatedPayload](payload); ok {
			return &IaThreadTitleUpdated{RunID: run, AgentID: agent, Payload: p}, nil
		}
	case "filesystem-request":
		if p, ok := decodeAs[IaFilesystemPayload](payload); ok {
			return &IaFilesystemRequest{RunID: run, AgentID: agent, Payload: p}, nil
		}
	}
	return nil, nil
}

package instanceai

// conversation rebuilds a thread's messages from its Instance AI events,
// as the seed's buildAgentTreeFromEvents does: per run, the user's message
// and the assistant's, with the run's agent tree.
type conversation struct {
	messages []IaMessage
	runs     map[string]*runState // by runId
	last     *runState            // the latest run
}

// runState is one run being rebuilt.
type runState struct {
	runID     string
	assistant int // index in messages of its assistant message, -1 before its run-start
	user      *IaMessage
	root      string                  // the orchestrator's agentId
	nodes     map[string]*IaAgentNode // by agentId
	kids      map[string][]string     // a node's subagents, in the order spawned
	started   map[string]uint64       // subagents' start times (Unix ms)
}

func newConversation() *conversation {
	return &conversation{runs: map[string]*runState{}}
}

func (c *conversation) run(id string) *runState {
	r := c.runs[id]
	if r == nil {
		r = &runState{runID: id, assistant: -1, nodes: map[string]*IaAgentNode{}, kids: map[string][]string{}, started: map[string]uint64{}}
		c.runs[id] = r
	}
	return r
}

// add takes the next view of the thread's events.
func (c *conversation) add(v *view) {
	if v.user != nil {
		r := c.run(v.user.RunID)
		um := IaMessage{ID: "user-" + v.user.RunID, Role: IaMessageRoleUser, Content: v.user.Text, RunID: v.user.RunID}
		if r.assistant < 0 {
			r.user = &um // placed at the run-start, before the answer
			return
		}
		// After the answer began: before it.
		c.messages = append(c.messages, IaMessage{})
		copy(c.messages[r.assistant+1:], c.messages[r.assistant:])
		c.messages[r.assistant] = um
		for _, o := range c.runs {
			if o.assistant >= r.assistant {
				o.assistant++
			}
		}
		return
	}
	if f, ok := v.frame.(*IaRunStart); ok {
		r := c.run(f.RunID)
		if r.user != nil {
			c.messages = append(c.messages, *r.user)
			r.user = nil
		}
		root := &IaAgentNode{AgentID: f.AgentID, Role: "orchestrator", Status: IaAgentNodeStatusActive, ToolCalls: []IaToolCallState{}, Children: []IaAgentNode{}}
		r.nodes[f.AgentID], r.root = root, f.AgentID
		streaming := true
		c.messages = append(c.messages, IaMessage{ID: f.Payload.MessageID, Role: IaMessageRoleAssistant, RunID: f.RunID, IsStreaming: &streaming})
		r.assistant = len(c.messages) - 1
		c.last = r
		return
	}
	if v.frame == nil {
		return
	}
	r := c.runs[runOf(v.frame)]
	if r == nil || r.assistant < 0 {
		return // its run-start is no longer kept
	}
	msg := &c.messages[r.assistant]
	node := r.nodes[agentOf(v.frame)]
	switch f := v.frame.(type) {
	case *IaTextDelta:
		if node != nil {
			node.TextContent += f.Payload.Text
		}
	case *IaReasoningDelta:
		if node != nil {
			node.Reasoning += f.Payload.Text
		}
	case *IaToolCall:
		if node != nil {
			node.ToolCalls = append(node.ToolCalls, IaToolCallState{ToolCallID: f.Payload.ToolCallID, ToolName: f.Payload.ToolName, Args: f.Payload.Args, IsLoading: true})
		}
	case *IaToolResult:
		if tc := r.toolCall(f.Payload.ToolCallID); tc != nil {
			tc.IsLoading, tc.Result, tc.ConfirmationRequestID = false, f.Payload.Result, nil
		}
	case *IaToolError:
		if tc := r.toolCall(f.Payload.ToolCallID); tc != nil {
			e := f.Payload.Error
			tc.IsLoading, tc.Error, tc.ConfirmationRequestID = false, &e, nil
		}
	case *IaConfirmationRequest:
		if tc := r.toolCall(f.Payload.ToolCallID); tc != nil {
			id := f.Payload.RequestID
			tc.ConfirmationRequestID = &id
		}
	case *IaAgentSpawned:
		r.nodes[f.AgentID] = &IaAgentNode{AgentID: f.AgentID, Role: f.Payload.Role, Status: IaAgentNodeStatusActive, ToolCalls: []IaToolCallState{}, Children: []IaAgentNode{}}
		r.started[f.AgentID] = v.ts
		r.kids[f.Payload.ParentID] = append(r.kids[f.Payload.ParentID], f.AgentID)
	case *IaAgentCompleted:
		if node != nil {
			node.Status = IaAgentNodeStatusCompleted
			if f.Payload.Error != nil {
				node.Status = IaAgentNodeStatusError
			}
		}
	case *IaRunFinish:
		done := false
		msg.IsStreaming = &done
		st := IaAgentNodeStatusCompleted
		switch f.Payload.Status {
		case IaRunFinishPayloadStatusCancelled:
			st = IaAgentNodeStatusCancelled
		case IaRunFinishPayloadStatusError:
			st = IaAgentNodeStatusError
		}
		for _, n := range r.nodes {
			if n.Status == IaAgentNodeStatusActive {
				n.Status = st
			}
		}
	}
}

// tree is the agent tree under agentID, children in the order they were
// spawned.
func (r *runState) tree(agentID string) IaAgentNode {
	n := *r.nodes[agentID]
	n.ToolCalls = append([]IaToolCallState{}, n.ToolCalls...)
	n.Children = []IaAgentNode{}
	for _, c := range r.kids[agentID] {
		n.Children = append(n.Children, r.tree(c))
	}
	return n
}

// toolCall finds a tool call of the run by id in any of its agents.
func (r *runState) toolCall(id string) *IaToolCallState {
	for _, n := range r.nodes {
		for i := range n.ToolCalls {
			if n.ToolCalls[i].ToolCallID == id {
				return &n.ToolCalls[i]
			}
		}
	}
	return nil
}

// result is the thread's messages, with each assistant message's content
// (the orchestrator's text), reasoning and agent tree.
func (c *conversation) result() []IaMessage {
	out := make([]IaMessage, len(c.messages))
	copy(out, c.messages)
	for _, r := range c.runs {
		if r.assistant < 0 {
			continue
		}
		m := &out[r.assistant]
		t := r.tree(r.root)
		m.Content, m.AgentTree = t.TextContent, &t
		reasoning := t.Reasoning
		m.Reasoning = &reasoning
	}
	return out
}

// background lists the latest run's subagents still working, in the
// order they were spawned.
func (c *conversation) background() []IaBackgroundTask {
	out := []IaBackgroundTask{}
	r := c.last
	if r == nil {
		return out
	}
	var walk func(id string)
	walk = func(id string) {
		for _, k := range r.kids[id] {
			if n := r.nodes[k]; n.Status == IaAgentNodeStatusActive {
				out = append(out, IaBackgroundTask{TaskID: k, Role: n.Role, AgentID: k, StartedAt: r.started[k] / 1000})
			}
			walk(k)
		}
	}
	walk(r.root)
	return out
}

// runOf and agentOf read the ids every frame carries.
func runOf(f IaEventVariant) string {
	if g, ok := f.(interface{ GetRunID() string }); ok {
		return g.GetRunID()
	}
	return ""
}

func agentOf(f IaEventVariant) string {
	if g, ok := f.(interface{ GetAgentID() string }); ok {
		return g.GetAgentID()
	}
	return ""
}

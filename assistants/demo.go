package assistants

import (
	"context"
	"encoding/json"

	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
)

// Demo is a scripted multi-agent run that uses every channel:
//
//  0. The state with the question (values), as the run starts.
//  1. The root agent streams a message with a reasoning block, a text block
//     and a tool_call block whose arguments stream with tool-call-delta.
//  2. The `research` tool starts; it runs a subagent in namespace
//     ["researcher"] (lifecycle cause toolCall), which streams its own
//     message and reports progress on custom:progress.
//  3. The tool asks for approval with an interrupt; the answer
//     {"approved": true} finishes the tool, anything else fails it
//     (tool-error).
//  4. The root agent writes values, an update and a checkpoint, and
//     streams its final answer.
func Demo(ctx context.Context, rc *server.RunContext) error {
	delay := tokenDelay(rc)
	question, _, err := userText(rc.Input())
	if err != nil || question == "" {
		question = "What is agentstream?"
	}
	msgs, err := withInput(rc, question, "")
	if err != nil {
		return err
	}
	callID := "call_" + rc.RunID()
	args := map[string]any{"query": question}
	argsJSON, _ := json.Marshal(args)

	// 1. Reasoning, text and a streamed tool call.
	m, err := rc.StartMessage(protocol.MessageRoleAI, "", &protocol.MessageMetadata{Provider: strPtr("agentstream"), Model: strPtr("demo")})
	if err != nil {
		return err
	}
	reasoning := "The user asks a question; I will ask the researcher."
	if _, err := m.StartBlock(&protocol.ReasoningContentBlock{Reasoning: strPtr("")}); err != nil {
		return err
	}
	for _, w := range Words(reasoning) {
		if err := rc.Sleep(ctx, delay); err != nil {
			return err
		}
		if err := m.Delta(&protocol.ReasoningDelta{Reasoning: w}); err != nil {
			return err
		}
	}
	if err := m.FinishBlock(&protocol.ReasoningContentBlock{Reasoning: &reasoning}); err != nil {
		return err
	}
	intro := "Let me look that up. "
	if _, err := m.StartBlock(&protocol.TextContentBlock{Text: ""}); err != nil {
		return err
	}
	for _, w := range Words(intro) {
		if err := m.Delta(&protocol.TextDelta{Text: w}); err != nil {
			return err
		}
	}
	if err := m.FinishBlock(&protocol.TextContentBlock{Text: intro}); err != nil {
		return err
	}
	empty := ""
	if _, err := m.StartBlock(&protocol.ToolCallChunk{ID: &callID, Name: strPtr("research"), Args: &empty}); err != nil {
		return err
	}
	s := string(argsJSON)
	for i := 0; i < len(s); i += 8 {
		if err := rc.Sleep(ctx, delay); err != nil {
			return err
		}
		if err := m.Delta(&protocol.ToolCallDelta{Args: s[i:min(i+8, len(s))]}); err != nil {
			return err
		}
	}
	if err := m.FinishBlock(&protocol.ToolCall{ID: &callID, Name: "research", Args: args}); err != nil {
		return err
	}
	if err := m.Finish(nil); err != nil {
		return err
	}

	// 2. The tool runs a subagent.
	tool, err := rc.StartTool(callID, "research", args)
	if err != nil {
		return err
	}
	sub, err := rc.StartSubagent("researcher", "researcher", &protocol.LifecycleCause{Value: &protocol.LifecycleCauseToolCall{ToolCallID: callID}})
	if err != nil {
		return err
	}
	src := sub.Context()
	for i := 1; i <= 3; i++ {
		if err := src.Custom("progress", map[string]any{"step": i, "of": 3}); err != nil {
			return err
		}
	}
	finding := "agentstream streams agent events to many clients at once."
	if _, err := streamText(ctx, src, finding, delay); err != nil {
		return err
	}
	if err := tool.OutputDelta(finding); err != nil {
		return err
	}
	if err := sub.End(nil); err != nil {
		return err
	}

	// 3. Approval.
	answer, err := rc.Interrupt(ctx, map[string]any{"question": "Use the research result?", "tool_call_id": callID})
	if err != nil {
		return err
	}
	approved := false
	if a, ok := answer.(map[string]any); ok {
		approved, _ = a["approved"].(bool)
	}
	final := "The research was not approved, so I cannot answer."
	if approved {
		if err := tool.Finish(map[string]any{"result": finding}); err != nil {
			return err
		}
		final = "Here is what I found: " + finding
	} else if err := tool.Error("rejected by the user", "rejected"); err != nil {
		return err
	}

	// 4. State, then the final answer.
	if err := rc.Update("agent", map[string]any{"approved": approved}); err != nil {
		return err
	}
	aiID, err := streamText(ctx, rc, final, delay)
	if err != nil {
		return err
	}
	msgs = append(msgs, map[string]any{"type": "ai", "content": final, "id": aiID})
	if err := rc.Values(map[string]any{"messages": msgs, "approved": approved}); err != nil {
		return err
	}
	_, err = rc.Checkpoint(protocol.CheckpointSourceLoop, int64(len(msgs)-1))
	return err
}

package client

import (
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/agentstream/agentstream/protocol"
)

// Message is a message assembled from its events.
type Message struct {
	ID        string
	Role      protocol.MessageRole
	Namespace []string
	Node      string
	Blocks    []*Block
	// Done is set by message-finish, Error by message-error.
	Done  bool
	Error string
}

// Text is the message's text blocks, joined.
func (m *Message) Text() string {
	var b strings.Builder
	for _, bl := range m.Blocks {
		if bl.Type == "text" {
			b.WriteString(bl.Text)
		}
	}
	return b.String()
}

// Reasoning is the message's reasoning blocks, joined.
func (m *Message) Reasoning() string {
	var b strings.Builder
	for _, bl := range m.Blocks {
		if bl.Type == "reasoning" {
			b.WriteString(bl.Text)
		}
	}
	return b.String()
}

// ToolCalls are the message's tool-call blocks.
func (m *Message) ToolCalls() []*Block {
	var out []*Block
	for _, bl := range m.Blocks {
		if bl.Type == "tool_call" || bl.Type == "tool_call_chunk" {
			out = append(out, bl)
		}
	}
	return out
}

// Block is one content block of a message, assembled from its deltas.
type Block struct {
	Index int
	// Type is the block's type: text, reasoning, tool_call, ... as the
	// protocol names it.
	Type string
	// Text is the text of a text block, or the reasoning of a reasoning
	// block.
	Text string
	// ToolCallID and ToolName name a tool call; Args is its arguments as
	// streamed (JSON text), and FinalArgs as the block's end gave them.
	ToolCallID, ToolName string
	Args                 string
	FinalArgs            map[string]any
	// Final is the block as its content-block-finish gave it.
	Final protocol.FinalizedContentBlockVariant
	Done  bool
}

// AgentNode is one namespace of the agent tree and its lifecycle status.
type AgentNode struct {
	Namespace []string
	Status    protocol.AgentStatus
	Graph     string
	Error     string
}

// Interrupt is an interrupt waiting for an answer (input.requested).
type Interrupt struct {
	ID        string
	Namespace []string
	Payload   any
}

// ToolRun is a tool's execution as the tools channel tells it.
type ToolRun struct {
	ID, Name  string
	Namespace []string
	Input     any
	Output    any
	Streamed  string // tool-output-delta text, joined
	Error     string
	Done      bool
}

// Assembler builds, from a thread's events, what a user reads: messages
// per namespace, the latest values, the agent tree, tool runs and pending
// interrupts. Apply every event in order; the accessors may be called at
// any time, from any goroutine.
type Assembler struct {
	mu         sync.Mutex
	messages   map[string][]*Message // by namespace key
	current    map[string]*Message   // the message in progress, by namespace and node
	values     map[string]any
	tree       map[string]*AgentNode
	interrupts []*Interrupt
	tools      map[string]*ToolRun
	toolOrder  []string
}

// NewAssembler returns an empty Assembler.
func NewAssembler() *Assembler {
	return &Assembler{messages: map[string][]*Message{}, current: map[string]*Message{}, values: map[string]any{},
		tree: map[string]*AgentNode{}, tools: map[string]*ToolRun{}}
}

func nsKey(ns []string) string { return strings.Join(ns, "\x00") }

// Apply adds an event (a typed event of this client, of transport/inproc,
// or decoded from the wire).
func (a *Assembler) Apply(v protocol.ServerEventVariant) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch e := v.(type) {
	case *protocol.ServerEventMessages:
		node := ""
		if e.Params.Node != nil {
			node = *e.Params.Node
		}
		a.message(e.Params.Namespace, node, e.Params.Data.Value)
	case *protocol.ServerEventValues:
		a.values[nsKey(e.Params.Namespace)] = e.Params.Data
	case *protocol.ServerEventLifecycle:
		k := nsKey(e.Params.Namespace)
		n := a.tree[k]
		if n == nil {
			n = &AgentNode{Namespace: slices.Clone(e.Params.Namespace)}
			a.tree[k] = n
		}
		n.Status = e.Params.Data.Event
		if g := e.Params.Data.GraphName; g != nil {
			n.Graph = *g
		}
		n.Error = ""
		if e.Params.Data.Error != nil {
			n.Error = *e.Params.Data.Error
		}
		if len(e.Params.Namespace) == 0 && (n.Status == protocol.AgentStatusCompleted || n.Status == protocol.AgentStatusFailed) {
			a.interrupts = nil // the run ended: nothing waits any more
		}
	case *protocol.ServerEventInputRequested:
		a.interrupts = append(a.interrupts, &Interrupt{ID: e.Params.Data.InterruptID, Namespace: slices.Clone(e.Params.Namespace), Payload: e.Params.Data.Payload})
	case *protocol.ServerEventInputAnswered:
		a.interrupts = slices.DeleteFunc(a.interrupts, func(in *Interrupt) bool { return slices.Contains(e.Params.Data.InterruptIds, in.ID) })
	case *protocol.ServerEventTools:
		a.tool(e.Params.Namespace, e.Params.Data.Value)
	}
}

func (a *Assembler) message(ns []string, node string, d protocol.MessagesDataVariant) {
	k := nsKey(ns)
	ck := k + "\x01" + node
	m := a.current[ck]
	switch d := d.(type) {
	case *protocol.MessageStartData:
		m = &Message{ID: d.ID, Role: d.Role, Namespace: slices.Clone(ns), Node: node}
		a.current[ck] = m
		a.messages[k] = append(a.messages[k], m)
	case *protocol.ContentBlockStartData:
		if m == nil {
			return
		}
		m.block(int(d.Index)).set(d.Content.Value)
	case *protocol.ContentBlockDeltaData:
		if m == nil {
			return
		}
		b := m.block(int(d.Index))
		switch x := d.Delta.Value.(type) {
		case *protocol.TextDelta:
			if b.Type == "" {
				b.Type = "text"
			}
			b.Text += x.Text
		case *protocol.ReasoningDelta:
			if b.Type == "" {
				b.Type = "reasoning"
			}
			b.Text += x.Reasoning
		case *protocol.ToolCallDelta:
			b.Args += x.Args
		case *protocol.BlockDelta:
			if s, ok := x.Fields.Extra["args"].(string); ok {
				b.Args += s
			}
		}
	case *protocol.ContentBlockFinishData:
		if m == nil {
			return
		}
		b := m.block(int(d.Index))
		b.Done, b.Final = true, d.Content.Value
		b.set(d.Content.Value)
	case *protocol.MessageFinishData:
		if m != nil {
			m.Done = true
			delete(a.current, ck)
		}
	case *protocol.MessageErrorData:
		if m != nil {
			m.Done, m.Error = true, d.Message
			delete(a.current, ck)
		}
	}
}

// set takes what a content block (its start, or its final form) says.
func (b *Block) set(content any) {
	switch c := content.(type) {
	case *protocol.TextContentBlock:
		b.Type, b.Text = "text", c.Text
	case *protocol.ReasoningContentBlock:
		b.Type = "reasoning"
		if c.Reasoning != nil {
			b.Text = *c.Reasoning
		}
	case *protocol.ToolCallChunk:
		b.Type = "tool_call"
		if c.ID != nil {
			b.ToolCallID = *c.ID
		}
		if c.Name != nil {
			b.ToolName = *c.Name
		}
		if c.Args != nil {
			b.Args = *c.Args
		}
	case *protocol.ToolCall:
		b.Type, b.ToolName, b.FinalArgs = "tool_call", c.Name, c.Args
		if c.ID != nil {
			b.ToolCallID = *c.ID
		}
	case interface{ Type() string }: // another kind of block, by its "type"
		if c != nil {
			b.Type = c.Type()
		}
	}
}

func (m *Message) block(i int) *Block {
	for _, b := range m.Blocks {
		if b.Index == i {
			return b
		}
	}
	b := &Block{Index: i}
	m.Blocks = append(m.Blocks, b)
	sort.SliceStable(m.Blocks, func(x, y int) bool { return m.Blocks[x].Index < m.Blocks[y].Index })
	return b
}

func (a *Assembler) tool(ns []string, d protocol.ToolsDataVariant) {
	get := func(id string) *ToolRun {
		t := a.tools[id]
		if t == nil {
			t = &ToolRun{ID: id, Namespace: slices.Clone(ns)}
			a.tools[id] = t
			a.toolOrder = append(a.toolOrder, id)
		}
		return t
	}
	switch d := d.(type) {
	case *protocol.ToolStartedData:
		t := get(d.ToolCallID)
		t.Name, t.Input = d.ToolName, d.Input
	case *protocol.ToolOutputDeltaData:
		get(d.ToolCallID).Streamed += d.Delta
	case *protocol.ToolFinishedData:
		t := get(d.ToolCallID)
		t.Output, t.Done = d.Output, true
	case *protocol.ToolErrorData:
		t := get(d.ToolCallID)
		t.Error, t.Done = d.Message, true
	}
}

// Messages returns the messages of namespace ns (nil or [] for the root),
// in the order they started. They are copies: later events do not change
// them.
func (a *Assembler) Messages(ns []string) []Message {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []Message
	for _, m := range a.messages[nsKey(ns)] {
		c := *m
		c.Blocks = make([]*Block, len(m.Blocks))
		for i, b := range m.Blocks {
			bc := *b
			c.Blocks[i] = &bc
		}
		out = append(out, c)
	}
	return out
}

// Values returns the latest values of namespace ns (nil: none yet).
func (a *Assembler) Values(ns []string) any {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.values[nsKey(ns)]
}

// Tree returns the agent tree: every namespace seen, with its status,
// sorted by namespace.
func (a *Assembler) Tree() []AgentNode {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]AgentNode, 0, len(a.tree))
	for _, n := range a.tree {
		out = append(out, *n)
	}
	sort.Slice(out, func(i, j int) bool { return nsKey(out[i].Namespace) < nsKey(out[j].Namespace) })
	return out
}

// Interrupts returns the interrupts waiting for an answer, oldest first.
func (a *Assembler) Interrupts() []Interrupt {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Interrupt, len(a.interrupts))
	for i, in := range a.interrupts {
		out[i] = *in
	}
	return out
}

// Tools returns the tool runs, in the order they started.
func (a *Assembler) Tools() []ToolRun {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]ToolRun, 0, len(a.toolOrder))
	for _, id := range a.toolOrder {
		out = append(out, *a.tools[id])
	}
	return out
}

package client

import (
	"context"
	"iter"

	"github.com/agentstream/agentstream/protocol"
)

// MessageUpdate is one step of a message as it streams
// (Subscription.Messages).
type MessageUpdate struct {
	// Message is the message so far (a copy: later steps do not change
	// it).
	Message Message
	// Delta is the text this step added ("" on the last step).
	Delta string
	// Done is set on the message's last step: it finished, or ended with
	// an error (Message.Error says why, such as a cancelled run).
	Done bool
}

// Messages reads the subscription until the end of the run that ends
// after sequence number after (Started.AppliedThroughSeq for the run this
// program started, Thread.Head for the run under way now or the next),
// yielding a step for each piece of text and one when each message ends,
// in every namespace; what came at or before after is skipped. The
// subscription needs the messages and lifecycle channels. It stops after
// the run's end, at the first error (yielded), or when the loop breaks.
//
//	for u, err := range sub.Messages(ctx, started.AppliedThroughSeq) {
//		if err != nil { return err }
//		fmt.Print(u.Delta)
//		if u.Done { fmt.Println() }
//	}
func (s *Subscription) Messages(ctx context.Context, after uint64) iter.Seq2[MessageUpdate, error] {
	return func(yield func(MessageUpdate, error) bool) {
		a := NewAssembler()
		for {
			e, err := s.Next(ctx)
			if err != nil {
				yield(MessageUpdate{}, err)
				return
			}
			if e.Seq <= after || e.Payload == nil {
				continue
			}
			a.Apply(e.Payload)
			if m, ok := e.Payload.(*protocol.ServerEventMessages); ok {
				node := ""
				if m.Params.Node != nil {
					node = *m.Params.Node
				}
				var u MessageUpdate
				switch m.Params.Data.Value.(type) {
				case *protocol.ContentBlockDeltaData:
					if u.Delta = e.TextDelta(); u.Delta == "" {
						continue
					}
				case *protocol.MessageFinishData, *protocol.MessageErrorData:
					u.Done = true
				default:
					continue
				}
				var ok bool
				if u.Message, ok = a.latest(m.Params.Namespace, node); ok && !yield(u, nil) {
					return
				}
			}
			if e.RunEnd() != "" {
				return
			}
		}
	}
}

// latest is a copy of the newest message of namespace ns and node.
func (a *Assembler) latest(ns []string, node string) (Message, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ms := a.messages[nsKey(ns)]
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].Node == node {
			c := *ms[i]
			c.Blocks = make([]*Block, len(ms[i].Blocks))
			for j, b := range ms[i].Blocks {
				bc := *b
				c.Blocks[j] = &bc
			}
			return c, true
		}
	}
	return Message{}, false
}

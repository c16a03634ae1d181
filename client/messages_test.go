package client

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/internal/testkit/servetest"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/transport"
	"github.com/stretchr/testify/require"
)

// TestMessagesStreamsText: Subscription.Messages yields a run's text as
// it streams and each message's end, skips an earlier run on the thread,
// and ends with the run; a cancelled run's message ends with its error.
func TestMessagesStreamsText(t *testing.T) {
	ts := servetest.Start(t, transport.Options{})
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c := dial(t, ts, Options{Transport: tr})
			th := c.Thread("messages-" + string(tr))
			sub, err := th.Subscribe(ctx, Filter{Channels: []string{"messages", "lifecycle"}})
			require.NoError(t, err)
			defer sub.Close()
			run := func(text string, delay float64) *Started {
				s, err := th.Run.Start(ctx, protocol.RunStartParams{AssistantID: "echo", Input: echoInput(text), Config: map[string]any{"token_delay_ms": delay}})
				require.NoError(t, err)
				return s
			}
			first := run("an earlier run", 0)
			for range sub.Messages(ctx, first.AppliedThroughSeq) {
			}
			second := run("the words of this run", 5)
			var got strings.Builder
			var ends []MessageUpdate
			for u, err := range sub.Messages(ctx, second.AppliedThroughSeq) {
				require.NoError(t, err)
				got.WriteString(u.Delta)
				if u.Done {
					ends = append(ends, u)
				}
			}
			require.Equal(t, "the words of this run", got.String(), "the text as it streamed, this run's only")
			require.Len(t, ends, 1)
			require.Equal(t, "the words of this run", ends[0].Message.Text())
			require.Empty(t, ends[0].Message.Error)

			third := run(strings.Repeat("word ", 100), 50)
			n, ended := 0, false
			for u, err := range sub.Messages(ctx, third.AppliedThroughSeq) {
				require.NoError(t, err)
				if n++; n == 3 {
					_, err := th.Run.Cancel(ctx, protocol.RunCancelParams{})
					require.NoError(t, err)
				}
				if u.Done {
					ended = true
					require.Contains(t, u.Message.Error, "cancelled", "the cancelled run's message ends with its error")
					require.NotEmpty(t, u.Message.Text())
				}
			}
			require.True(t, ended, "the cancelled message ended")
		})
	}
}

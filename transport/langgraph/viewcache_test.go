package langgraph

import (
	"fmt"
	"testing"

	"github.com/agentstream/agentstream/server"
	"github.com/stretchr/testify/require"
)

func valuesEvent(t *testing.T, id string, seq int) *server.Event {
	t.Helper()
	e, err := server.DecodeEvent(fmt.Appendf(nil, `{"type":"event","event_id":"%s","seq":%d,"method":"values","params":{"namespace":[],"timestamp":1,"data":{"n":%d}}}`, id, seq, seq))
	require.NoError(t, err)
	return e
}

// TestViewCacheSharesReplayedEvents: two copies of one event (as two
// replays make them) get one view; another event, or the same seq of
// another incarnation of the thread, its own; the cache stays within its
// bytes, the oldest views going first.
func TestViewCacheSharesReplayedEvents(t *testing.T) {
	c := newViewCache(4096)
	a1, a2 := valuesEvent(t, "ep1-1", 1), valuesEvent(t, "ep1-1", 1)
	require.NotSame(t, a1, a2)
	v1, v2 := c.get("t", a1).(*view), c.get("t", a2).(*view)
	require.Same(t, v1, v2, "one decoding for both copies")
	require.Contains(t, string(v1.frame), `event: values`)
	require.NotSame(t, v1, c.get("t", valuesEvent(t, "ep2-1", 1)), "another epoch's seq 1 is another event")
	require.NotSame(t, v1, c.get("u", a1), "another thread's")
	for i := 2; i < 200; i++ {
		c.get("t", valuesEvent(t, fmt.Sprintf("ep1-%d", i), i))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	require.LessOrEqual(t, c.bytes, 4096)
	require.Len(t, c.m, len(c.fifo))
	_, kept := c.m[viewAt{"t", "ep1-1"}]
	require.False(t, kept, "the oldest went first")
}

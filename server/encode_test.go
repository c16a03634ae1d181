package server_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/stream"
	"github.com/stretchr/testify/require"
)

// requireGeneratedJSON checks that the event's JSON, written by hand when
// it was published, is what the generated types make of its payload.
func requireGeneratedJSON(t *testing.T, e *server.Event) {
	t.Helper()
	want, err := json.Marshal(protocol.ServerEvent{Value: e.Payload})
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(e.JSON()), "%s", e.Method)
	var round protocol.ServerEvent
	require.NoError(t, json.Unmarshal(e.JSON(), &round), "the generated decoder reads it: %s", e.JSON())
	if e.Seq == 0 {
		return // a notice: never stored
	}
	// What another node makes of it (a stored or published event).
	d, err := server.DecodeEvent(e.JSON())
	require.NoError(t, err)
	require.Equal(t, e.Seq, d.Seq)
	require.Equal(t, e.EventID(), d.EventID())
	require.Equal(t, e.Method, d.Method)
	require.Equal(t, e.Channel, d.Channel)
	require.Equal(t, e.Name, d.Name)
	require.Equal(t, len(e.Namespace), len(d.Namespace))
	for i := range e.Namespace {
		require.Equal(t, e.Namespace[i], d.Namespace[i])
	}
}

// ownJSON is a payload that writes its own JSON (server.JSONAppender).
type ownJSON struct {
	S string `json:"s"`
	N int    `json:"n"`
}

func (o ownJSON) AppendJSON(b []byte) []byte {
	b = append(b, `{"s":`...)
	b = stream.AppendJSONString(b, o.S)
	b = append(b, `,"n":`...)
	b = strconv.AppendInt(b, int64(o.N), 10)
	return append(b, '}')
}

// TestEncodeEventJSONMatchesTheGeneratedTypes publishes every kind of
// event, with names, nodes, namespaces and payloads that need escaping,
// and compares each one's JSON with the generated types' encoding.
func TestEncodeEventJSONMatchesTheGeneratedTypes(t *testing.T) {
	s := newServer(t, server.Config{})
	tricky := "a<b>&\"c\"\\ \u2028é\x01"
	s.Register("everything", server.AssistantFunc(func(ctx context.Context, rc *server.RunContext) error {
		sa, err := rc.StartSubagent(tricky, "graph<&>", nil)
		if err != nil {
			return err
		}
		sub := sa.Context().WithNode(tricky)
		if err := sub.Custom(tricky, map[string]any{tricky: []any{1.5, nil, true, tricky}}); err != nil {
			return err
		}
		if err := sub.Custom(tricky, ownJSON{S: tricky, N: -12}); err != nil {
			return err
		}
		if err := sub.Custom("", nil); err != nil {
			return err
		}
		if err := sub.Task(map[string]any{"id": tricky}); err != nil {
			return err
		}
		if err := sub.Update(tricky, map[string]any{"k": tricky}); err != nil {
			return err
		}
		tc, err := sub.StartTool("call<1>", tricky, map[string]any{"q": tricky})
		if err != nil {
			return err
		}
		if err := tc.OutputDelta(tricky); err != nil {
			return err
		}
		if err := tc.Finish(tricky); err != nil {
			return err
		}
		if err := sa.End(nil); err != nil {
			return err
		}
		if err := rc.Values(map[string]any{"v": tricky}); err != nil {
			return err
		}
		_, err = rc.Checkpoint(protocol.CheckpointSourceLoop, 1)
		return err
	}))
	sub, _, _ := s.Subscribe("t", all, nil)
	defer sub.Close()
	kinds := map[string]bool{}
	check := func(es []*server.Event) {
		for _, e := range es {
			requireGeneratedJSON(t, e)
			kinds[e.Method] = true
		}
	}
	start(t, s, "t", "everything", nil)
	check(collect(t, sub, rootEnded))
	start(t, s, "t", "echo", userInput(tricky))
	check(collect(t, sub, rootEnded))
	start(t, s, "t", "firehose", map[string]any{"count": float64(3)})
	check(collect(t, sub, rootEnded))
	start(t, s, "t", "demo", userInput("What is it?"))
	es := collect(t, sub, func(e *server.Event) bool { st, _ := lifecycle(e); return st == protocol.AgentStatusInterrupted })
	check(es)
	req := es[len(es)-2].Payload.(*protocol.ServerEventInputRequested).Params.Data
	do(t, s, "t", &protocol.ClientCommandInputRespond{Params: protocol.InputRespondParams{Value: &protocol.InputRespondOne{
		Namespace: []string{}, InterruptID: req.InterruptID, Response: map[string]any{"approved": true}}}})
	check(collect(t, sub, rootEnded))
	// The notices: a missed-events one (from a cursor of another epoch)
	// and the values snapshot.
	late, _, err := s.Subscribe("t", all, &server.Cursor{Epoch: "old", Seq: 1})
	require.NoError(t, err)
	defer late.Close()
	for range 2 {
		e, ok, _ := late.TryNext()
		require.True(t, ok)
		check([]*server.Event{e})
	}
	for _, m := range []string{"lifecycle", "messages", "tools", "input.requested", "input.answered", "values", "updates", "checkpoints", "custom", "tasks", "events.missed"} {
		require.True(t, kinds[m], "no %s event was checked", m)
	}
}

// TestEventViewIsMadeOncePerKey: the readers of one event share the view
// each wire makes of it: made once under a key however many readers ask
// at once, and apart for another key.
func TestEventViewIsMadeOncePerKey(t *testing.T) {
	type keyA struct{}
	type keyB struct{}
	e, err := server.DecodeEvent([]byte(`{"type":"event","event_id":"e-1","seq":1,"method":"custom","params":{"namespace":[],"timestamp":1,"data":{"name":"x","payload":1}}}`))
	require.NoError(t, err)
	var made atomic.Int32
	var wg sync.WaitGroup
	got := make([]any, 16)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = e.View(keyA{}, func() any { made.Add(1); return new(int) })
		}()
	}
	wg.Wait()
	for _, v := range got {
		require.Same(t, got[0].(*int), v.(*int), "one view for every reader")
	}
	require.LessOrEqual(t, made.Load(), int32(16))
	require.Same(t, got[0].(*int), e.View(keyA{}, func() any { t.Fatal("made again"); return nil }).(*int))
	require.Equal(t, "b", e.View(keyB{}, func() any { return "b" }), "another key, another view")
	require.Same(t, got[0].(*int), e.View(keyA{}, func() any { return nil }).(*int))
}

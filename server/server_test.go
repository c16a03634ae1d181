package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/internal/testkit/servetest"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/stretchr/testify/require"
)

func TestEchoStreamsWordByWordThenStateAndCompletes(t *testing.T) {
	s := newServer(t, server.Config{})
	sub, _, err := s.Subscribe("t1", all, nil) // before the thread has a run
	require.NoError(t, err)
	defer sub.Close()
	runID := start(t, s, "t1", "echo", userInput("Hello  big world"))
	es := collect(t, sub, rootEnded)
	require.Equal(t, "values[]", describe(es[0]), "the current state first")
	require.Empty(t, es[0].Payload.(*protocol.ServerEventValues).Params.Data, "empty, as nothing has set it yet")
	es = es[1:]
	require.Equal(t, []string{
		"lifecycle[] started", "lifecycle[] running", "values[]", "checkpoints[]",
		"messages[] message-start ai", "messages[] content-block-start 0",
		"messages[] content-block-delta 0", "messages[] content-block-delta 0", "messages[] content-block-delta 0",
		"messages[] content-block-finish 0", "messages[] message-finish",
		"updates[]", "values[]", "checkpoints[]", "lifecycle[] completed",
	}, describeAll(es))
	require.Equal(t, "Hello  big world", text(es))
	for i, e := range es {
		require.Equal(t, uint64(i+1), e.Seq, "seq starts at 1 and never skips")
		require.Equal(t, e.EventID(), string(mustField(t, e.JSON(), "event_id")))
	}
	// The state as the run starts holds the question; message events carry
	// the run id, and the values hold LangChain messages.
	first := es[2].Payload.(*protocol.ServerEventValues).Params.Data.(map[string]any)["messages"].([]any)
	require.Len(t, first, 1)
	require.Equal(t, "human", first[0].(map[string]any)["type"])
	start := es[4].Payload.(*protocol.ServerEventMessages).Params.Data.Value.(*protocol.MessageStartData)
	require.Equal(t, runID, start.Extra["run_id"])
	vals := es[12].Payload.(*protocol.ServerEventValues).Params.Data.(map[string]any)
	msgs := vals["messages"].([]any)
	require.Equal(t, "human", msgs[0].(map[string]any)["type"])
	require.Equal(t, "ai", msgs[1].(map[string]any)["type"])
	require.Equal(t, "Hello  big world", msgs[1].(map[string]any)["content"])
	require.Equal(t, start.ID, msgs[1].(map[string]any)["id"])
}

func mustField(t *testing.T, b []byte, k string) string {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	v, _ := m[k].(string)
	return v
}

func TestUnknownAssistantIsInvalidArgument(t *testing.T) {
	s := newServer(t, server.Config{})
	_, e := tryDo(s, "t", &protocol.ClientCommandRunStart{Params: protocol.RunStartParams{AssistantID: "nope", Input: nil}})
	require.NotNil(t, e)
	require.Equal(t, protocol.ErrorCodeInvalidArgument, e.Code)
	require.Contains(t, e.Message, `unknown assistant "nope"`)
	require.False(t, servetest.HasThread(t, s, "t"), "a refused run.start creates nothing")
}

func TestAppliedThroughSeq(t *testing.T) {
	s := newServer(t, server.Config{})
	sub, _, _ := s.Subscribe("t", all, nil)
	defer sub.Close()
	resp := do(t, s, "t", &protocol.ClientCommandRunStart{Params: protocol.RunStartParams{AssistantID: "echo", Input: userInput("a b")}})
	require.Equal(t, uint64(0), *resp.Meta.AppliedThroughSeq, "nothing was published before the run")
	es := collect(t, sub, rootEnded)
	resp = do(t, s, "t", &protocol.ClientCommandStateGet{Params: protocol.StateGetParams{Namespace: []string{}}})
	require.Equal(t, es[len(es)-1].Seq, *resp.Meta.AppliedThroughSeq)
}

// TestReplayMeetsLiveWithoutGapOrDuplicate subscribes with cursors at
// random points while a run publishes fast: every subscriber sees each
// event after its cursor exactly once, in order.
func TestReplayMeetsLiveWithoutGapOrDuplicate(t *testing.T) {
	s := newServer(t, server.Config{})
	const n = 3000
	start(t, s, "t", "firehose", map[string]any{"count": float64(n), "size": float64(80)})
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cursor := s.LastSeq("t")
			sub, _, err := s.Subscribe("t", channels.Filter{Channels: []string{"custom:firehose"}, Depth: channels.Unlimited}, server.SeqCursor(cursor))
			if err != nil {
				t.Error(err)
				return
			}
			defer sub.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			want := cursor + 1
			// Events 1 and 2 are lifecycle; custom events are 3..n+2.
			if want < 3 {
				want = 3
			}
			for want <= n+2 {
				e, err := sub.Next(ctx)
				if err != nil {
					t.Errorf("cursor %d: waiting for %d: %v", cursor, want, err)
					return
				}
				if e.Seq != want {
					t.Errorf("cursor %d: got seq %d, want %d", cursor, e.Seq, want)
					return
				}
				want++
			}
		}()
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
}

func TestEvictionAndMissedEventsNotice(t *testing.T) {
	s := newServer(t, server.Config{BufferEvents: 10})
	first, _, _ := s.Subscribe("t", all, nil)
	defer first.Close()
	start(t, s, "t", "firehose", map[string]any{"count": float64(40)})
	collect(t, first, rootEnded) // 2 lifecycle + 40 custom + 1 lifecycle = 43 events
	require.Equal(t, 10, server.BufferedEvents(s, "t"))
	sub, replayed, err := s.Subscribe("t", all, server.SeqCursor(5))
	require.NoError(t, err)
	defer sub.Close()
	require.Equal(t, 10, replayed)
	e, _, _ := sub.TryNext()
	require.Equal(t, protocol.ServerEventEventsMissedMethodValue, e.Method)
	notice := e.Payload.(*protocol.ServerEventEventsMissed).Params.Data
	require.NotNil(t, notice.Epoch)
	require.Equal(t, protocol.EventsMissedData{Since: 5, FirstAvailableSeq: 34, Missed: 28, Epoch: notice.Epoch}, notice, "no reset: the cursor is of this stream")
	require.Equal(t, uint64(0), e.Seq, "the notice is not part of the stream")
	require.Empty(t, e.EventID())
	e, _, _ = sub.TryNext()
	require.Equal(t, protocol.ServerEventValuesMethodValue, e.Method, "then the current state")
	require.Equal(t, uint64(0), e.Seq)
	var got []uint64
	for {
		e, ok, _ := sub.TryNext()
		if !ok {
			break
		}
		got = append(got, e.Seq)
		require.Equal(t, fmt.Sprintf("%s-%d", *notice.Epoch, e.Seq), e.EventID(), "event ids are EPOCH-SEQ")
	}
	require.Equal(t, []uint64{34, 35, 36, 37, 38, 39, 40, 41, 42, 43}, got)

	// A cursor still covered by the buffer gets no notice.
	sub2, _, _ := s.Subscribe("t", all, server.SeqCursor(40))
	defer sub2.Close()
	e, _, _ = sub2.TryNext()
	require.Equal(t, protocol.ServerEventValuesMethodValue, e.Method, "the current state")
	e, _, _ = sub2.TryNext()
	require.Equal(t, uint64(41), e.Seq)
}

func TestBufferCapsByBytes(t *testing.T) {
	s := newServer(t, server.Config{BufferBytes: 4000})
	sub, _, _ := s.Subscribe("t", all, nil)
	defer sub.Close()
	start(t, s, "t", "firehose", map[string]any{"count": float64(50), "size": float64(300)})
	collect(t, sub, rootEnded)
	n := server.BufferedEvents(s, "t")
	require.Greater(t, n, 5)
	require.Less(t, n, 15, "about 4000/300 events fit")
}

func TestSlowConsumerIsCutOffAndResumesWithoutLoss(t *testing.T) {
	s := newServer(t, server.Config{QueueBytes: 2000})
	slow, _, _ := s.Subscribe("t", channels.Filter{Channels: []string{"custom"}, Depth: channels.Unlimited}, nil)
	defer slow.Close()
	watcher, _, _ := s.Subscribe("t", channels.Filter{Channels: []string{"lifecycle"}, Depth: channels.Unlimited}, nil)
	defer watcher.Close()
	start(t, s, "t", "firehose", map[string]any{"count": float64(200), "size": float64(100)})
	collect(t, watcher, rootEnded) // the publisher was never held up by the slow one
	require.True(t, slow.Done())
	var last uint64
	var err error
	for {
		var e *server.Event
		var ok bool
		e, ok, err = slow.TryNext()
		if !ok {
			break
		}
		last = e.Seq
	}
	var sce *server.SlowConsumerError
	require.ErrorAs(t, err, &sce)
	require.Equal(t, last, sce.LastSeq, "the error names the last event it read")
	require.Equal(t, uint64(1), s.Metrics().SlowConsumers)
	// Coming back with that cursor loses nothing: the replay, larger than
	// the queue, is read from the log a part at a time as the reader
	// makes room, with no cut.
	next := sce.LastSeq + 1
	again, _, err := s.Subscribe("t", channels.Filter{Channels: []string{"custom"}, Depth: channels.Unlimited}, server.SeqCursor(sce.LastSeq))
	require.NoError(t, err)
	defer again.Close()
	for next < 203 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		e, err := again.Next(ctx)
		cancel()
		require.NoError(t, err, "after %d", next-1)
		require.Equal(t, next, e.Seq)
		next++
	}
	require.Greater(t, s.Metrics().ReplayRefills, uint64(2), "in parts")
	require.False(t, again.Done())
	require.Equal(t, uint64(203), next, "custom events run from 3 to 202")
}

func TestRunCancelIsIdempotent(t *testing.T) {
	s := newServer(t, server.Config{})
	sub, _, _ := s.Subscribe("t", all, nil)
	defer sub.Close()
	runID := start(t, s, "t", "firehose", map[string]any{"count": float64(1_000_000), "rate": float64(200)})
	resp := do(t, s, "t", &protocol.ClientCommandRunCancel{Params: protocol.RunCancelParams{RunID: &runID}})
	require.True(t, resp.Result.(protocol.RunCancelResult).Cancelled)
	es := collect(t, sub, rootEnded)
	end := es[len(es)-1].Payload.(*protocol.ServerEventLifecycle).Params.Data
	require.Equal(t, protocol.AgentStatusFailed, end.Event)
	require.True(t, *end.Cancelled)
	require.Equal(t, "run cancelled", *end.Error)
	// Again, and with no run: no-ops.
	resp = do(t, s, "t", &protocol.ClientCommandRunCancel{Params: protocol.RunCancelParams{RunID: &runID}})
	require.False(t, resp.Result.(protocol.RunCancelResult).Cancelled)
	resp = do(t, s, "other", &protocol.ClientCommandRunCancel{})
	require.False(t, resp.Result.(protocol.RunCancelResult).Cancelled)
}

// TestCancelRaces cancels runs at random moments, concurrently with their
// end: every run ends exactly once and no event follows its end.
func TestCancelRaces(t *testing.T) {
	s := newServer(t, server.Config{})
	for i := 0; i < 30; i++ {
		thread := fmt.Sprint("race", i)
		sub, _, _ := s.Subscribe(thread, all, nil)
		start(t, s, thread, "firehose", map[string]any{"count": float64(50)})
		var wg sync.WaitGroup
		for j := 0; j < 3; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = tryDo(s, thread, &protocol.ClientCommandRunCancel{})
			}()
		}
		wg.Wait()
		es := collect(t, sub, rootEnded)
		ends := 0
		for _, e := range es {
			if rootEnded(e) {
				ends++
			}
		}
		require.Equal(t, 1, ends)
		time.Sleep(5 * time.Millisecond)
		_, ok, _ := sub.TryNext()
		require.False(t, ok, "nothing after the run's end")
		sub.Close()
	}
}

func TestDemoInterruptApproveAndReject(t *testing.T) {
	for _, approve := range []bool{true, false} {
		s := newServer(t, server.Config{})
		sub, _, _ := s.Subscribe("t", all, nil)
		defer sub.Close()
		start(t, s, "t", "demo", userInput("What is it?"))
		es := collect(t, sub, func(e *server.Event) bool { st, _ := lifecycle(e); return st == protocol.AgentStatusInterrupted })
		req := es[len(es)-2].Payload.(*protocol.ServerEventInputRequested).Params.Data
		st, ok, _ := s.State(context.Background(), "t")
		require.True(t, ok)
		require.Equal(t, "interrupted", st.Status)
		require.Len(t, st.Interrupts, 1)

		// An unknown interrupt changes nothing.
		_, e := tryDo(s, "t", &protocol.ClientCommandInputRespond{Params: protocol.InputRespondParams{Value: &protocol.InputRespondOne{Namespace: []string{}, InterruptID: "int_nope", Response: 1}}})
		require.Equal(t, protocol.ErrorCodeNoSuchInterrupt, e.Code)

		do(t, s, "t", &protocol.ClientCommandInputRespond{Params: protocol.InputRespondParams{Value: &protocol.InputRespondOne{
			Namespace: []string{}, InterruptID: req.InterruptID, Response: map[string]any{"approved": approve}}}})
		// Answering twice is refused, and says why.
		_, e = tryDo(s, "t", &protocol.ClientCommandInputRespond{Params: protocol.InputRespondParams{Value: &protocol.InputRespondOne{Namespace: []string{}, InterruptID: req.InterruptID, Response: 1}}})
		require.Equal(t, protocol.ErrorCodeNoSuchInterrupt, e.Code)
		require.Contains(t, e.Message, "already answered")

		rest := collect(t, sub, rootEnded)
		got := describeAll(rest)
		require.Equal(t, "input.answered[]", got[0], "input.answered comes first when the run resumes")
		require.Equal(t, "lifecycle[] running", got[1])
		toolEnd := "tools[] tool-error"
		if approve {
			toolEnd = "tools[] tool-finished"
		}
		require.Contains(t, got, toolEnd)
		require.Equal(t, "lifecycle[] completed", got[len(got)-1])
		answered := rest[0].Payload.(*protocol.ServerEventInputAnswered).Params.Data
		require.Equal(t, []string{req.InterruptID}, answered.InterruptIds)

		// The whole run used every channel, and the subagent's namespace.
		full := describeAll(append(es, rest...))
		for _, want := range []string{"lifecycle[researcher] started", "lifecycle[researcher] completed", "custom[researcher] progress",
			"messages[researcher] message-start ai", "tools[] tool-started", "tools[] tool-output-delta", "values[]", "updates[]", "checkpoints[]"} {
			require.Contains(t, full, want)
		}
		started := es[0]
		for _, e := range append(es, rest...) {
			if l, ok := e.Payload.(*protocol.ServerEventLifecycle); ok && len(e.Namespace) == 1 && l.Params.Data.Event == protocol.AgentStatusStarted {
				started = e
			}
		}
		cause := started.Payload.(*protocol.ServerEventLifecycle).Params.Data.Cause
		require.IsType(t, &protocol.LifecycleCauseToolCall{}, cause.Value)

		tree := do(t, s, "t", &protocol.ClientCommandAgentGetTree{}).Result.(protocol.AgentResult).Tree
		require.Equal(t, protocol.AgentStatusCompleted, tree.Status)
		require.Equal(t, "demo", tree.GraphName)
		require.Len(t, tree.Children, 1)
		require.Equal(t, []string{"researcher"}, tree.Children[0].Namespace)
	}
}

func TestRunStartOnInterruptedThreadResumes(t *testing.T) {
	s := newServer(t, server.Config{})
	sub, _, _ := s.Subscribe("t", all, nil)
	defer sub.Close()
	runID := start(t, s, "t", "demo", nil)
	collect(t, sub, func(e *server.Event) bool { return e.Method == protocol.ServerEventInputRequestedMethodValue })
	again := start(t, s, "t", "demo", map[string]any{"approved": true})
	require.Equal(t, runID, again, "the interrupted run resumes")
	es := collect(t, sub, rootEnded)
	require.Contains(t, describeAll(es), "tools[] tool-finished")
}

func TestBatchRespond(t *testing.T) {
	s := newServer(t, server.Config{})
	s.Register("two", server.AssistantFunc(func(ctx context.Context, rc *server.RunContext) error {
		var wg sync.WaitGroup
		answers := make([]any, 2)
		for i := range answers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers[i], _ = rc.Interrupt(ctx, i)
			}()
		}
		wg.Wait()
		state, err := rc.State()
		if err != nil {
			return err
		}
		if state == nil {
			state = map[string]any{}
		}
		state["answers"] = answers
		return rc.Values(state)
	}))
	sub, _, _ := s.Subscribe("t", all, nil)
	defer sub.Close()
	start(t, s, "t", "two", nil)
	var ids []string
	collect(t, sub, func(e *server.Event) bool {
		if r, ok := e.Payload.(*protocol.ServerEventInputRequested); ok {
			ids = append(ids, r.Params.Data.InterruptID)
		}
		return len(ids) == 2
	})
	// A batch naming an unknown interrupt answers none of them.
	_, e := tryDo(s, "t", &protocol.ClientCommandInputRespond{Params: protocol.InputRespondParams{Value: &protocol.InputRespondMany{
		Responses: []protocol.InputRespondEntry{{Namespace: []string{}, InterruptID: ids[0], Response: "x"}, {Namespace: []string{}, InterruptID: "int_nope", Response: "y"}}}}})
	require.Equal(t, protocol.ErrorCodeNoSuchInterrupt, e.Code)
	st, _, _ := s.State(context.Background(), "t")
	require.Len(t, st.Interrupts, 2)

	do(t, s, "t", &protocol.ClientCommandInputRespond{Params: protocol.InputRespondParams{Value: &protocol.InputRespondMany{
		Responses: []protocol.InputRespondEntry{{Namespace: []string{}, InterruptID: ids[0], Response: "a"}, {Namespace: []string{}, InterruptID: ids[1], Response: "b"}},
		Update:    map[string]any{"note": "updated"}}}})
	es := collect(t, sub, rootEnded)
	require.Equal(t, ids, es[0].Payload.(*protocol.ServerEventInputAnswered).Params.Data.InterruptIds, "one input.answered for the batch")
	st, _, _ = s.State(context.Background(), "t")
	require.Equal(t, "updated", st.Values["note"])
}

func TestMultitaskStrategies(t *testing.T) {
	s := newServer(t, server.Config{})
	slow := map[string]any{"count": float64(1_000_000), "rate": float64(100)}
	strategy := func(st protocol.MultitaskStrategy) *protocol.ClientCommandRunStart {
		return &protocol.ClientCommandRunStart{Params: protocol.RunStartParams{AssistantID: "echo", Input: userInput("next"), MultitaskStrategy: &st}}
	}

	t.Run("reject", func(t *testing.T) {
		start(t, s, "rej", "firehose", slow)
		_, e := tryDo(s, "rej", strategy(protocol.MultitaskStrategyReject))
		require.Equal(t, protocol.ErrorCodeInvalidArgument, e.Code)
		require.Contains(t, e.Message, "multitask_strategy is reject")
		do(t, s, "rej", &protocol.ClientCommandRunCancel{})
	})
	t.Run("enqueue", func(t *testing.T) {
		sub, _, _ := s.Subscribe("enq", all, nil)
		defer sub.Close()
		first := start(t, s, "enq", "firehose", map[string]any{"count": float64(30), "rate": float64(500)})
		second := *do(t, s, "enq", strategy(protocol.MultitaskStrategyEnqueue)).Result.(protocol.RunResult).RunID
		require.NotEqual(t, first, second)
		es := collect(t, sub, rootEnded)
		require.Equal(t, protocol.AgentStatusCompleted, es[len(es)-1].Payload.(*protocol.ServerEventLifecycle).Params.Data.Event, "the first run finishes")
		es = collect(t, sub, rootEnded)
		require.Equal(t, "next", text(es), "then the queued one runs")
	})
	t.Run("interrupt", func(t *testing.T) {
		sub, _, _ := s.Subscribe("int", all, nil)
		defer sub.Close()
		start(t, s, "int", "firehose", slow)
		do(t, s, "int", strategy(protocol.MultitaskStrategyInterrupt))
		es := collect(t, sub, rootEnded)
		end := es[len(es)-1].Payload.(*protocol.ServerEventLifecycle).Params.Data
		require.True(t, *end.Cancelled)
		require.Contains(t, *end.Error, "multitask_strategy interrupt")
		es = collect(t, sub, rootEnded)
		require.Equal(t, "next", text(es))
	})
	t.Run("rollback", func(t *testing.T) {
		sub, _, _ := s.Subscribe("rb", all, nil)
		defer sub.Close()
		start(t, s, "rb", "echo", userInput("kept"))
		collect(t, sub, rootEnded)
		s.Register("dirty", server.AssistantFunc(func(ctx context.Context, rc *server.RunContext) error {
			if err := rc.Values(map[string]any{"messages": []any{"garbage"}}); err != nil {
				return err
			}
			<-ctx.Done()
			return ctx.Err()
		}))
		start(t, s, "rb", "dirty", nil)
		collect(t, sub, func(e *server.Event) bool { return e.Method == protocol.ServerEventValuesMethodValue })
		do(t, s, "rb", strategy(protocol.MultitaskStrategyRollback))
		collect(t, sub, rootEnded)
		es := collect(t, sub, rootEnded)
		vals := es[len(es)-3].Payload.(*protocol.ServerEventValues).Params.Data.(map[string]any)
		msgs := vals["messages"].([]any)
		require.Len(t, msgs, 4, "the dirty run's state was rolled back before the new run")
		require.Equal(t, "kept", msgs[0].(map[string]any)["content"])
	})
	t.Run("default injects", func(t *testing.T) {
		got := make(chan any, 1)
		s.Register("listener", server.AssistantFunc(func(ctx context.Context, rc *server.RunContext) error {
			select {
			case v := <-rc.Injected():
				got <- v
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}))
		runID := start(t, s, "inj", "listener", nil)
		again := start(t, s, "inj", "listener", "more input")
		require.Equal(t, runID, again)
		require.Equal(t, "more input", <-got)
	})
}

// TestEmitterMisuse: every lifecycle violation is an error, and nothing
// invalid reaches the stream.
func TestEmitterMisuse(t *testing.T) {
	s := newServer(t, server.Config{})
	errs := make(chan []error, 1)
	var ended *server.RunContext
	s.Register("clumsy", server.AssistantFunc(func(ctx context.Context, rc *server.RunContext) error {
		var out []error
		m, _ := rc.StartMessage(protocol.MessageRoleAI, "m1", nil)
		out = append(out, m.Delta(&protocol.TextDelta{Text: "x"}))     // no open block
		_, err := m.StartBlock(&protocol.TextContentBlock{})           // ok
		out = append(out, err)                                         // nil
		_, err = m.StartBlock(&protocol.TextContentBlock{})            // interleave
		out = append(out, err)                                         //
		out = append(out, m.Finish(nil))                               // block open
		_, err = rc.StartMessage(protocol.MessageRoleAI, "m2", nil)    // second message at once
		out = append(out, err)                                         //
		out = append(out, m.FinishBlock(&protocol.TextContentBlock{})) // ok
		out = append(out, m.FinishBlock(&protocol.TextContentBlock{})) // no block open
		out = append(out, m.Finish(nil))                               // ok
		out = append(out, m.Finish(nil))                               // finished twice
		_, err = rc.StartMessage("robot", "m3", nil)                   // bad role
		out = append(out, err)                                         //
		tool, _ := rc.StartTool("c1", "t", nil)                        //
		_, err = rc.StartTool("c1", "t", nil)                          // same call twice
		out = append(out, err)                                         //
		out = append(out, tool.Finish(1), tool.Error("x", ""))         // ok, then ended
		sub, _ := rc.StartSubagent("kid", "g", nil)                    //
		out = append(out, sub.End(nil), sub.End(nil))                  // ok, then ended
		_, err = rc.Checkpoint("sideways", 1)                          // bad source
		out = append(out, err)                                         //
		ended = rc                                                     //
		errs <- out                                                    //
		return nil
	}))
	sub, _, _ := s.Subscribe("t", all, nil)
	defer sub.Close()
	start(t, s, "t", "clumsy", nil)
	got := <-errs
	lifecycleErrs := []int{0, 2, 3, 4, 6, 8, 9, 10, 12, 14, 15}
	for i, err := range got {
		if contains(lifecycleErrs, i) {
			require.ErrorIs(t, err, server.ErrLifecycle, "call %d", i)
		} else {
			require.NoError(t, err, "call %d", i)
		}
	}
	collect(t, sub, rootEnded)
	require.ErrorIs(t, ended.Custom("late", 1), server.ErrRunEnded, "nothing after the run")
	// Assistants that panic fail their run instead of the server.
	s.Register("panicky", server.AssistantFunc(func(ctx context.Context, rc *server.RunContext) error { panic("boom") }))
	start(t, s, "t", "panicky", nil)
	es := collect(t, sub, rootEnded)
	require.Contains(t, *es[len(es)-1].Payload.(*protocol.ServerEventLifecycle).Params.Data.Error, "panicked: boom")
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func TestStateCheckpointsAndFork(t *testing.T) {
	s := newServer(t, server.Config{})
	sub, _, _ := s.Subscribe("t", all, nil)
	defer sub.Close()
	start(t, s, "t", "echo", userInput("one"))
	collect(t, sub, rootEnded)
	start(t, s, "t", "echo", userInput("two"))
	collect(t, sub, rootEnded)

	got := do(t, s, "t", &protocol.ClientCommandStateGet{Params: protocol.StateGetParams{Namespace: []string{}, Keys: []string{"messages", "absent"}}}).Result.(protocol.StateGetResult)
	require.Len(t, got.Values["messages"], 4)
	require.NotContains(t, got.Values, "absent")
	require.NotNil(t, got.Checkpoint)

	cps := do(t, s, "t", &protocol.ClientCommandStateListCheckpoints{}).Result.(protocol.ListCheckpointsResult).Checkpoints
	require.Len(t, cps, 4, "each run's: with its question, and at its end")
	require.Equal(t, got.Checkpoint.ID, cps[0].ID, "newest first")
	one := uint64(1)
	page := do(t, s, "t", &protocol.ClientCommandStateListCheckpoints{Params: protocol.ListCheckpointsParams{Limit: &one, Before: &cps[0].ID}}).Result.(protocol.ListCheckpointsResult).Checkpoints
	require.Equal(t, []string{cps[1].ID}, []string{page[0].ID})

	_, e := tryDo(s, "t", &protocol.ClientCommandStateFork{Params: protocol.StateForkParams{CheckpointID: "nope"}})
	require.Equal(t, protocol.ErrorCodeNoSuchCheckpoint, e.Code)
	fork := do(t, s, "t", &protocol.ClientCommandStateFork{Params: protocol.StateForkParams{CheckpointID: cps[2].ID, Input: userInput("three")}}).Result.(protocol.StateForkResult)
	require.Equal(t, "t", fork.ThreadID)
	collect(t, sub, rootEnded)
	st, _, _ := s.State(context.Background(), "t")
	msgs := st.Values["messages"].([]any)
	require.Len(t, msgs, 4, "the fork started from the first run's end (2 messages) and added 2")
	require.Equal(t, "three", msgs[3].(map[string]any)["content"])
}

func TestValuesSubscriptionStartsWithCurrentState(t *testing.T) {
	s := newServer(t, server.Config{})
	sub, _, _ := s.Subscribe("t", all, nil)
	start(t, s, "t", "echo", userInput("state please"))
	collect(t, sub, rootEnded)
	sub.Close()
	head := s.LastSeq("t")
	v, _, err := s.Subscribe("t", channels.Filter{Channels: []string{"values"}, Depth: channels.Unlimited}, server.SeqCursor(head))
	require.NoError(t, err)
	defer v.Close()
	e, ok, _ := v.TryNext()
	require.True(t, ok, "a live-only values subscription still gets the state first")
	require.Equal(t, protocol.ServerEventValuesMethodValue, e.Method)
	require.Len(t, e.Payload.(*protocol.ServerEventValues).Params.Data.(map[string]any)["messages"], 2)
}

func TestNamespaceAndChannelFilters(t *testing.T) {
	s := newServer(t, server.Config{})
	researcher, _, _ := s.Subscribe("t", channels.Filter{Namespaces: []channels.Namespace{{"researcher"}}, Depth: channels.Unlimited}, nil)
	defer researcher.Close()
	progress, _, _ := s.Subscribe("t", channels.Filter{Channels: []string{"custom:progress"}, Depth: channels.Unlimited}, nil)
	defer progress.Close()
	rootOnly, _, _ := s.Subscribe("t", channels.Filter{Channels: []string{"lifecycle"}, Depth: 0}, nil)
	defer rootOnly.Close()
	start(t, s, "t", "demo", nil)
	es := collect(t, researcher, func(e *server.Event) bool { st, _ := lifecycle(e); return st == protocol.AgentStatusCompleted })
	for _, e := range es {
		require.Equal(t, channels.Namespace{"researcher"}, e.Namespace)
	}
	p := collect(t, progress, func(e *server.Event) bool {
		return len(seqs([]*server.Event{e})) > 0 && e.Name == "progress" && e.Payload.(*protocol.ServerEventCustom).Params.Data.Payload.(map[string]any)["step"] == 3
	})
	require.Len(t, p, 3)
	r := collect(t, rootOnly, func(e *server.Event) bool { st, _ := lifecycle(e); return st == protocol.AgentStatusInterrupted })
	for _, e := range r {
		require.Empty(t, e.Namespace, "depth 0 below the root")
	}
	do(t, s, "t", &protocol.ClientCommandRunCancel{})
}

func TestIdleThreadsReleaseTheirBufferButKeepState(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s := newServer(t, server.Config{Now: clock, IdleRelease: time.Minute})
	sub, _, _ := s.Subscribe("t", all, nil)
	start(t, s, "t", "echo", userInput("keep me"))
	collect(t, sub, rootEnded)
	servetest.Sweep(s)
	require.Equal(t, 14, server.BufferedEvents(s, "t"), "a thread with a subscriber is not idle")
	sub.Close()
	servetest.Sweep(s)
	require.Equal(t, 14, server.BufferedEvents(s, "t"), "not idle for long enough yet")
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	servetest.Sweep(s)
	require.Equal(t, 0, server.BufferedEvents(s, "t"))
	st, ok, _ := s.State(context.Background(), "t")
	require.True(t, ok)
	require.Len(t, st.Values["messages"], 2)
	require.Equal(t, uint64(14), s.LastSeq("t"), "sequence numbers are never reused")
	start(t, s, "t", "echo", userInput("again"))
	sub, _, _ = s.Subscribe("t", all, nil)
	defer sub.Close()
	es := collect(t, sub, rootEnded)
	require.Equal(t, uint64(15), seqs(es)[0])
}

func TestSessionSubscriptionsAndReconnect(t *testing.T) {
	s := newServer(t, server.Config{})
	ss := s.NewSession("t")
	resp, e := typed(ss.Do(context.Background(), &protocol.ClientCommand{Value: &protocol.ClientCommandSubscriptionSubscribe{ID: 1,
		Params: protocol.SubscribeParams{Channels: []protocol.Channel{"messages", "lifecycle"}}}}))
	require.Nil(t, e)
	id := resp.Result.(protocol.SubscribeResult).SubscriptionID
	require.Equal(t, []string{id}, ss.Subscriptions())
	start(t, s, "t", "echo", userInput("one two three"))
	collect(t, ss, func(e *server.Event) bool { return e.Method == protocol.ServerEventMessagesMethodValue && e.Seq >= 5 })
	// The connection drops mid-run; a new one reconnects.
	ss.Detach()
	var err error
	for ok := true; ok; _, ok, err = ss.TryNext() {
	}
	require.ErrorIs(t, err, server.ErrClosed, "a detached session ends once its queue is read")
	ss2 := s.NewSession("t")
	resp, e = typed(ss2.Do(context.Background(), &protocol.ClientCommand{Value: &protocol.ClientCommandSubscriptionReconnect{ID: 2,
		Params: protocol.ReconnectParams{RunID: "run_1", Subscriptions: []string{id}}}}))
	require.Nil(t, e)
	res := resp.Result.(protocol.ReconnectResult)
	require.True(t, res.Restored)
	require.NotEmpty(t, res.CurrentNamespaces)
	require.Equal(t, []string{id}, ss2.Subscriptions(), "restored under its id")
	es := collect(t, ss2, rootEnded)
	require.Equal(t, uint64(6), es[0].Seq, "resumes right after the last event read")
	// A subscription restores once.
	resp, e = typed(ss2.Do(context.Background(), &protocol.ClientCommand{Value: &protocol.ClientCommandSubscriptionReconnect{ID: 3,
		Params: protocol.ReconnectParams{RunID: "run_1", Subscriptions: []string{id}}}}))
	require.Nil(t, e)
	require.False(t, resp.Result.(protocol.ReconnectResult).Restored)
	// Unknown subscription: no_such_subscription on unsubscribe.
	_, e = typed(ss2.Do(context.Background(), &protocol.ClientCommand{Value: &protocol.ClientCommandSubscriptionUnsubscribe{ID: 4, Params: protocol.UnsubscribeParams{SubscriptionID: "nope"}}}))
	require.Equal(t, protocol.ErrorCodeNoSuchSubscription, e.Code)
	_, e = typed(ss2.Do(context.Background(), &protocol.ClientCommand{Value: &protocol.ClientCommandSubscriptionUnsubscribe{ID: 5, Params: protocol.UnsubscribeParams{SubscriptionID: id}}}))
	require.Nil(t, e)
	require.Empty(t, ss2.Subscriptions())
	require.Equal(t, 0, s.Subscriptions())
	ss2.Close()
	// Without a session, subscription commands are not supported.
	_, e = typed(s.Do(context.Background(), "t", &protocol.ClientCommand{Value: &protocol.ClientCommandSubscriptionUnsubscribe{ID: 6}}))
	require.Equal(t, protocol.ErrorCodeNotSupported, e.Code)
}

func TestCloseStopsRunsAndEndsSubscriptions(t *testing.T) {
	s := server.New(server.Config{})
	s.Register("forever", server.AssistantFunc(func(ctx context.Context, rc *server.RunContext) error {
		<-ctx.Done()
		return ctx.Err()
	}))
	sub, _, _ := s.Subscribe("t", all, nil)
	_, e := typed(s.Do(context.Background(), "t", &protocol.ClientCommand{Value: &protocol.ClientCommandRunStart{ID: 1, Params: protocol.RunStartParams{AssistantID: "forever"}}}))
	require.Nil(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, s.Close(ctx))
	require.NoError(t, s.Close(ctx), "twice is fine")
	for {
		_, err := sub.Next(ctx)
		if err != nil {
			require.True(t, errors.Is(err, server.ErrServerClosed), "%v", err)
			break
		}
	}
	_, e = typed(s.Do(context.Background(), "t", &protocol.ClientCommand{Value: &protocol.ClientCommandRunStart{ID: 2, Params: protocol.RunStartParams{AssistantID: "forever"}}}))
	require.NotNil(t, e)
}

// A run that was cancelled takes no more input, even while it winds down:
// input.inject after run.cancel answers no_such_run.
func TestInjectAfterCancelFindsNoRun(t *testing.T) {
	s := newServer(t, server.Config{})
	stopped := make(chan struct{})
	s.Register("slowstop", server.AssistantFunc(func(ctx context.Context, rc *server.RunContext) error {
		<-ctx.Done()
		<-stopped // still winding down when the inject comes
		return ctx.Err()
	}))
	defer close(stopped)
	start(t, s, "t", "slowstop", nil)
	do(t, s, "t", &protocol.ClientCommandRunCancel{})
	_, errResp := tryDo(s, "t", &protocol.ClientCommandInputInject{Params: protocol.InputInjectParams{Namespace: []string{}, Message: protocol.InputMessage{Role: "user", Content: "x"}}})
	require.NotNil(t, errResp)
	require.Equal(t, protocol.ErrorCodeNoSuchRun, errResp.Code)
}

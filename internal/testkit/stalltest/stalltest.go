// Package stalltest holds what the stalled-engine tests of the core and of
// the engines share: a run that writes its state and events step after
// step, the wait that fails a call which does not answer while the
// engine is stalled, and the check that a stall lost and reordered
// nothing.
package stalltest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/stretchr/testify/require"
)

// Steps is an assistant that, step after step until it is cancelled (or
// after input "n" steps), saves its step in the thread's values, emits it
// as the custom event "tick", and every fifth step takes a checkpoint.
func Steps(ctx context.Context, rc *server.RunContext) error {
	n := -1
	if in, ok := rc.Input().(map[string]any); ok {
		if f, ok := in["n"].(float64); ok {
			n = int(f)
		}
	}
	for i := 0; n < 0 || i < n; i++ {
		if err := rc.Values(map[string]any{"step": float64(i)}); err != nil {
			return err
		}
		if err := rc.Custom("tick", float64(i)); err != nil {
			return err
		}
		if i%5 == 0 {
			if _, err := rc.Checkpoint(protocol.CheckpointSourceLoop, int64(i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// IsTick reports whether e is a Steps tick.
func IsTick(e *server.Event) bool { return e.Channel == channels.Custom && e.Name == "tick" }

// Tick is the step of a Steps tick (-1 for another event).
func Tick(t testing.TB, e *server.Event) float64 {
	if !IsTick(e) {
		return -1
	}
	d, _ := Data(t, e).(map[string]any)
	f, ok := d["payload"].(float64)
	require.True(t, ok, "a tick's payload is its step: %s", e.JSON())
	return f
}

// Data is an event's params.data, decoded from its JSON (an event read
// back from a log has no payload of its own but for lifecycle events).
func Data(t testing.TB, e *server.Event) any {
	t.Helper()
	var v struct {
		Params struct {
			Data any `json:"data"`
		} `json:"params"`
	}
	require.NoError(t, json.Unmarshal(e.JSON(), &v))
	return v.Params.Data
}

// Within fails the test unless fn returns within a few seconds: a stalled
// engine stays stalled until the test releases it, so a call that waits
// for it (holding the thread's lock, say) would not return by itself.
func Within(t testing.TB, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s did not answer while the engine's writes were stalled", what)
	}
}

// CheckRun checks a Steps run's whole stream, as a subscriber from its
// start read it: every event once, in order (seqs from first; a replay's
// own events, of seq 0, left out), every step once, in order; it returns
// the seqs of the ticks and the values the stream announced last.
func CheckRun(t testing.TB, events []*server.Event, first uint64) (ticks []uint64, lastValues any) {
	t.Helper()
	next := 0.0
	want := first
	for _, e := range events {
		if e.Seq == 0 {
			continue
		}
		require.Equal(t, want, e.Seq, "every event once, in order")
		want++
		switch {
		case IsTick(e):
			require.Equal(t, next, Tick(t, e), "every step once, in order")
			next++
			ticks = append(ticks, e.Seq)
		case e.Channel == channels.Values:
			lastValues = Data(t, e)
		}
	}
	require.NotEmpty(t, ticks)
	return ticks, lastValues
}

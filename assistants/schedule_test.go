package assistants

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSchedulerTicksEachRunAtItsRateAndStops(t *testing.T) {
	s := &scheduler{}
	var fast, slow atomic.Int64
	a := s.add(time.Millisecond, func() bool { return fast.Add(1) < 50 })
	b := s.add(5*time.Millisecond, func() bool { return slow.Add(1) < 5 })
	for _, e := range []*scheduled{a, b} {
		select {
		case <-e.done:
		case <-time.After(5 * time.Second):
			t.Fatal("a run was not unscheduled")
		}
	}
	require.Equal(t, int64(50), fast.Load(), "ticks until its tick says no more")
	require.Equal(t, int64(5), slow.Load())

	// A removed run stops ticking, even when removed during its tick.
	var n atomic.Int64
	var cp atomic.Pointer[scheduled]
	removed := make(chan struct{})
	c := s.add(time.Millisecond, func() bool {
		if n.Add(1) == 3 {
			go func() {
				for cp.Load() == nil {
					time.Sleep(time.Millisecond)
				}
				s.remove(cp.Load())
				close(removed)
			}()
			time.Sleep(10 * time.Millisecond) // remove runs while this tick does
		}
		return true
	})
	cp.Store(c)
	<-removed
	<-c.done
	at := n.Load()
	time.Sleep(20 * time.Millisecond)
	require.Equal(t, at, n.Load(), "no tick after remove")
	requireStopped(t, s)
}

// A run removed while it waits is unscheduled at once, however long its
// interval, and the scheduler's goroutine ends.
func TestSchedulerRemovesAWaitingRunAtOnce(t *testing.T) {
	s := &scheduler{}
	e := s.add(time.Hour, func() bool { t.Error("ticked"); return false })
	s.remove(e)
	select {
	case <-e.done:
	case <-time.After(5 * time.Second):
		t.Fatal("done not closed")
	}
	s.remove(e) // twice is harmless
	requireStopped(t, s)
}

// The heap gives runs back in the order they are due.
func TestSchedulerHeapOrder(t *testing.T) {
	s := &scheduler{}
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		s.push(due{at: r.Int64N(500)})
	}
	prev := int64(-1)
	for len(s.q) > 0 {
		d := s.pop()
		require.GreaterOrEqual(t, d.at, prev)
		prev = d.at
	}
}

func requireStopped(t *testing.T, s *scheduler) {
	t.Helper()
	require.Eventually(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return !s.running }, 5*time.Second, time.Millisecond,
		"the scheduler's goroutine ends when nothing is scheduled")
}

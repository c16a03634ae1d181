package assistants

import (
	"container/heap"
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
	c := s.add(time.Hour, func() bool { // paced by hand below
		if n.Add(1) == 3 {
			go func() { s.remove(cp.Load()); close(removed) }()
			time.Sleep(10 * time.Millisecond) // remove runs while this tick does
		}
		return true
	})
	cp.Store(c)
	s.mu.Lock()
	c.interval = time.Millisecond
	c.next = time.Now()
	heap.Fix(&s.q, c.i)
	s.mu.Unlock()
	select { // the sleeper learns of the new due time
	case s.wake <- struct{}{}:
	default:
	}
	<-removed
	<-c.done
	at := n.Load()
	time.Sleep(20 * time.Millisecond)
	require.Equal(t, at, n.Load(), "no tick after remove")
	require.Eventually(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return !s.running }, 5*time.Second, time.Millisecond,
		"the scheduler's goroutine ends when nothing is scheduled")
}

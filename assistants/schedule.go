package assistants

import (
	"container/heap"
	"sync"
	"time"
)

// ticks is the one scheduler of every paced firehose run: a goroutine
// that sleeps until the earliest run is due and calls each due run's tick,
// instead of a ticker and a goroutine wake-up per run. The goroutine runs
// while some run is scheduled and exits when none is.
var ticks = &scheduler{}

// scheduled is one run's place in the scheduler.
type scheduled struct {
	next     time.Time
	interval time.Duration
	// tick publishes the run's next event; it returns false when the run
	// has nothing more to publish (or failed), which unschedules it.
	tick      func() bool
	done      chan struct{} // closed when unscheduled
	i         int           // index in the heap, -1 when not in it
	cancelled bool          // removed while its tick ran
}

type scheduler struct {
	mu      sync.Mutex
	q       schedHeap
	running bool
	wake    chan struct{} // a run was added that may be due before the sleeper wakes
}

// add schedules tick every interval from now on; the returned channel
// closes once tick returns false or remove is called.
func (s *scheduler) add(interval time.Duration, tick func() bool) *scheduled {
	e := &scheduled{next: time.Now().Add(interval), interval: interval, tick: tick, done: make(chan struct{})}
	s.mu.Lock()
	heap.Push(&s.q, e)
	if !s.running {
		s.running = true
		s.wake = make(chan struct{}, 1)
		go s.loop(s.wake)
	} else if e.i == 0 {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	s.mu.Unlock()
	return e
}

// remove unschedules e (a run cancelled while waiting).
func (s *scheduler) remove(e *scheduled) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e.cancelled = true
	if e.i >= 0 {
		heap.Remove(&s.q, e.i)
		close(e.done)
	} // else its tick is running: the loop closes done after it
}

func (s *scheduler) loop(wake chan struct{}) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var due []*scheduled
	for {
		s.mu.Lock()
		if len(s.q) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		now := time.Now()
		for len(s.q) > 0 && !s.q[0].next.After(now) {
			due = append(due, heap.Pop(&s.q).(*scheduled))
		}
		var wait time.Duration
		if len(due) == 0 {
			wait = s.q[0].next.Sub(now)
		}
		s.mu.Unlock()
		if len(due) == 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-wake:
				if !timer.Stop() {
					<-timer.C
				}
			}
			continue
		}
		for i, e := range due {
			more := e.tick()
			s.mu.Lock()
			if more && !e.cancelled {
				e.next = e.next.Add(e.interval)
				if behind := now.Sub(e.next); behind > time.Second {
					e.next = now // far behind (a stalled machine): no burst to catch up
				}
				heap.Push(&s.q, e)
			} else {
				close(e.done)
			}
			s.mu.Unlock()
			due[i] = nil
		}
		due = due[:0]
	}
}

type schedHeap []*scheduled

func (h schedHeap) Len() int           { return len(h) }
func (h schedHeap) Less(i, j int) bool { return h[i].next.Before(h[j].next) }
func (h schedHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].i, h[j].i = i, j
}
func (h *schedHeap) Push(x any) {
	e := x.(*scheduled)
	e.i = len(*h)
	*h = append(*h, e)
}
func (h *schedHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.i = -1
	return e
}

package assistants

import (
	"runtime"
	"sync"
	"time"
)

// ticks is the one scheduler of every paced firehose run: a goroutine
// that sleeps until the earliest run is due and calls each due run's tick,
// instead of a ticker and a goroutine wake-up per run. The goroutine runs
// while some run is scheduled and exits when none is.
var ticks = &scheduler{}

// scheduled is one run's place in the scheduler. Its fields are guarded by
// the scheduler's lock.
type scheduled struct {
	interval time.Duration
	// tick publishes the run's next event; it returns false when the run
	// has nothing more to publish (or failed), which unschedules it.
	tick    func() bool
	done    chan struct{} // closed when unscheduled
	queued  bool          // in the heap (not ticking now)
	removed bool
}

// due is a heap entry: a run and when it is next due, in nanoseconds on
// the scheduler's clock. The heap holds values, so ordering it reads one
// array rather than every run's struct (a thousand runs' structs are
// cache misses at every tick). A removed run's entry stays until it comes
// up and is dropped then.
type due struct {
	at int64
	e  *scheduled
}

type scheduler struct {
	mu      sync.Mutex
	epoch   time.Time
	q       []due // a binary min-heap on at
	live    int   // scheduled runs not removed
	running bool
	wake    chan struct{} // a run was added that may be due before the sleeper wakes
}

func (s *scheduler) now() int64 { return int64(time.Since(s.epoch)) }

// add schedules tick every interval from now on; the returned run's done
// channel closes once tick returns false or remove is called.
func (s *scheduler) add(interval time.Duration, tick func() bool) *scheduled {
	e := &scheduled{interval: interval, tick: tick, done: make(chan struct{}), queued: true}
	s.mu.Lock()
	if s.epoch.IsZero() {
		s.epoch = time.Now()
	}
	s.push(due{at: s.now() + int64(interval), e: e})
	s.live++
	if !s.running {
		s.running = true
		s.wake = make(chan struct{}, 1)
		go s.loop(s.wake)
	} else if s.q[0].e == e {
		s.signal()
	}
	s.mu.Unlock()
	return e
}

func (s *scheduler) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// remove unschedules e (a run cancelled while waiting).
func (s *scheduler) remove(e *scheduled) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.removed {
		return
	}
	e.removed = true
	s.live--
	if e.queued {
		close(e.done)
		if s.live == 0 {
			s.signal() // the loop ends rather than sleep until a dropped entry
		}
	} // else its tick is running: the loop closes done after it
}

func (s *scheduler) loop(wake chan struct{}) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var ready []due
	for {
		s.mu.Lock()
		if s.live == 0 {
			s.q = nil // only removed runs' entries
			s.running = false
			s.mu.Unlock()
			return
		}
		now := s.now()
		for len(s.q) > 0 && s.q[0].at <= now {
			d := s.pop()
			if d.e.removed {
				continue
			}
			d.e.queued = false
			ready = append(ready, d)
		}
		var wait time.Duration
		if len(ready) == 0 {
			wait = time.Duration(s.q[0].at - now)
		}
		s.mu.Unlock()
		if len(ready) == 0 {
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
		for i, d := range ready {
			if i > 0 {
				// Let the writers of what the last tick published run
				// before the next one publishes: on a busy core they would
				// otherwise wait for every due run's event to be made, as
				// a live agent's writers do not.
				runtime.Gosched()
			}
			more := d.e.tick()
			s.mu.Lock()
			switch {
			case d.e.removed:
				close(d.e.done)
			case more:
				at := d.at + int64(d.e.interval)
				if now-at > int64(time.Second) {
					at = now // far behind (a stalled machine): no burst to catch up
				}
				d.e.queued = true
				s.push(due{at: at, e: d.e})
			default:
				d.e.removed = true
				s.live--
				close(d.e.done)
			}
			s.mu.Unlock()
			ready[i] = due{}
		}
		ready = ready[:0]
	}
}

// push and pop keep s.q a min-heap on at.
func (s *scheduler) push(d due) {
	s.q = append(s.q, d)
	i := len(s.q) - 1
	for i > 0 {
		p := (i - 1) / 2
		if s.q[p].at <= d.at {
			break
		}
		s.q[i] = s.q[p]
		i = p
	}
	s.q[i] = d
}

func (s *scheduler) pop() due {
	top := s.q[0]
	n := len(s.q) - 1
	last := s.q[n]
	s.q[n] = due{}
	s.q = s.q[:n]
	if n == 0 {
		return top
	}
	i := 0
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && s.q[c+1].at < s.q[c].at {
			c++
		}
		if last.at <= s.q[c].at {
			break
		}
		s.q[i] = s.q[c]
		i = c
	}
	s.q[i] = last
	return top
}

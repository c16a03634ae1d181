package pace

import "time"

// WriteDeadline arms a connection's write deadline lazily. Arm moves it to
// now + timeout only when the deadline set is less than timeout/2 away, so
// a busy connection sets it about twice per timeout rather than once or
// twice per write (each set is a timer update in the runtime's poller); a
// write is then bounded by between timeout/2 and timeout. The deadline is
// never cleared: every write arms it first. The zero value is ready; it is
// guarded by whatever serializes the connection's writes.
type WriteDeadline struct{ at time.Time }

// Arm makes sure c's write deadline is at least timeout/2 away.
func (d *WriteDeadline) Arm(c interface{ SetWriteDeadline(time.Time) error }, timeout time.Duration) {
	now := time.Now()
	if d.at.Sub(now) >= timeout/2 {
		return
	}
	d.at = now.Add(timeout)
	_ = c.SetWriteDeadline(d.at)
}

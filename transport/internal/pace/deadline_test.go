package pace

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type deadlineRecorder struct{ set []time.Time }

func (r *deadlineRecorder) SetWriteDeadline(t time.Time) error {
	r.set = append(r.set, t)
	return nil
}

func TestWriteDeadlineIsArmedLazily(t *testing.T) {
	var d WriteDeadline
	var r deadlineRecorder
	for range 100 {
		d.Arm(&r, time.Hour)
	}
	require.Len(t, r.set, 1, "one set serves writes for half the timeout")
	require.WithinDuration(t, time.Now().Add(time.Hour), r.set[0], time.Minute)
	d.Arm(&r, time.Millisecond)
	require.Len(t, r.set, 1, "a deadline far enough away is kept")
	d.at = time.Now().Add(10 * time.Millisecond) // close to passing
	d.Arm(&r, time.Second)
	require.Len(t, r.set, 2, "a deadline about to pass is moved")
}

// TestWriteDeadlineStillBoundsABlockedWrite: a peer that reads nothing
// makes a write fail within the timeout.
func TestWriteDeadlineStillBoundsABlockedWrite(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	var d WriteDeadline
	d.Arm(a, 50*time.Millisecond)
	start := time.Now()
	_, err := a.Write([]byte("nobody reads this"))
	require.Error(t, err)
	require.Less(t, time.Since(start), 5*time.Second)
}

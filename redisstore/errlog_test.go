package redisstore

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An outage's thousands of errors are its first, then one summary per
// interval with the count and the newest; a later outage starts again.
func TestErrorLimiter(t *testing.T) {
	var got []string
	clock := time.Unix(0, 0)
	l := newErrorLimiter(func(err error) { got = append(got, err.Error()) }, 10*time.Second, func() time.Time { return clock })
	boom := errors.New("connection refused")
	for i := 0; i < 3000; i++ { // 3,000 errors over 9 s
		l.add(boom)
		clock = clock.Add(3 * time.Millisecond)
	}
	require.Equal(t, []string{"connection refused"}, got, "the first at once, the rest held")
	clock = clock.Add(2 * time.Second)
	l.flush()
	require.Len(t, got, 2)
	require.Equal(t, "2999 more errors in the last 11s, the newest: connection refused", got[1])
	l.flush()
	require.Len(t, got, 2, "nothing held: nothing more")

	clock = clock.Add(time.Minute)
	l.add(errors.New("again"))
	require.Equal(t, "again", got[2], "a new outage's first error at once")
	l.add(nil)
	require.Len(t, got, 3)
}

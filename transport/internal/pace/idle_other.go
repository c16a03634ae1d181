//go:build !linux

package pace

import "time"

// coresIdle is unknown here: CPU use is the process's own share alone.
func coresIdle() (time.Duration, bool) { return 0, false }

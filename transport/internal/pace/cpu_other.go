//go:build !unix

package pace

import "time"

// processCPU is unknown here: the interval does not adapt.
func processCPU() (time.Duration, bool) { return 0, false }

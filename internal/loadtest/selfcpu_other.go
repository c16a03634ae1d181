//go:build !unix

package loadtest

// SelfCPU is 0 where getrusage is missing: the client's CPU is not
// reported there.
func SelfCPU() float64 { return 0 }

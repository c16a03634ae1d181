//go:build !unix

package loadtest

// selfCPU is 0 where getrusage is missing: the client's CPU is not
// reported there.
func selfCPU() float64 { return 0 }

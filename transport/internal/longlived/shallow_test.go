package longlived

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// deep grows the stack by about n KiB.
//
//go:noinline
func deep(n int) int {
	var pad [1024]byte
	pad[n%1024] = byte(n)
	if n == 0 {
		return int(pad[0])
	}
	return deep(n-1) + int(pad[n%1024])
}

func TestRunReturnsTheResultFromAnotherGoroutine(t *testing.T) {
	got := Shallow(func() int { return deep(64) })
	require.Equal(t, deep(64), got)
	// The caller's goroutine is not the one that ran f.
	var callerBuf, calleeBuf [64]byte
	caller := string(callerBuf[:runtime.Stack(callerBuf[:], false)])
	callee := Shallow(func() string { return string(calleeBuf[:runtime.Stack(calleeBuf[:], false)]) })
	require.NotEqual(t, caller[:20], callee[:20], "goroutine ids differ")
}

// Package fulldisk gives tests a real disk that fills up: a tmpfs of a
// chosen size, and a file that takes its last byte.
package fulldisk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// Tmpfs mounts a tmpfs of size bytes for the test (unmounted at its
// end), or skips the test where it cannot (not root).
func Tmpfs(t testing.TB, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("needs root to mount a tmpfs (a disk that fills up): %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// Fill writes a file under dir until its disk has no room left, to the
// last byte, and returns the file (removing it gives the room back).
func Fill(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	block := make([]byte, 64<<10)
	for _, b := range [][]byte{block, block[:512]} {
		for {
			if _, err := f.Write(b); err != nil {
				require.True(t, errors.Is(err, syscall.ENOSPC), "%v", err)
				break
			}
		}
	}
	return path
}

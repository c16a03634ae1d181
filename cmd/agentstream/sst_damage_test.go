package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// damagedStore makes a store with one table (50 events of one thread,
// compacted) and flips 16 bytes of the table at
// the fraction at of its length; it returns the directory and the table.
func damagedStore(t *testing.T, at float64) (string, string) {
	t.Helper()
	dir := t.TempDir()
	url, proc := startProcessNode(t, "--data-dir", dir)
	publishPadded(t, url, "dmg", 50, 2000)
	require.NoError(t, proc.Process.Signal(syscall.SIGTERM))
	_ = proc.Wait()
	code, _, stderr := runMain("data", "--data-dir", dir, "compact")
	require.Equal(t, 0, code, stderr)
	ssts, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	require.NoError(t, err)
	require.Len(t, ssts, 1)
	b, err := os.ReadFile(ssts[0])
	require.NoError(t, err)
	off := int(float64(len(b)) * at)
	for i := off; i < off+16; i++ {
		b[i] ^= 0xa5
	}
	require.NoError(t, os.WriteFile(ssts[0], b, 0o640))
	return dir, ssts[0]
}

func runMain(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut, nil)
	return code, out.String(), errOut.String()
}

// TestDataToolsOnADamagedTable: a table whose bytes the disk changed is
// an error naming the file for every data command and for serve (exit 1,
// never a panic), and check finds it.
func TestDataToolsOnADamagedTable(t *testing.T) {
	dir, table := damagedStore(t, 0.3)
	for _, c := range [][]string{{"check"}, {"stats"}, {"stats", "dmg"}, {"export", "dmg"}, {"repair"}} {
		code, out, stderr := runMain(append([]string{"data", "--data-dir", dir}, c...)...)
		require.Equal(t, 1, code, "%v: %s%s", c, out, stderr)
		require.Contains(t, stderr, table, "%v names the file", c)
		require.Contains(t, stderr, "damaged", "%v", c)
		require.NotContains(t, out+stderr, "goroutine", "%v: no panic", c)
	}
	code, _, stderr := runMain("serve", "--addr", "127.0.0.1:0", "--data-dir", dir)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, table)
	require.Contains(t, stderr, "backup")
}

// TestDataToolsOnlyReadStores: data commands on an empty directory, or on
// one holding something else, say it is not a store and write nothing
// into it.
func TestDataToolsOnlyReadStores(t *testing.T) {
	empty := t.TempDir()
	other := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(other, "notes.txt"), []byte("mine"), 0o640))
	for _, dir := range []string{empty, other} {
		before, _ := os.ReadDir(dir)
		for _, c := range []string{"stats", "check", "repair", "compact"} {
			code, out, stderr := runMain("data", "--data-dir", dir, c)
			require.Equal(t, 1, code, "%s: %s", c, out)
			require.Contains(t, stderr, "not a store", c)
			require.NotContains(t, out, "no damage found")
		}
		after, _ := os.ReadDir(dir)
		require.Equal(t, len(before), len(after), "nothing written into %s", dir)
	}
}

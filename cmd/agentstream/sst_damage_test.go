package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

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
// never a panic), and check finds it. Its one block holds every key (50
// events in a few chunks), so repair, which writes the tree again from
// what can be read around the damage, has nothing to keep and refuses,
// saying so, and changes nothing (TestEveryDamagedTreeFileIsRefused
// repairs a table with more in it).
func TestDataToolsOnADamagedTable(t *testing.T) {
	dir, table := damagedStore(t, 0.3)
	for _, c := range [][]string{{"check"}, {"stats"}, {"stats", "dmg"}, {"export", "dmg"}} {
		code, out, stderr := runMain(append([]string{"data", "--data-dir", dir}, c...)...)
		require.Equal(t, 1, code, "%v: %s%s", c, out, stderr)
		require.Contains(t, stderr, table, "%v names the file", c)
		require.Contains(t, stderr, "damaged", "%v", c)
		require.NotContains(t, out+stderr, "goroutine", "%v: no panic", c)
	}
	code, _, stderr := runMain("serve", "--addr", "127.0.0.1:0", "--data-dir", dir)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, table)
	require.Contains(t, stderr, "repair")
	require.Contains(t, stderr, "backup")

	code, out, stderr := runMain("data", "--data-dir", dir, "repair")
	require.Equal(t, 1, code, "%s%s", out, stderr)
	require.Contains(t, stderr, table)
	require.Contains(t, stderr, "no key of the tree can be read")
	require.NotContains(t, out+stderr, "goroutine", "no panic")
	code, _, stderr = runMain("data", "--data-dir", dir, "check")
	require.Equal(t, 1, code, "the damage is still there: %s", stderr)
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

// platformStore makes a store of Platform records (thread records and
// store items, no events), closed and compacted into one table; it
// returns the directory and the id of one of its threads.
func platformStore(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	url, proc := startProcessNode(t, "--data-dir", dir, "--profiles", "langgraph")
	pad := strings.Repeat("p", 300)
	var thread string
	for i := 0; i < 100; i++ {
		st, _, err := platformCall(context.Background(), "PUT", url+"/store/items", fmt.Sprintf(`{"namespace": ["d"], "key": "k%d", "value": {"pad": %q}}`, i, pad))
		require.NoError(t, err)
		require.Equal(t, 204, st)
		if i%10 == 0 {
			thread = newUUID()
			st, _, err := platformCall(context.Background(), "POST", url+"/threads", `{"thread_id": "`+thread+`"}`)
			require.NoError(t, err)
			require.Equal(t, 200, st)
		}
	}
	require.NoError(t, proc.Process.Signal(syscall.SIGTERM))
	_ = proc.Wait()
	code, _, stderr := runMain("data", "--data-dir", dir, "compact")
	require.Equal(t, 0, code, stderr)
	return dir, thread
}

// damage changes the one file of dir that glob finds: 16 bytes flipped
// at the fraction at of it, or (at < 0) the last -at bytes cut off.
func damage(t *testing.T, dir, glob string, at float64) string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, glob))
	require.NoError(t, err)
	require.NotEmpty(t, names, glob)
	slices.Sort(names)
	path := names[len(names)-1]
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	if at < 0 {
		b = b[:len(b)-int(-at)]
	} else {
		off := min(int(float64(len(b))*at), len(b)-16)
		for i := off; i < off+16; i++ {
			b[i] ^= 0xa5
		}
	}
	require.NoError(t, os.WriteFile(path, b, 0o640))
	return path
}

// TestEveryDamagedTreeFileIsRefused: a store of Platform records (no
// events, so that no event read finds the damage first) with one of its
// files damaged: a table (a flipped block), the MANIFEST (a flipped
// record in its middle, which Pebble alone took for the torn end and
// opened without the tables the later records named; or cut short), the
// OPTIONS file. serve refuses it at start naming the file (exit 1, no
// panic), data check finds it; data repair writes damaged options again
// (then the store serves all its records), writes a tree with a damaged
// table again from what can be read (then it serves the rest), and says
// why it cannot mend a MANIFEST.
func TestEveryDamagedTreeFileIsRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers")
	}
	base, thread := platformStore(t)
	for _, c := range []struct {
		name, glob string
		at         float64
		repairs    bool
	}{
		{"table", "*.sst", 0.4, true},
		{"manifest record", "MANIFEST-*", 0.3, false},
		{"manifest cut", "MANIFEST-*", -50, false},
		{"options", "OPTIONS-*", 0.5, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.CopyFS(dir, os.DirFS(base)))
			file := damage(t, dir, c.glob, c.at)
			// (A serve that starts on it is stopped after 20 s, and fails.)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var o, e bytes.Buffer
			code := run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--data-dir", dir}, &o, &e, nil)
			out, stderr := o.String(), e.String()
			require.Equal(t, 1, code, "%s%s", out, stderr)
			require.Contains(t, stderr, file, "serve names the file")
			require.Contains(t, stderr, "damaged")
			require.NotContains(t, out+stderr, "goroutine", "no panic")
			code, out, stderr = runMain("data", "--data-dir", dir, "check")
			require.Equal(t, 1, code, "%s%s", out, stderr)
			require.Contains(t, stderr, file, "check names the file")
			code, out, stderr = runMain("data", "--data-dir", dir, "repair")
			require.NotContains(t, out+stderr, "goroutine", "no panic")
			if !c.repairs {
				require.Equal(t, 1, code, "%s%s", out, stderr)
				require.Contains(t, stderr, "backup", "says why it cannot mend it")
				return
			}
			require.Equal(t, 0, code, "%s%s", out, stderr)
			require.Contains(t, out, file)
			code, out, stderr = runMain("data", "--data-dir", dir, "check")
			require.Equal(t, 0, code, "%s%s", out, stderr)
			url, _ := startProcessNode(t, "--data-dir", dir, "--profiles", "langgraph")
			st, body, err := platformCall(context.Background(), "POST", url+"/store/items/search", `{"namespace_prefix": ["d"], "limit": 1000}`)
			require.NoError(t, err)
			require.Equal(t, 200, st, "%s", body)
			var found struct{ Items []any }
			require.NoError(t, json.Unmarshal(body, &found))
			if c.name == "options" {
				require.Len(t, found.Items, 100, "nothing lost")
				st, body, err = platformCall(context.Background(), "GET", url+"/threads/"+thread, "")
				require.NoError(t, err)
				require.Equal(t, 200, st, "%s", body)
			} else {
				aside, err := filepath.Glob(filepath.Join(dir, "damaged-*", filepath.Base(file)))
				require.NoError(t, err)
				require.Len(t, aside, 1, "the damaged table is kept aside")
				// A 4 KiB block of 300-byte items: a few lost, the rest kept.
				require.GreaterOrEqual(t, len(found.Items), 80, "what could be read is kept")
				require.Less(t, len(found.Items), 100, "what could not be read is gone")
			}
		})
	}
}

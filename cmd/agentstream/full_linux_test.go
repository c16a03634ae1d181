package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentstream/agentstream/internal/testkit/fulldisk"
)

// TestAFullDiskNeverStopsThePlatform: a server on a real disk (a 96 MiB
// tmpfs) with --data-min-free 1, three clients writing through the
// Platform API (threads, updateState, the store, runs.wait); the disk is filled to its last byte: writes are answered
// 503 naming the full disk, the process goes on (no panic) and answers
// reads; once space returns writes are answered again; killed (kill -9)
// and started again, every write answered 2xx is there. Started on the
// full disk, it says so and exits.
func TestAFullDiskNeverStopsThePlatform(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers")
	}
	mnt := fulldisk.Tmpfs(t, 96<<20)
	dir := filepath.Join(mnt, "store")
	url, proc := startProcessNode(t, "--data-dir", dir, "--data-min-free", "1", "--profiles", "langgraph")
	pcs := make([]*platformClient, 3)
	for c := range pcs {
		pcs[c] = &platformClient{c: c}
		pcs[c].setup(t, url)
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, pc := range pcs {
		wg.Add(1)
		go func() { defer wg.Done(); pc.write(ctx, url) }()
	}
	put := func(key string) (int, string) {
		st, out, err := platformCall(context.Background(), "PUT", url+"/store/items", `{"namespace": ["probe"], "key": "`+key+`", "value": {"pad": "`+strings.Repeat("x", 4000)+`"}}`)
		if err != nil {
			return 0, err.Error() // slow on a loaded machine: asked again
		}
		return st, string(out)
	}
	time.Sleep(300 * time.Millisecond) // writes under way
	filler := fulldisk.Fill(t, mnt)
	var refusal string
	require.Eventually(t, func() bool {
		st, out := put("p")
		if st == 503 {
			refusal = out
		}
		return st == 503
	}, 20*time.Second, 5*time.Millisecond, "writes are refused once the disk is full")
	require.Contains(t, refusal, "disk", "the refusal names the cause")
	st, _, err := platformCall(context.Background(), "GET", url+"/threads/"+pcs[0].runThread, "")
	require.NoError(t, err)
	require.Equal(t, 200, st, "reads are served")
	require.Nil(t, proc.ProcessState, "the process goes on")

	require.NoError(t, os.Remove(filler))
	require.Eventually(t, func() bool { st, _ := put("q"); return st == 204 }, 20*time.Second, 20*time.Millisecond, "writes are taken again once space returns")
	time.Sleep(200 * time.Millisecond)
	require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
	_ = proc.Wait()
	stop()
	wg.Wait()
	url, proc = startProcessNode(t, "--data-dir", dir, "--data-min-free", "1", "--profiles", "langgraph")
	for _, pc := range pcs {
		require.Empty(t, pc.check(t, url), "client %d: answered 2xx and lost", pc.c)
	}
	require.NoError(t, proc.Process.Signal(syscall.SIGKILL))
	_ = proc.Wait()

	// Started on a full disk: it says so and exits.
	filler = fulldisk.Fill(t, mnt)
	defer os.Remove(filler)
	sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var o, e bytes.Buffer
	code := run(sctx, []string{"serve", "--addr", "127.0.0.1:0", "--data-dir", dir, "--data-min-free", "1"}, &o, &e, nil)
	require.Equal(t, 1, code, "%s%s", o.String(), e.String())
	require.Contains(t, e.String(), "to start")
}

package registry_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentstream/agentstream/assistants"
	"github.com/agentstream/agentstream/diskstore"
	"github.com/agentstream/agentstream/internal/testkit/redistest"
	"github.com/agentstream/agentstream/redisstore"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/registry"
)

// engines are a server on each engine, for fn.
func onEachEngine(b *testing.B, fn func(b *testing.B, srv *server.Server)) {
	run := func(name string, eng server.Engine) {
		b.Run(name, func(b *testing.B) {
			srv := server.New(server.Config{Engine: eng})
			assistants.Register(srv)
			b.Cleanup(func() { _ = srv.Close(context.Background()) })
			fn(b, srv)
		})
	}
	run("memory", nil)
	eng, err := diskstore.Open(diskstore.Options{Dir: b.TempDir()})
	require.NoError(b, err)
	run("disk", eng)
	rs := redistest.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	reng, err := redisstore.New(ctx, redisstore.Options{URL: rs.URL(), TTL: time.Hour})
	require.NoError(b, err)
	run("redis", reng)
}

// BenchmarkAssistantsSearch: a search by metadata among 10,000
// assistants (one matching), and a read of one by id.
func BenchmarkAssistantsSearch(b *testing.B) {
	onEachEngine(b, func(b *testing.B, srv *server.Server) {
		reg := registry.Of(srv)
		ctx := context.Background()
		const n = 10_000
		for i := range n {
			_, _, err := reg.Create(ctx, nil, registry.Assistant{ID: fmt.Sprintf("a-%05d", i), GraphID: "echo", Metadata: map[string]any{"i": float64(i)}}, "raise")
			require.NoError(b, err)
		}
		b.Run("search", func(b *testing.B) {
			for b.Loop() {
				found, total, err := reg.Search(ctx, nil, registry.Query{Metadata: map[string]any{"i": float64(4242)}, Limit: 10})
				if err != nil || total != 1 || len(found) != 1 {
					b.Fatalf("%v %d %d", err, total, len(found))
				}
			}
		})
		b.Run("get", func(b *testing.B) {
			for b.Loop() {
				if _, ok, err := reg.Get(ctx, "a-04242"); err != nil || !ok {
					b.Fatal(err, ok)
				}
			}
		})
	})
}

// TestVersionsAndLatest: the registry's own rules on the memory engine:
// versions numbered from 1, the latest set back, a graph's own kept
// once updated and deleted back to what the server made.
func TestVersionsAndLatest(t *testing.T) {
	srv := server.New(server.Config{})
	assistants.Register(srv)
	defer srv.Close(context.Background())
	reg := registry.Of(srv)
	ctx := context.Background()
	a, created, err := reg.Create(ctx, nil, registry.Assistant{GraphID: "echo", Name: "one"}, "raise")
	require.NoError(t, err)
	require.True(t, created)
	two := "two"
	a2, err := reg.Update(ctx, nil, a.ID, registry.Changes{Name: &two})
	require.NoError(t, err)
	require.Equal(t, 2, a2.Version)
	back, err := reg.SetLatest(ctx, nil, a.ID, 1)
	require.NoError(t, err)
	require.Equal(t, "one", back.Name)
	three := "three"
	a3, err := reg.Update(ctx, nil, a.ID, registry.Changes{Name: &three})
	require.NoError(t, err)
	require.Equal(t, 3, a3.Version, "numbers go on after the newest, not the latest")
	vs, err := reg.Versions(ctx, nil, a.ID, nil, 10, 0)
	require.NoError(t, err)
	require.Len(t, vs, 3)
	require.NoError(t, reg.Delete(ctx, nil, a.ID))
	_, ok, err := reg.Get(ctx, a.ID)
	require.NoError(t, err)
	require.False(t, ok)
	require.ErrorIs(t, reg.Delete(ctx, nil, registry.GraphAssistantID("echo")), registry.ErrExists, "a graph's own is not deleted")
}

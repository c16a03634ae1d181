package threads_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/agentstream/agentstream/diskstore"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/threads"
	"github.com/stretchr/testify/require"
)

// TestSearchByMetadataUsesTheIndex: a search by metadata answers the
// same whether the engine's index narrows it (scalar members) or the
// records are all read (an object member alone), on the in-memory and
// disk engines, after updates and deletes too.
func TestSearchByMetadataUsesTheIndex(t *testing.T) {
	engines := map[string]func(t *testing.T) server.Config{
		"memory": func(*testing.T) server.Config { return server.Config{} },
		"disk": func(t *testing.T) server.Config {
			eng, err := diskstore.Open(diskstore.Options{Dir: t.TempDir()})
			require.NoError(t, err)
			return server.Config{Engine: eng}
		},
	}
	for name, cfg := range engines {
		t.Run(name, func(t *testing.T) {
			s := server.New(cfg(t))
			ctx := context.Background()
			t.Cleanup(func() { _ = s.Close(ctx) })
			ids := func(q threads.ThreadQuery) []string {
				q.Limit, q.SortBy, q.SortOrder = 1000, "thread_id", "asc"
				found, _, err := threads.Of(s).Search(ctx, nil, q, true)
				require.NoError(t, err)
				out := []string{}
				for _, f := range found {
					out = append(out, f.ID)
				}
				return out
			}
			for i := range 30 {
				md := map[string]any{"n": float64(i % 3), "team": fmt.Sprint("t", i%2), "tags": map[string]any{"a": float64(i % 5)}}
				if i%10 == 0 {
					md["flag"] = true
				}
				_, _, err := threads.Of(s).Create(ctx, nil, fmt.Sprintf("th-%02d", i), md, "raise")
				require.NoError(t, err)
			}
			require.Equal(t, []string{"th-00", "th-10", "th-20"}, ids(threads.ThreadQuery{Metadata: map[string]any{"flag": true}}))
			require.Equal(t, []string{"th-00", "th-06", "th-12", "th-18", "th-24"}, ids(threads.ThreadQuery{Metadata: map[string]any{"n": float64(0), "team": "t0"}}))
			require.Equal(t, []string{"th-00", "th-10", "th-20"}, ids(threads.ThreadQuery{Metadata: map[string]any{"tags": map[string]any{"a": float64(0)}, "team": "t0"}}), "an object member is checked, not indexed")
			require.Len(t, ids(threads.ThreadQuery{Metadata: map[string]any{"tags": map[string]any{"a": float64(1)}}}), 6, "an object member alone: every record read")
			require.Equal(t, []string{"th-03", "th-05"}, ids(threads.ThreadQuery{IDs: []string{"th-05", "th-03", "th-05", "nope"}}))
			_, _, err := threads.Of(s).Update(ctx, "th-10", map[string]any{"flag": false})
			require.NoError(t, err)
			_, err = threads.Of(s).Delete(ctx, "th-20")
			require.NoError(t, err)
			require.Equal(t, []string{"th-00"}, ids(threads.ThreadQuery{Metadata: map[string]any{"flag": true}}), "after an update and a delete")
			require.Equal(t, []string{"th-10"}, ids(threads.ThreadQuery{Metadata: map[string]any{"flag": false}}))
		})
	}
}

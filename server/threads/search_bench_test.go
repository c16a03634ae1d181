package threads_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/threads"
)

// BenchmarkSearchThreads is one Platform threads.search over 100,000
// thread records in memory: selected by a metadata member that a tenth
// of them hold, the newest 10 (the SDK's default page).
func BenchmarkSearchThreads(b *testing.B) {
	st := server.NewMemoryState()
	srv := server.New(server.Config{Stores: server.MemoryStores(nil, st)})
	b.Cleanup(func() { _ = srv.Close(context.Background()) })
	ctx := context.Background()
	base := time.Now()
	for i := 0; i < 100_000; i++ {
		rec := server.ThreadRecord{ID: fmt.Sprintf("t-%06d", i), CreatedAt: base.Add(time.Duration(i) * time.Millisecond), UpdatedAt: base,
			Metadata: map[string]any{"user": fmt.Sprint("u", i%10), "n": float64(i)}, Config: map[string]any{}}
		if err := st.SetRecord(ctx, rec); err != nil {
			b.Fatal(err)
		}
	}
	cat := threads.Of(srv)
	q := threads.ThreadQuery{Metadata: map[string]any{"user": "u3"}, Limit: 10}
	b.ResetTimer()
	for b.Loop() {
		found, total, err := cat.Search(ctx, nil, q, true)
		if err != nil || len(found) != 10 || total != 10_000 {
			b.Fatal(err, len(found), total)
		}
	}
}

// Command redisbench compares the two Redis clients the Redis engine could
// use, on the engine's hot path: appending an event to a thread's stream
// (XADD with an explicit id and MAXLEN ~) and publishing it (PUBLISH),
// from many goroutines at once, as many threads publishing do.
//
//	go run . -addr 127.0.0.1:6379 -n 200000 -c 64
//
// It is a separate module so that the server's module keeps one client.
package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func run(name string, n, c int, op func(ctx context.Context, thread string, seq uint64) error) {
	ctx := context.Background()
	var next atomic.Uint64
	var wg sync.WaitGroup
	start, c0 := time.Now(), cpu()
	for g := 0; g < c; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			thread := "redisbench:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":" + name + ":" + strconv.Itoa(g)
			var seq uint64
			for next.Add(1) <= uint64(n) {
				seq++
				if err := op(ctx, thread, seq); err != nil {
					panic(err)
				}
			}
		}(g)
	}
	wg.Wait()
	el := time.Since(start)
	fmt.Printf("%-9s %d events (XADD+PUBLISH) from %d goroutines: %.0f/s, %.2f µs client CPU per event\n",
		name, n, c, float64(n)/el.Seconds(), float64((cpu()-c0).Microseconds())/float64(n))
}

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "redis address")
	n := flag.Int("n", 200000, "events")
	c := flag.Int("c", 64, "concurrent publishers")
	flag.Parse()
	payload := make([]byte, 230)
	for i := range payload {
		payload[i] = 'x'
	}

	gr := goredis.NewClient(&goredis.Options{Addr: *addr, PoolSize: *c})
	defer gr.Close()
	run("go-redis", *n, *c, func(ctx context.Context, thread string, seq uint64) error {
		_, err := gr.Pipelined(ctx, func(p goredis.Pipeliner) error {
			p.XAdd(ctx, &goredis.XAddArgs{Stream: thread, ID: strconv.FormatUint(seq, 10) + "-0", MaxLen: 8192, Approx: true, Values: []any{"e", payload}})
			p.Publish(ctx, thread, payload)
			return nil
		})
		return err
	})

	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{*addr}, DisableCache: true})
	if err != nil {
		panic(err)
	}
	defer rc.Close()
	run("rueidis", *n, *c, func(ctx context.Context, thread string, seq uint64) error {
		for _, r := range rc.DoMulti(ctx,
			rc.B().Xadd().Key(thread).Maxlen().Almost().Threshold("8192").Id(strconv.FormatUint(seq, 10)+"-0").FieldValue().FieldValue("e", rueidis.BinaryString(payload)).Build(),
			rc.B().Publish().Channel(thread).Message(rueidis.BinaryString(payload)).Build(),
		) {
			if r.Error() != nil {
				return r.Error()
			}
		}
		return nil
	})
}

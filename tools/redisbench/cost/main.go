// Command cost measures what Redis itself spends (its used_cpu_sys and
// used_cpu_user, read with INFO before and after) per event written the
// way the Redis engine writes one: an XADD with an explicit id and MINID
// trimming, and an SPUBLISH of the same bytes to the thread's channel,
// from a Lua script. Events go out at a fixed rate, in round trips of
// -per events each, over -threads threads, with -subs connections
// subscribed to every thread's channel (the nodes that follow them).
//
//	cd tools/redisbench && go run ./cost -addr 127.0.0.1:PORT -per 1
//
// -mode script sends one script per event (as the engine does for a
// thread's run of events); many sends one script for all the events of a
// round trip (what a single Redis, not a cluster, would allow); plain
// sends XADD and SPUBLISH as two commands. Use a redis-server of its
// own: the run flushes it.
package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

const perEvent = `
for i = 2, #ARGV, 2 do
  redis.call('XADD', KEYS[1], 'MINID', '~', '0', ARGV[i], 'e', ARGV[i + 1])
  if ARGV[1] ~= '' then redis.call('SPUBLISH', ARGV[1], ARGV[i + 1]) end
end
return 1`

// perRoundTrip: KEYS are the streams; three arguments per key: the
// channel (empty: none), the entry id and the event.
const perRoundTrip = `
for k = 1, #KEYS do
  local b = (k - 1) * 3
  redis.call('XADD', KEYS[k], 'MINID', '~', '0', ARGV[b + 2], 'e', ARGV[b + 3])
  if ARGV[b + 1] ~= '' then redis.call('SPUBLISH', ARGV[b + 1], ARGV[b + 3]) end
end
return 1`

// redisCPU is the seconds of CPU the Redis process has used.
func redisCPU(ctx context.Context, c rueidis.Client) float64 {
	info, err := c.Do(ctx, c.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		panic(err)
	}
	total := 0.0
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return total
}

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "redis address (flushed)")
	mode := flag.String("mode", "script", "script, many or plain")
	subs := flag.Int("subs", 1, "connections subscribed to every thread's channel")
	per := flag.Int("per", 1, "events per round trip")
	rate := flag.Int("rate", 10000, "events a second")
	events := flag.Int("events", 100000, "events in all")
	threads := flag.Int("threads", 500, "threads")
	size := flag.Int("size", 400, "bytes per event")
	flag.Parse()

	ctx := context.Background()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{*addr}, DisableCache: true})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	if err := c.Do(ctx, c.B().Flushall().Build()).Error(); err != nil {
		panic(err)
	}
	stream := func(t int) string { return fmt.Sprintf("cost:{t%d}:events", t) }
	channel := func(t int) string {
		if *subs == 0 {
			return ""
		}
		return fmt.Sprintf("cost:{t%d}:live", t)
	}
	var received atomic.Int64
	for range *subs {
		dc, cancel := c.Dedicate()
		defer cancel()
		dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(rueidis.PubSubMessage) { received.Add(1) }})
		chans := make([]string, *threads)
		for t := range chans {
			chans[t] = channel(t)
		}
		if err := dc.Do(ctx, dc.B().Ssubscribe().Channel(chans...).Build()).Error(); err != nil {
			panic(err)
		}
	}
	payload := strings.Repeat("x", *size)
	seq := make([]int, *threads)
	next := 0
	event := func() (int, string) {
		t := next % *threads
		next++
		seq[t]++
		return t, strconv.Itoa(seq[t]) + "-1"
	}
	before := redisCPU(ctx, c)
	start := time.Now()
	trips := (*events + *per - 1) / *per
	for trip := 0; trip < trips; trip++ {
		// Round trips at the rate: each leaves when it is due.
		if d := time.Until(start.Add(time.Duration(float64(trip**per) / float64(*rate) * float64(time.Second)))); d > 0 {
			time.Sleep(d)
		}
		var cmds rueidis.Commands
		switch *mode {
		case "script":
			for range *per {
				t, id := event()
				cmds = append(cmds, c.B().Eval().Script(perEvent).Numkeys(1).Key(stream(t)).Arg(channel(t), id, payload).Build())
			}
		case "many":
			keys, args := make([]string, 0, *per), make([]string, 0, 3**per)
			for range *per {
				t, id := event()
				keys = append(keys, stream(t))
				args = append(args, channel(t), id, payload)
			}
			cmds = append(cmds, c.B().Eval().Script(perRoundTrip).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
		case "plain":
			for range *per {
				t, id := event()
				cmds = append(cmds, c.B().Xadd().Key(stream(t)).Minid().Almost().Threshold("0").Id(id).FieldValue().FieldValue("e", payload).Build())
				if *subs > 0 {
					cmds = append(cmds, c.B().Spublish().Channel(channel(t)).Message(payload).Build())
				}
			}
		default:
			panic("-mode: script, many or plain")
		}
		for _, r := range c.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				panic(err)
			}
		}
	}
	elapsed := time.Since(start)
	time.Sleep(200 * time.Millisecond) // the last messages reach the subscribers
	spent := redisCPU(ctx, c) - before
	n := trips * *per
	fmt.Printf("%s, %d per round trip, %d subscribers: %d events in %v (%.0f/s): Redis CPU %.2f s, %.1f µs per event; %d messages received\n",
		*mode, *per, *subs, n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), spent, spent/float64(n)*1e6, received.Load())
}

package server

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server/stream"
)

func benchThread(b *testing.B) (*Server, *thread) {
	b.Helper()
	s := New(Config{QueueBytes: 1 << 30, MaxSessionSubscriptions: 1 << 20})
	b.Cleanup(func() { _ = s.Close(b.Context()) })
	t, err := s.thread("bench", true)
	if err != nil {
		b.Fatal(err)
	}
	return s, t
}

// BenchmarkDeliver1000 hands one event to 1,000 matching in-process
// sessions of a thread and has each read it: the cost per delivery is
// ns/op divided by 1,000 (reported as ns/delivery).
func BenchmarkDeliver1000(b *testing.B) {
	s, _ := benchThread(b)
	const n = 1000
	subs := make([]*Session, n)
	cursor := Cursor{}
	for i := range subs {
		ss, _, err := s.Subscribe("bench", channels.Filter{Channels: []string{channels.Custom}, Depth: channels.Unlimited}, &cursor)
		if err != nil {
			b.Fatal(err)
		}
		subs[i] = ss
	}
	t, _ := s.thread("bench", false)
	e, err := buildEvent(customEvent("x", protocol.CustomData{Payload: "p"}), "e", 1, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e.Seq = uint64(i + 1) // a new event each time, without building one
		t.mu.Lock()
		t.deliver(e)
		t.mu.Unlock()
		for _, s := range subs {
			if _, ok, _ := s.TryNext(); !ok {
				b.Fatal("not delivered")
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/delivery")
}

// BenchmarkSessionSubscriptions hands events to one session (one
// connection) that has 1, 100 or 1,000 subscriptions, every one of which
// matches, with filters of several shapes (channel lists, all channels, a
// named custom channel, namespace prefixes, depths), and reads each
// event: the event is queued and read once, and the cost per event stays
// flat as subscriptions grow.
func BenchmarkSessionSubscriptions(b *testing.B) {
	shapes := []channels.Filter{
		{Channels: []string{channels.Custom}, Depth: channels.Unlimited},
		{Channels: []string{channels.Lifecycle, channels.Custom}, Depth: channels.Unlimited},
		{Depth: channels.Unlimited},
		{Channels: []string{"custom:x"}, Depth: channels.Unlimited},
		{Channels: []string{channels.Custom}, Namespaces: []channels.Namespace{{"agent"}}, Depth: 1},
		{Namespaces: []channels.Namespace{{"agent"}, {"agent", "sub"}}, Depth: channels.Unlimited},
		{Channels: []string{channels.Custom}, Depth: 3},
	}
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("subscriptions=%d", n), func(b *testing.B) {
			s, t := benchThread(b)
			ss := s.NewSession("bench")
			for i := 0; i < n; i++ {
				if _, _, err := ss.Subscribe(shapes[i%len(shapes)], nil); err != nil {
					b.Fatal(err)
				}
			}
			e, err := buildEvent(customEvent("x", protocol.CustomData{Payload: "p"}), "e", 1, 0)
			if err != nil {
				b.Fatal(err)
			}
			e.Namespace = channels.Namespace{"agent", "sub"}
			// A subscription to every channel starts with the thread's
			// values (a snapshot, no seq): read it first.
			for {
				if _, ok, _ := ss.TryNext(); !ok {
					break
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				e.Seq = uint64(i + 1)
				t.mu.Lock()
				t.deliver(e)
				t.mu.Unlock()
				if _, ok, _ := ss.TryNext(); !ok {
					b.Fatal("not delivered")
				}
				if x, ok, _ := ss.TryNext(); ok {
					b.Fatalf("delivered twice: %+v", x)
				}
			}
		})
	}
}

// BenchmarkPublish publishes events (building and encoding them included)
// on a thread that has 0 or 10,000 subscriptions none of which match: the
// index keeps the second within twice the first.
func BenchmarkPublish(b *testing.B) {
	for _, others := range []int{0, 10000} {
		b.Run(fmt.Sprintf("nonmatching=%d", others), func(b *testing.B) {
			s, t := benchThread(b)
			for i := 0; i < others; i++ {
				f := channels.Filter{Channels: []string{channels.Tools}, Namespaces: []channels.Namespace{{fmt.Sprint("agent", i%100)}}, Depth: channels.Unlimited}
				if _, _, err := s.Subscribe("bench", f, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				d := customEvent("x", protocol.CustomData{Payload: "payload"})
				t.mu.Lock()
				if _, err := t.publish(d); err != nil {
					b.Fatal(err)
				}
				t.mu.Unlock()
			}
		})
	}
}

// firehoseLike is a 100-byte custom payload like the firehose assistant's.
type firehoseLike struct {
	Index int    `json:"index"`
	TS    int64  `json:"ts"`
	Pad   string `json:"pad"`
}

// firehoseOwn is firehoseLike writing its own JSON, as the firehose
// assistant's payload does (JSONAppender).
type firehoseOwn firehoseLike

func (f firehoseOwn) AppendJSON(b []byte) []byte {
	b = append(b, `{"index":`...)
	b = strconv.AppendInt(b, int64(f.Index), 10)
	b = append(b, `,"ts":`...)
	b = strconv.AppendInt(b, f.TS, 10)
	b = append(b, `,"pad":`...)
	b = stream.AppendJSONString(b, f.Pad)
	return append(b, '}')
}

// payloads are the two ways a benchmark's custom payload is encoded:
// by encoding/json's reflection, or by its own AppendJSON.
var payloads = []struct {
	name string
	make func(i int, pad string) any
}{
	{"reflect", func(i int, pad string) any {
		return firehoseLike{Index: i, TS: 1763950000000000000 + int64(i), Pad: pad}
	}},
	{"own", func(i int, pad string) any {
		return firehoseOwn{Index: i, TS: 1763950000000000000 + int64(i), Pad: pad}
	}},
}

// BenchmarkPublishCustom publishes 100-byte custom events (built, encoded,
// buffered, handed to 0, 1 or 2 subscribed sessions that read them): the
// per-event cost of the server without the socket write.
func BenchmarkPublishCustom(b *testing.B) {
	for _, pl := range payloads {
		for _, subs := range []int{0, 1, 2} {
			b.Run(fmt.Sprintf("payload=%s/subscribers=%d", pl.name, subs), func(b *testing.B) {
				s, t := benchThread(b)
				var sessions []*Session
				for range subs {
					ss, _, err := s.Subscribe("bench", channels.Filter{Channels: []string{channels.Custom}, Depth: channels.Unlimited}, nil)
					if err != nil {
						b.Fatal(err)
					}
					sessions = append(sessions, ss)
				}
				name := "firehose"
				pad := strings.Repeat("x", 36)
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					d := customEvent(name, protocol.CustomData{Name: &name, Payload: pl.make(i, pad)})
					t.mu.Lock()
					e, err := t.publish(d)
					t.mu.Unlock()
					if err != nil {
						b.Fatal(err)
					}
					if i == 0 && len(e.JSON()) < 200 {
						b.Fatalf("a smaller event than meant: %s", e.JSON())
					}
					for _, ss := range sessions {
						if _, ok, _ := ss.TryNext(); !ok {
							b.Fatal("not delivered")
						}
					}
				}
			})
		}
	}
}

// BenchmarkRunStart starts a run on a new thread each time (what a burst
// of conversations starting costs): the command, the thread, the run and
// its goroutine, whose assistant returns at once.
func BenchmarkRunStart(b *testing.B) {
	s := New(Config{MaxThreads: 1 << 30})
	b.Cleanup(func() { _ = s.Close(b.Context()) })
	s.Register("noop", AssistantFunc(func(ctx context.Context, rc *RunContext) error { return nil }))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cmd := &protocol.ClientCommand{Value: &protocol.ClientCommandRunStart{ID: 1, Params: protocol.RunStartParams{AssistantID: "noop"}}}
		if _, e := s.Do(b.Context(), fmt.Sprint("t", i), cmd); e != nil {
			b.Fatal(e)
		}
	}
}

// BenchmarkPublishManyThreads publishes 100-byte custom events round the
// 1,000 threads of the many-conversations workload, each with two
// subscribed sessions that read them: with buffers that keep growing (the
// default 8,192 events per thread: every event stays, as in a 10 s load
// run) and with buffers that recycle (16 events). The difference is what
// a growing heap costs (collections marking every buffered event, fresh
// memory to clear).
func BenchmarkPublishManyThreads(b *testing.B) {
	for _, buf := range []int{DefaultBufferEvents, 16} {
		b.Run(fmt.Sprintf("buffer=%d", buf), func(b *testing.B) {
			s := New(Config{BufferEvents: buf})
			b.Cleanup(func() { _ = s.Close(b.Context()) })
			const n = 1000
			threads := make([]*thread, n)
			sessions := make([][]*Session, n)
			for i := range threads {
				id := fmt.Sprint("t", i)
				var err error
				if threads[i], err = s.thread(id, true); err != nil {
					b.Fatal(err)
				}
				for range 2 {
					ss, _, err := s.Subscribe(id, channels.Filter{Channels: []string{channels.Custom}, Depth: channels.Unlimited}, nil)
					if err != nil {
						b.Fatal(err)
					}
					sessions[i] = append(sessions[i], ss)
				}
			}
			name := "firehose"
			pad := strings.Repeat("x", 36)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t := threads[i%n]
				d := customEvent(name, protocol.CustomData{Name: &name, Payload: firehoseOwn{Index: i, TS: 1763950000000000000 + int64(i), Pad: pad}})
				t.mu.Lock()
				_, err := t.publish(d)
				t.mu.Unlock()
				if err != nil {
					b.Fatal(err)
				}
				for _, ss := range sessions[i%n] {
					if _, ok, _ := ss.TryNext(); !ok {
						b.Fatal("not delivered")
					}
				}
			}
		})
	}
}

// BenchmarkPublish10kSubscriptions publishes a custom event on a thread
// with 10,000 sessions and has each read it, with authentication off (the
// sessions opened as they are today) and on (each opened after Authorize,
// as its own principal granted the thread, with a credential that expires
// in an hour, so each holds an expiry timer). Authorization happens when
// a session opens, not per event: the two cost the same per delivery.
func BenchmarkPublish10kSubscriptions(b *testing.B) {
	for _, authOn := range []bool{false, true} {
		name := "auth=off"
		if authOn {
			name = "auth=on"
		}
		b.Run(name, func(b *testing.B) {
			s, t := benchThread(b)
			const n = 10000
			subs := make([]*Session, n)
			f := channels.Filter{Channels: []string{channels.Custom}, Depth: channels.Unlimited}
			for i := range subs {
				if authOn {
					p := &auth.Principal{Subject: fmt.Sprintf("user-%d", i), Threads: []string{"ben*"}, Expires: time.Now().Add(time.Hour)}
					if err := s.Authorize(p, "bench", true); err != nil {
						b.Fatal(err)
					}
					subs[i] = s.NewSession("bench")
					subs[i].ExpireAt(p.Expires)
					if _, _, err := subs[i].Subscribe(f, nil); err != nil {
						b.Fatal(err)
					}
				} else {
					ss, _, err := s.Subscribe("bench", f, nil)
					if err != nil {
						b.Fatal(err)
					}
					subs[i] = ss
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := t.publish(customEvent("x", protocol.CustomData{Payload: "p"})); err != nil {
					b.Fatal(err)
				}
				for _, ss := range subs {
					if _, ok, _ := ss.TryNext(); !ok {
						b.Fatal("not delivered")
					}
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/delivery")
		})
	}
}

// BenchmarkReplay subscribes to a thread holding 8,192 buffered 100-byte
// custom events with no cursor (a new watcher: everything is replayed),
// reads them all and ends the session: what a full replay costs the
// server before the socket writes, reported per replayed event.
func BenchmarkReplay(b *testing.B) {
	s, t := benchThread(b)
	const n = DefaultBufferEvents
	name := "firehose"
	pad := strings.Repeat("x", 36)
	for i := range n {
		d := customEvent(name, protocol.CustomData{Name: &name, Payload: payloads[1].make(i, pad)})
		t.mu.Lock()
		_, err := t.publish(d)
		t.mu.Unlock()
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ss, replayed, err := s.Subscribe("bench", channels.Filter{Channels: []string{channels.Custom}, Depth: channels.Unlimited}, nil)
		if err != nil {
			b.Fatal(err)
		}
		if replayed != n {
			b.Fatalf("replayed %d of %d", replayed, n)
		}
		for range n {
			if _, ok, _ := ss.TryNext(); !ok {
				b.Fatal("not replayed")
			}
		}
		ss.Close()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/event")
}

func customEvent(name string, d protocol.CustomData) eventData {
	return eventData{p: protocol.NewServerEventCustom(d), name: name}
}

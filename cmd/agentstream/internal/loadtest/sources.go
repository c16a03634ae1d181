package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentstream/agentstream/client"
)

// The sources of a measurement's events (Config.Source): each publishes
// Count custom events named "firehose" whose payload holds the time it
// made them, so that latency is publish-to-delivery whatever the source.
const (
	// SourceFirehose is the built-in firehose assistant, in the server.
	SourceFirehose = "firehose"
	// SourceWorker is a remote worker the tool runs itself (the Go helper,
	// client.ServeWorker, batching as it does), serving the run.
	SourceWorker = "worker"
	// SourceHTTP is a producer the tool runs itself, publishing batches
	// of events with POST /threads/{id}/events.
	SourceHTTP = "http"
)

// The other wires a measurement may compare with the protocol's SSE
// (Config.Wire).
const (
	// WireJobs is the job stream: the events are envelopes posted to
	// /jobs/{id}/envelopes, read from /jobs/{id}/stream.
	WireJobs = "jobs"
	// WireInstanceAI is Instance AI: the events are custom status events
	// (a status frame each) posted to /threads/{id}/events, read from
	// /instance-ai/events/{id}.
	WireInstanceAI = "instance-ai"
)

// payloadFor is event i as the producer of wire posts it: its send time
// is the first "ts" member, or, in a status message, "ts=".
func payloadFor(wire string, i int, pad string) []byte {
	now := strconv.FormatInt(time.Now().UnixNano(), 10)
	switch wire {
	case WireJobs:
		return []byte(`{"node_id":"load","node_type":"load","payload_version":"v1","payload":{"ts":` + now + `,"index":` + strconv.Itoa(i) +
			`,"pad":"` + pad + `"},"ts":` + strconv.FormatInt(time.Now().UnixMilli(), 10) + `}`)
	case WireInstanceAI:
		return []byte(`{"type":"event","method":"custom","params":{"namespace":[],"data":{"name":"status","payload":{"message":"ts=` + now +
			` index=` + strconv.Itoa(i) + ` ` + pad + `"}}}}`)
	}
	return firehosePayload(i, pad)
}

// httpBatch is how many events the HTTP producer sends per request, as
// many as a worker's batch holds at most.
const httpBatch = 256

// firehosePayload is a firehose event's payload as the built-in writes it.
func firehosePayload(i int, pad string) []byte {
	b := []byte(`{"type":"event","method":"custom","params":{"namespace":[],"data":{"name":"firehose","payload":{"index":`)
	b = strconv.AppendInt(b, int64(i), 10)
	b = append(b, `,"ts":`...)
	b = strconv.AppendInt(b, time.Now().UnixNano(), 10)
	b = append(b, `,"pad":"`...)
	b = append(b, pad...)
	return append(b, `"}}}}`...)
}

func padOf(size int) string {
	if size > 64 {
		return strings.Repeat("x", size-64)
	}
	return ""
}

// dueAt is when event i is due at rate per second from start.
func dueAt(start time.Time, i int, rate float64) time.Time {
	return start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
}

// pace waits until event i is due at rate per second from start (0: no
// wait).
func pace(ctx context.Context, start time.Time, i int, rate float64) error {
	if rate <= 0 {
		return ctx.Err()
	}
	if d := time.Until(dueAt(start, i, rate)); d > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
	}
	return nil
}

// publish makes cfg's source publish its events on thread; fail gets an
// error that comes after publish returned.
func publish(ctx context.Context, cfg Config, thread string, fail func(error)) error {
	switch cfg.Source {
	case "", SourceFirehose:
		if cfg.Wire != "" {
			break
		}
		body := fmt.Sprintf(`{"id": 1, "method": "run.start", "params": {"assistant_id": "firehose", "input": {"count": %d, "rate": %g, "size": %d}}}`, cfg.Count, cfg.Rate, cfg.Size)
		return command(cfg.URL, thread, body)
	case SourceWorker:
		if cfg.Wire != "" {
			break
		}
		return publishWorker(ctx, cfg, thread, fail)
	case SourceHTTP:
		if cfg.Wire != "" && cfg.Wire != WireJobs && cfg.Wire != WireInstanceAI {
			return fmt.Errorf("unknown wire %q (jobs or instance-ai)", cfg.Wire)
		}
		go func() {
			if err := publishHTTP(ctx, cfg, thread); err != nil && ctx.Err() == nil {
				fail(err)
			}
		}()
		return nil
	}
	return fmt.Errorf("unknown source %q (firehose, worker or http; a wire's events come from http)", cfg.Source)
}

func command(base, thread, body string) error {
	resp, err := http.Post(base+"/threads/"+thread+"/commands", "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(`"success"`)) {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	return nil
}

// publishWorker connects a Go worker serving a fresh assistant id, starts
// a run of it on thread, and lets the worker emit the events; the worker
// stops when ctx ends.
func publishWorker(ctx context.Context, cfg Config, thread string, fail func(error)) error {
	assistant := "load-worker-" + thread
	pad := padOf(cfg.Size)
	go func() {
		err := client.ServeWorker(ctx, client.WorkerOptions{URL: cfg.URL, Assistants: []string{assistant}}, func(ctx context.Context, run *client.WorkerRun) error {
			start := time.Now()
			for i := 0; i < cfg.Count; i++ {
				if err := pace(ctx, start, i, cfg.Rate); err != nil {
					return err
				}
				if err := run.Emit(json.RawMessage(firehosePayload(i, pad))); err != nil {
					return err
				}
			}
			return nil
		})
		if ctx.Err() == nil {
			fail(err)
		}
	}()
	body := fmt.Sprintf(`{"id": 1, "method": "run.start", "params": {"assistant_id": %q, "input": null}}`, assistant)
	for {
		err := command(cfg.URL, thread, body)
		if err == nil || !strings.Contains(err.Error(), "unknown assistant") {
			return err
		}
		select { // the worker is still connecting
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// ackLog records how long the producer's batches took to be answered.
type ackLog struct {
	mu sync.Mutex
	d  []time.Duration
}

func (a *ackLog) add(d time.Duration) {
	if a == nil {
		return
	}
	a.mu.Lock()
	a.d = append(a.d, d)
	a.mu.Unlock()
}

// summary is how many batches were answered, and the median and 99th
// percentile of their times.
func (a *ackLog) summary() (n int, p50, p99 time.Duration) {
	if a == nil {
		return 0, 0, 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.d) == 0 {
		return 0, 0, 0
	}
	slices.Sort(a.d)
	return len(a.d), a.d[len(a.d)/2], a.d[len(a.d)*99/100]
}

// publishHTTP posts the events in batches, one request at a time, each
// numbered for the producer: as fast as it can, batches of httpBatch;
// paced, what fell due since the last batch (at least one event), as a
// producer that sends every few milliseconds does.
func publishHTTP(ctx context.Context, cfg Config, thread string) error {
	pad := padOf(cfg.Size)
	producer := "load-" + thread
	start := time.Now()
	var body bytes.Buffer
	for i, batch := 0, 1; i < cfg.Count; batch++ {
		body.Reset()
		if err := pace(ctx, start, i, cfg.Rate); err != nil {
			return err
		}
		for n := 0; n < httpBatch && i < cfg.Count; n, i = n+1, i+1 {
			if cfg.Rate > 0 && n > 0 && time.Until(dueAt(start, i, cfg.Rate)) > 0 {
				break // not due yet: it goes with the next batch
			}
			body.Write(payloadFor(cfg.Wire, i, pad))
			body.WriteByte('\n')
		}
		url := cfg.URL + "/threads/" + thread + "/events"
		if cfg.Wire == WireJobs {
			url = cfg.URL + "/jobs/" + thread + "/envelopes"
		}
		req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body.Bytes()))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/x-ndjson")
		req.Header.Set("Agentstream-Producer", producer)
		req.Header.Set("Agentstream-Producer-Seq", strconv.Itoa(batch))
		sent := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("batch %d: HTTP %d", batch, resp.StatusCode)
		}
		cfg.acks.add(time.Since(sent))
		if cfg.Rate > 0 {
			select { // let a few events fall due, as a producer flushing every 5 ms does
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	return nil
}

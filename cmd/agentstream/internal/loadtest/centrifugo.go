package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// The many-conversations workload against Centrifugo (ManyConfig's
// Centrifugo), the general real-time server agentstream is measured
// beside: each thread is a channel, each subscriber a WebSocket client of
// Centrifugo's JSON protocol subscribed to its thread's channel, and the
// events are published through Centrifugo's HTTP API at --url in batches
// (POST /api/batch, the commands run in parallel), since Centrifugo runs
// nothing that would publish them itself. Each event carries the same
// payload as the firehose's (an index, the publication's time, padding),
// so latency is read the same way.

// centrifugoSubscriber connects to the Centrifugo node at cfg.subURL(i),
// subscribes to channel and counts its publications until cfg.Count came,
// then stays connected until ctx ends. It answers the server's pings.
func centrifugoSubscriber(ctx context.Context, cfg Config, channel string, i, sampleEvery int, st *stats, ready, done func()) error {
	url := "ws" + strings.TrimPrefix(cfg.subURL(i), "http") + "/connection/websocket"
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: cfg.client(i)})
	if err != nil {
		return err
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"id":1,"connect":{}}`+"\n"+`{"id":2,"subscribe":{"channel":"`+channel+`"}}`)); err != nil {
		return err
	}
	subscribed := false
	got := 0
	return readMessages(ctx, c, func(msg []byte) error {
		for _, line := range bytes.Split(msg, []byte("\n")) {
			switch {
			case bytes.Equal(line, []byte("{}")): // a ping
				if err := c.Write(ctx, websocket.MessageText, []byte("{}")); err != nil {
					return err
				}
			case bytes.HasPrefix(line, []byte(`{"push":`)) && bytes.Contains(line, []byte(`"pub":`)):
				got++
				st.recordAt(cfg.nodeOf(i), line, (got+i)%sampleEvery == 0)
				if got == cfg.Count {
					done()
				}
			case bytes.HasPrefix(line, []byte(`{"push":`)): // another push (a join, say)
			case bytes.Contains(line, []byte(`"error":`)):
				return fmt.Errorf("centrifugo: %s", line)
			case bytes.HasPrefix(line, []byte(`{"id":2,`)) && !subscribed:
				subscribed = true
				ready()
			}
		}
		return nil
	})
}

// centrifugoPublisher publishes count events to each channel, rate a
// second each, through the HTTP API at url: every tick, the events due,
// in batches of up to maxCentrifugoBatch, posted by a few goroutines at
// once. It returns once every event is published (or ctx ends).
func centrifugoPublisher(ctx context.Context, url string, channels []string, count int, rate float64, size int) error {
	const tick = 2 * time.Millisecond
	const posters = 4
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: posters}}
	defer client.CloseIdleConnections()
	batches := make(chan []byte, 64)
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	for range posters {
		wg.Go(func() {
			for b := range batches {
				if err := postBatch(ctx, client, url, b); err != nil {
					errOnce.Do(func() { firstErr = err })
				}
			}
		})
	}
	pad := strings.Repeat("x", max(0, size-64))
	sent := make([]int, len(channels))
	begin := time.Now()
	t := time.NewTicker(tick)
	defer t.Stop()
	var body []byte
	n := 0
	flush := func() {
		if n == 0 {
			return
		}
		body = append(body, `],"parallel":true}`...)
		select {
		case batches <- body:
		case <-ctx.Done():
		}
		body, n = nil, 0
	}
	for left := len(channels) * count; left > 0 && ctx.Err() == nil; {
		due := min(count, int(time.Since(begin).Seconds()*rate)+1)
		for ch, name := range channels {
			for ; sent[ch] < due; sent[ch]++ {
				if n == 0 {
					body = append(body[:0], `{"commands":[`...)
				} else {
					body = append(body, ',')
				}
				body = append(body, `{"publish":{"channel":"`...)
				body = append(body, name...)
				body = append(body, `","data":{"name":"firehose","payload":{"index":`...)
				body = strconv.AppendInt(body, int64(sent[ch]), 10)
				body = append(body, `,"ts":`...)
				body = strconv.AppendInt(body, time.Now().UnixNano(), 10)
				body = append(body, `,"pad":"`...)
				body = append(body, pad...)
				body = append(body, `"}}}}`...)
				n++
				left--
				if n == maxCentrifugoBatch {
					flush()
				}
			}
		}
		flush()
		if left > 0 {
			select {
			case <-t.C:
			case <-ctx.Done():
			}
		}
	}
	close(batches)
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}

// maxCentrifugoBatch is the most publications one POST /api/batch carries.
const maxCentrifugoBatch = 1000

func postBatch(ctx context.Context, client *http.Client, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, "POST", url+"/api/batch", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("centrifugo /api/batch: HTTP %d: %s", resp.StatusCode, b)
	}
	var reply struct {
		Replies []struct {
			Error *struct {
				Code    int
				Message string
			}
		}
	}
	if err := json.Unmarshal(b, &reply); err != nil {
		return fmt.Errorf("centrifugo /api/batch: %w", err)
	}
	for _, r := range reply.Replies {
		if r.Error != nil {
			return fmt.Errorf("centrifugo publish: %d %s", r.Error.Code, r.Error.Message)
		}
	}
	return nil
}

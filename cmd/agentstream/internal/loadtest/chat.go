package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Ways a chat run is read (ChatConfig.Via).
const (
	// ChatOpenAI streams each run as a chat completion: POST
	// /v1/chat/completions with stream (the server's --profiles openai).
	ChatOpenAI = "openai"
	// ChatSSE streams each run through the protocol's SSE: POST
	// /threads/{id}/stream, then run.start on /threads/{id}/commands.
	ChatSSE = "sse"
)

// ChatConfig is the single-client chat workload: runs of an assistant
// that streams Tokens words (echo of a text that long), each read by the
// client that started it.
type ChatConfig struct {
	URL         string
	Via         string // ChatOpenAI or ChatSSE
	Model       string // the assistant (echo)
	Tokens      int    // words a run streams
	Runs        int    // runs in all
	Concurrency int    // runs under way at once
	ServerPID   int
}

// ChatResult is what the chat workload measured.
type ChatResult struct {
	Runs, Tokens int
	Elapsed      time.Duration
	// TTFT is the time from a run's first request to its first token.
	TTFTp50, TTFTp99 time.Duration
	ServerCPU        float64 // seconds
}

func (r ChatResult) String() string {
	s := fmt.Sprintf("%d runs, %d tokens in %.2fs (%.0f tokens/s): time to first token p50 %v p99 %v", r.Runs, r.Tokens, r.Elapsed.Seconds(),
		float64(r.Tokens)/r.Elapsed.Seconds(), r.TTFTp50.Round(time.Microsecond), r.TTFTp99.Round(time.Microsecond))
	if r.ServerCPU > 0 {
		s += fmt.Sprintf("; server CPU %.2fs (%.2fµs per token)", r.ServerCPU, r.ServerCPU*1e6/float64(r.Tokens))
	}
	return s
}

// RunChat runs the chat workload.
func RunChat(ctx context.Context, cfg ChatConfig) (ChatResult, error) {
	if cfg.Model == "" {
		cfg.Model = "echo"
	}
	if cfg.Tokens <= 0 || cfg.Runs <= 0 {
		return ChatResult{}, errors.New("--tokens and --runs: more than 0")
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 1
	}
	if cfg.Via != ChatOpenAI && cfg.Via != ChatSSE {
		return ChatResult{}, fmt.Errorf("unknown chat path %q (openai or sse)", cfg.Via)
	}
	words := make([]string, cfg.Tokens)
	for i := range words {
		words[i] = fmt.Sprintf("w%d", i)
	}
	text := strings.Join(words, " ")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Concurrency * 2}}
	defer client.CloseIdleConnections()

	cpu0, err := cpuSeconds(cfg.ServerPID)
	if err != nil {
		return ChatResult{}, err
	}
	var (
		mu    sync.Mutex
		ttfts []time.Duration
		toks  int
		first error
	)
	jobs := make(chan int)
	var wg sync.WaitGroup
	began := time.Now()
	for w := 0; w < cfg.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				var ttft time.Duration
				var n int
				var err error
				if cfg.Via == ChatOpenAI {
					ttft, n, err = chatOpenAI(ctx, client, cfg, text)
				} else {
					ttft, n, err = chatSSE(ctx, client, cfg, text)
				}
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				ttfts = append(ttfts, ttft)
				toks += n
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < cfg.Runs; i++ {
		select {
		case jobs <- i:
		case <-ctx.Done():
		}
	}
	close(jobs)
	wg.Wait()
	r := ChatResult{Runs: cfg.Runs, Tokens: toks, Elapsed: time.Since(began)}
	if first != nil {
		return r, first
	}
	if toks != cfg.Runs*cfg.Tokens {
		return r, fmt.Errorf("%d tokens streamed of %d", toks, cfg.Runs*cfg.Tokens)
	}
	cpu1, err := cpuSeconds(cfg.ServerPID)
	if err != nil {
		return r, err
	}
	r.ServerCPU = cpu1 - cpu0
	slices.Sort(ttfts)
	r.TTFTp50, r.TTFTp99 = ttfts[len(ttfts)/2], ttfts[min(len(ttfts)-1, len(ttfts)*99/100)]
	return r, nil
}

// chatOpenAI streams one run as a chat completion; it returns the time
// to its first content and the content deltas it counted.
func chatOpenAI(ctx context.Context, client *http.Client, cfg ChatConfig, text string) (time.Duration, int, error) {
	body, _ := json.Marshal(map[string]any{"model": cfg.Model, "stream": true, "messages": []any{map[string]any{"role": "user", "content": text}}})
	start := time.Now()
	resp, err := postJSON(ctx, client, cfg.URL+"/v1/chat/completions", body)
	if err != nil {
		return 0, 0, fmt.Errorf("chat completion: %w", err)
	}
	defer resp.Body.Close()
	var ttft time.Duration
	n := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		data := line[6:]
		if data == "[DONE]" {
			return ttft, n, nil
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return 0, 0, err
		}
		if len(chunk.Choices) > 0 && chunk.Choices[0].Delta.Content != "" {
			if n == 0 {
				ttft = time.Since(start)
			}
			n++
		}
	}
	return 0, 0, fmt.Errorf("the completion ended before [DONE]: %v", sc.Err())
}

// chatSSE streams one run through the protocol's SSE: the stream of a
// new thread's messages and lifecycle, then run.start; it returns the
// time to the first text delta and the deltas it counted.
func chatSSE(ctx context.Context, client *http.Client, cfg ChatConfig, text string) (time.Duration, int, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	thread := "chat-" + hex.EncodeToString(b[:])
	start := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := postJSON(ctx, client, cfg.URL+"/threads/"+thread+"/stream", []byte(`{"channels": ["messages", "lifecycle"]}`))
	if err != nil {
		return 0, 0, fmt.Errorf("stream: %w", err)
	}
	defer resp.Body.Close()
	cmd, _ := json.Marshal(map[string]any{"id": 1, "method": "run.start", "params": map[string]any{"assistant_id": cfg.Model,
		"input": map[string]any{"messages": []any{map[string]any{"role": "user", "content": text}}}}})
	cresp, err := postJSON(ctx, client, cfg.URL+"/threads/"+thread+"/commands", cmd)
	if err != nil {
		return 0, 0, fmt.Errorf("run.start: %w", err)
	}
	_, _ = io.Copy(io.Discard, cresp.Body)
	cresp.Body.Close()
	var ttft time.Duration
	n := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		var ev struct {
			Method string `json:"method"`
			Params struct {
				Namespace []string `json:"namespace"`
				Data      struct {
					Event string `json:"event"`
					Delta struct {
						Text string `json:"text"`
					} `json:"delta"`
				} `json:"data"`
			} `json:"params"`
		}
		if err := json.Unmarshal([]byte(line[6:]), &ev); err != nil {
			return 0, 0, err
		}
		switch {
		case ev.Method == "messages" && ev.Params.Data.Event == "content-block-delta" && ev.Params.Data.Delta.Text != "":
			if n == 0 {
				ttft = time.Since(start)
			}
			n++
		case ev.Method == "lifecycle" && len(ev.Params.Namespace) == 0 && (ev.Params.Data.Event == "completed" || ev.Params.Data.Event == "failed"):
			return ttft, n, nil
		}
	}
	return 0, 0, fmt.Errorf("the stream ended before the run: %v", sc.Err())
}

// postJSON posts body and returns the response, or an error naming the
// status (and the start of the body) when it is not 200.
func postJSON(ctx context.Context, client *http.Client, url string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %s", resp.Status, b)
	}
	return resp, nil
}

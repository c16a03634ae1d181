package loadtest

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Stages is where a run's delivery latency went on the server, from its
// agentstream_delivery_latency_seconds histogram (a sample of the live
// events): from publication to the connection's writer taking the event
// (Queued) and to the write carrying it returning (Written); and the
// collections the server ran meanwhile. Zero when the server does not
// export the histogram (the bare server).
type Stages struct {
	Samples                                      uint64
	QueuedP50, QueuedP99, WrittenP50, WrittenP99 time.Duration
	GCCycles                                     uint64
}

func (s Stages) String() string {
	if s.Samples == 0 {
		return ""
	}
	return fmt.Sprintf("server stages (%d sampled events): queued p50 %v p99 %v, written p50 %v p99 %v; %d collections",
		s.Samples, s.QueuedP50.Round(time.Microsecond), s.QueuedP99.Round(time.Microsecond),
		s.WrittenP50.Round(time.Microsecond), s.WrittenP99.Round(time.Microsecond), s.GCCycles)
}

// stageSnapshot is the cumulative state of a server's stage histogram
// and collection count at one moment.
type stageSnapshot struct {
	buckets map[string]map[float64]float64 // stage → upper bound → count at or under it
	gc      float64
}

// readStages scrapes url's /metrics; ok is false when it has no stage
// histogram.
func readStages(url string) (stageSnapshot, bool) {
	snap := stageSnapshot{buckets: map[string]map[float64]float64{}}
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return snap, false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return snap, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "go_gc_duration_seconds_count "); ok {
			snap.gc, _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
			continue
		}
		rest, ok := strings.CutPrefix(line, `agentstream_delivery_latency_seconds_bucket{`)
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		var stage, le string
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			v = strings.Trim(v, `"`)
			switch k {
			case "stage":
				stage = v
			case "le":
				le = v
			}
		}
		bound, err1 := strconv.ParseFloat(le, 64) // "+Inf" parses as +Inf
		n, err2 := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if stage == "" || err1 != nil || err2 != nil {
			continue
		}
		if snap.buckets[stage] == nil {
			snap.buckets[stage] = map[float64]float64{}
		}
		snap.buckets[stage][bound] = n
	}
	return snap, len(snap.buckets) > 0
}

// since is what happened between an earlier snapshot and s.
func (s stageSnapshot) since(old stageSnapshot) Stages {
	q := func(stage string, p float64) (time.Duration, uint64) {
		bounds := make([]float64, 0, len(s.buckets[stage]))
		for b := range s.buckets[stage] {
			bounds = append(bounds, b)
		}
		sort.Float64s(bounds)
		if len(bounds) == 0 {
			return 0, 0
		}
		total := s.buckets[stage][math.Inf(1)] - old.buckets[stage][math.Inf(1)]
		if total <= 0 {
			return 0, 0
		}
		// The first bucket holding the p-th sample; its upper bound, a
		// bucket's width (×1.5) being the figure's resolution.
		for _, b := range bounds {
			if s.buckets[stage][b]-old.buckets[stage][b] >= p*total {
				if math.IsInf(b, 1) {
					b = bounds[max(len(bounds)-2, 0)]
				}
				return time.Duration(b * 1e9), uint64(total)
			}
		}
		return 0, uint64(total)
	}
	var st Stages
	st.QueuedP50, st.Samples = q("queued", 0.5)
	st.QueuedP99, _ = q("queued", 0.99)
	st.WrittenP50, _ = q("written", 0.5)
	st.WrittenP99, _ = q("written", 0.99)
	if s.gc >= old.gc {
		st.GCCycles = uint64(s.gc - old.gc)
	}
	return st
}

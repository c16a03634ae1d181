package protocol

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkProducerEvents reads a batch of 1,000 custom events (each
// checked against the ServerEvent schema and decoded to its type).
func BenchmarkProducerEvents(b *testing.B) {
	ev := `{"type":"event","method":"custom","params":{"namespace":[],"data":{"name":"progress","payload":{"text":"` + strings.Repeat("x", 80) + `"}}}}`
	body := []byte("[" + strings.TrimSuffix(strings.Repeat(ev+",", 1000), ",") + "]")
	d := Decoder{}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for i := 0; i < b.N; i++ {
		items, e := SplitBatch(body, false, 1000)
		if e == nil {
			_, e = d.ProducerEvents(items, 1<<20)
		}
		if e != nil {
			b.Fatal(e.Message)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "ns/event")
}

// TestProducerEventsStrictAgreesWithTheSchema: every event of a demo run
// (half without a timestamp, as producers send them), each mutated member
// by member (left out, or replaced by a value of every JSON kind), plus
// events with a member the server assigns: the strict path a producer's
// event takes and the JSON Schema accept the same events and decode them
// to the same typed event and timestamp.
func TestProducerEventsStrictAgreesWithTheSchema(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("testdata/producer_events.ndjson")
	require.NoError(t, err)
	kinds := []any{nil, true, 0.0, -1.0, 1.5, "", "x", []any{}, []any{"x"}, map[string]any{}, map[string]any{"x": 1.0}}
	var events [][]byte
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		events = append(events, []byte(line))
		var v any
		require.NoError(t, json.Unmarshal([]byte(line), &v))
		mutate(v, func(m any) {
			b, err := json.Marshal(m)
			require.NoError(t, err)
			events = append(events, b)
		}, kinds)
	}
	events = append(events,
		[]byte(`{"type":"event","seq":3,"method":"custom","params":{"namespace":[],"data":{"name":"a","payload":1}}}`),
		[]byte(`{"type":"event","event_id":"x","method":"custom","params":{"namespace":[],"data":{"name":"a","payload":1}}}`),
		[]byte(`{"type":"event","method":"events.missed","params":{"namespace":[],"data":{"from_seq":1,"to_seq":2}}}`),
		[]byte(`{"type":"event","method":"custom","params":{ }}`),
		[]byte(`{"type":"event","method":"custom","params":{"namespace":[],"Namespace":["x"],"data":{"name":"a","payload":1}}}`),
		[]byte("{\"type\":\"event\",\"method\":\"custom\",\"params\":{\"namespace\":[\"\xff\"],\"data\":{\"name\":\"a\",\"payload\":1}}}"),
	)
	schemas, err := eventSchemas()
	require.NoError(t, err)
	d := Decoder{}
	accepted := 0
	for _, ev := range events {
		fast, fe := d.producerEvent(schemas, ev)
		slow, se := d.producerEventViaSchema(schemas, ev, nil)
		if fe == nil {
			accepted++
		}
		require.Equal(t, se == nil, fe == nil, "the two paths agree on %s (strict: %v, schema: %v)", ev, fe, se)
		if fe == nil {
			require.Equal(t, slow, fast, "the same event either way: %s", ev)
		}
	}
	require.Greater(t, accepted, 100, "the corpus holds accepted events")
	require.Greater(t, len(events)-accepted, 100, "and refused ones")
	t.Logf("%d events, %d accepted", len(events), accepted)
}

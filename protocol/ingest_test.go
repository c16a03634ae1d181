package protocol

import (
	"strings"
	"testing"
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

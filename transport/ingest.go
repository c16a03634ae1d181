package transport

import (
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport/internal/httpjson"
)

// ndjsonType is the Content-Type of a batch sent as one event per line.
const ndjsonType = "application/x-ndjson"

// The headers that name a batch for idempotency.
const (
	// ProducerHeader names the producer sending a batch.
	ProducerHeader = "Agentstream-Producer"
	// ProducerSeqHeader is the producer's own number of the batch,
	// increasing from one batch to the next: a batch sent again with the
	// same number appends nothing.
	ProducerSeqHeader = "Agentstream-Producer-Seq"
)

// IngestOptions bound what producers publish into threads.
type IngestOptions struct {
	// MaxEvents is the most events one batch holds
	// (DefaultIngestMaxEvents, 1,000). Over it: 413 resource_exhausted.
	MaxEvents int
	// MaxBatchBytes is the largest body of a batch
	// (DefaultIngestMaxBatchBytes, 4 MiB), and MaxEventBytes the largest
	// event in it (DefaultIngestMaxEventBytes, 1 MiB). Over either: 413.
	MaxBatchBytes int64
	MaxEventBytes int
	// Rate is how many events a second one producer (its principal with
	// authentication on, its address without) may publish on average
	// (DefaultIngestRate, 10,000), in bursts of Burst
	// (DefaultIngestBurst, 20,000). Over it: 429 rate_limited, the batch
	// not appended.
	Rate  float64
	Burst int
}

// The defaults of IngestOptions.
const (
	DefaultIngestMaxEvents     = 1000
	DefaultIngestMaxBatchBytes = 4 << 20
	DefaultIngestMaxEventBytes = 1 << 20
	DefaultIngestRate          = 10_000
	DefaultIngestBurst         = 20_000
)

func (o IngestOptions) withDefaults() IngestOptions {
	if o.MaxEvents <= 0 {
		o.MaxEvents = DefaultIngestMaxEvents
	}
	if o.MaxBatchBytes <= 0 {
		o.MaxBatchBytes = DefaultIngestMaxBatchBytes
	}
	if o.MaxEventBytes <= 0 {
		o.MaxEventBytes = DefaultIngestMaxEventBytes
	}
	if o.Rate <= 0 {
		o.Rate = DefaultIngestRate
	}
	if o.Burst <= 0 {
		o.Burst = DefaultIngestBurst
	}
	o.Burst = max(o.Burst, o.MaxEvents) // a full batch can pass
	return o
}

// publish serves POST /threads/{id}/events: a producer's batch of events,
// a JSON array or NDJSON, appended all or nothing (see server.Publish).
// It answers the seqs and ids the events were given.
func (h *Handler) publish(w http.ResponseWriter, r *http.Request) {
	var producerSeq uint64
	producer := r.Header.Get(ProducerHeader)
	if v := r.Header.Get(ProducerSeqHeader); v != "" || producer != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || producer == "" || len(producer) > 256 {
			httpjson.Write(w, http.StatusBadRequest, protocol.NewError(nil, protocol.ErrorCodeInvalidArgument, "%s (at most 256 bytes) and %s (a whole number) go together", ProducerHeader, ProducerSeqHeader))
			return
		}
		producerSeq = n
	}
	items, ok := h.readBatch(w, r, "batch of events", "events")
	if !ok {
		return
	}
	events, errResp := h.decoder.ProducerEvents(items, h.ingest.MaxEventBytes)
	if errResp != nil {
		h.refuseBatch(w, errResp)
		return
	}
	b := server.ProducerBatch{Producer: producer, Seq: producerSeq, Events: events}
	if p := auth.FromContext(r.Context()); p != nil {
		b.Principal = p.Subject
	}
	res, err := h.srv.Publish(r.Context(), r.PathValue("id"), b)
	if err != nil {
		status, e := httpjson.Refusal(err)
		if status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		if res != nil && len(res.Seqs) > 0 {
			e.Message += " (the batch's first " + strconv.Itoa(len(res.Seqs)) + " events were appended)"
		}
		httpjson.Write(w, status, e)
		return
	}
	httpjson.Write(w, http.StatusOK, res)
}

// readBatch reads the body of a batch (of events, or of a worker's
// operations) and splits it into its items without reading them: a JSON
// array, or NDJSON with that Content-Type. The items count against the
// client's ingest rate before any is read. A refusal is answered here
// (ok false): the body too large or too slow, not a batch, too many
// items, over the rate.
func (h *Handler) readBatch(w http.ResponseWriter, r *http.Request, what, items string) (_ [][]byte, ok bool) {
	body, status, refusal, errResp := httpjson.ReadBody(w, r, h.ingest.MaxBatchBytes, h.bodyTimeout, what)
	if errResp != nil {
		if refusal != "" {
			h.metrics.Refused(refusal)
		}
		httpjson.Write(w, status, errResp)
		return nil, false
	}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	split, errResp := protocol.SplitBatch(body, mt == ndjsonType, h.ingest.MaxEvents)
	if errResp != nil {
		h.refuseBatch(w, errResp)
		return nil, false
	}
	// Counted before the items are read: a client over its rate costs
	// the split only.
	if !h.ingestLimiter.AllowN(clientKey(r, auth.FromContext(r.Context())), len(split), time.Now()) {
		h.metrics.Refused("ingest_rate")
		w.Header().Set("Retry-After", "1")
		httpjson.Write(w, http.StatusTooManyRequests, protocol.NewError(nil, protocol.ErrorCodeRateLimited, "more than %g %s a second from this client (bursts of %d; --ingest-rate, --ingest-burst); nothing appended, wait and retry", h.ingest.Rate, items, h.ingest.Burst))
		return nil, false
	}
	return split, true
}

// refuseBatch answers a batch refused for what it holds: 413 for a limit
// (too many items, one too large), 400 for the rest.
func (h *Handler) refuseBatch(w http.ResponseWriter, errResp *protocol.ErrorResponse) {
	status := http.StatusBadRequest
	if errResp.Code == protocol.ErrorCodeResourceExhausted {
		status = http.StatusRequestEntityTooLarge
		h.metrics.Refused("ingest_events")
	}
	httpjson.Write(w, status, errResp)
}

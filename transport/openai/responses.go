package openai

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/agentstream/agentstream/server"
)

// ResponseID names the response that starts at event seq of thread: the
// run started there, or the rest of one resumed there.
func ResponseID(thread string, seq uint64) string {
	return "resp_" + thread + "_" + strconv.FormatUint(seq, 10)
}

// parseResponseID undoes ResponseID.
func parseResponseID(id string) (thread string, seq uint64, ok bool) {
	rest, found := strings.CutPrefix(id, "resp_")
	i := strings.LastIndexByte(rest, '_')
	if !found || i <= 0 {
		return "", 0, false
	}
	n, err := strconv.ParseUint(rest[i+1:], 10, 64)
	if err != nil || n == 0 {
		return "", 0, false
	}
	return rest[:i], n, server.ValidThreadID(rest[:i]) == nil
}

// response builds a response from its run's parts: the stream's events,
// each with its sequence_number, and the object they add up to. The
// same events in the same order make the same numbers, so a stream read
// again from the response's start resumes after any of them.
type response struct {
	id, thread, model string
	prev              *string
	created           uint64
	run               run
	seq               uint64 // the next sequence_number
	items             []*item
	open              map[string]*item // by content block
	status            OaiResponseStatus
	err               *OaiResponseError
	incomplete        *OaiIncompleteDetails
	started, done     bool
	inBytes, outBytes int
	from              uint64 // its first event's seq
}

// item is an output item under way: its index and text so far.
type item struct {
	index int
	v     OaiOutputItemVariant
	text  strings.Builder
}

func newResponse(thread string, start uint64, model string, prev *string, created uint64, inBytes int) *response {
	return &response{id: ResponseID(thread, start), thread: thread, model: model, prev: prev, created: created,
		open: map[string]*item{}, status: OaiResponseStatusInProgress, inBytes: inBytes, from: start}
}

// object is the response as it stands.
func (r *response) object() OaiResponse {
	out := make([]OaiOutputItem, len(r.items))
	text := strings.Builder{}
	for i, it := range r.items {
		out[i] = OaiOutputItem{Value: r.itemNow(it)}
		if m, ok := it.v.(*OaiMessageItem); ok && len(m.Content) > 0 {
			text.WriteString(it.text.String())
		}
	}
	var usage *OaiResponseUsage
	if r.done {
		in, o := tokens(r.inBytes), tokens(r.outBytes)
		usage = &OaiResponseUsage{InputTokens: in, OutputTokens: o, TotalTokens: in + o}
	}
	return OaiResponse{ID: r.id, CreatedAt: r.created, Model: r.model, Status: r.status, Output: out, OutputText: text.String(),
		Error: r.err, IncompleteDetails: r.incomplete, PreviousResponseID: r.prev, Usage: usage,
		ParallelToolCalls: true, Tools: []any{}, Metadata: OaiResponseMetadata{}}
}

// itemNow is an item with its text so far.
func (r *response) itemNow(it *item) OaiOutputItemVariant {
	switch v := it.v.(type) {
	case *OaiMessageItem:
		c := *v
		if len(c.Content) > 0 {
			c.Content = []OaiOutputText{{Text: it.text.String(), Annotations: []any{}}}
		}
		return &c
	case *OaiReasoningItem:
		c := *v
		if len(c.Summary) > 0 {
			c.Summary = []OaiSummaryText{{Text: it.text.String()}}
		}
		return &c
	case *OaiFunctionCallItem:
		c := *v
		c.Arguments = it.text.String()
		return &c
	}
	return it.v
}

// feed reads event e and returns the stream events it makes, numbered.
func (r *response) feed(e *server.Event) []OaiStreamEventVariant {
	if r.done || (e.Seq != 0 && e.Seq < r.from) {
		return nil // the end, or before the response's first event
	}
	p := r.run.next(e)
	if r.model == "" && r.run.model != "" {
		r.model = r.run.model
	}
	var out []OaiStreamEventVariant
	add := func(f func(seq uint64) OaiStreamEventVariant) {
		out = append(out, f(r.seq))
		r.seq++
	}
	if !r.started && p.kind != partNone && p.kind != partMessage {
		r.started = true
		if r.created == 0 {
			r.created = p.ts / 1000 // the same on every read of the stream
		}
		add(func(n uint64) OaiStreamEventVariant {
			return &OaiResponseCreated{SequenceNumber: n, Response: r.object()}
		})
		add(func(n uint64) OaiStreamEventVariant {
			return &OaiResponseInProgress{SequenceNumber: n, Response: r.object()}
		})
	}
	newItem := func(v OaiOutputItemVariant) *item {
		it := &item{index: len(r.items), v: v}
		r.items = append(r.items, it)
		r.open[p.block] = it
		add(func(n uint64) OaiStreamEventVariant {
			return &OaiOutputItemAdded{SequenceNumber: n, OutputIndex: uint64(it.index), Item: OaiOutputItem{Value: r.itemNow(it)}}
		})
		return it
	}
	done := func(it *item, status OaiItemStatus) {
		switch v := it.v.(type) {
		case *OaiMessageItem:
			v.Status = status
		case *OaiFunctionCallItem:
			v.Status = status
		}
		delete(r.open, p.block)
		add(func(n uint64) OaiStreamEventVariant {
			return &OaiOutputItemDone{SequenceNumber: n, OutputIndex: uint64(it.index), Item: OaiOutputItem{Value: r.itemNow(it)}}
		})
	}
	id := func(prefix string) string { return prefix + r.thread + "_" + strconv.FormatUint(p.seq, 10) }
	switch p.kind {
	case partTextStart:
		it := newItem(&OaiMessageItem{ID: id("msg_"), Status: OaiItemStatusInProgress, Content: []OaiOutputText{}})
		it.v.(*OaiMessageItem).Content = []OaiOutputText{{Annotations: []any{}}}
		it.text.WriteString(p.text)
		add(func(n uint64) OaiStreamEventVariant {
			return &OaiContentPartAdded{SequenceNumber: n, ItemID: it.v.(*OaiMessageItem).ID, OutputIndex: uint64(it.index), Part: OaiOutputText{Text: p.text, Annotations: []any{}}}
		})
	case partText:
		if it := r.open[p.block]; it != nil && p.text != "" {
			it.text.WriteString(p.text)
			r.outBytes += len(p.text)
			add(func(n uint64) OaiStreamEventVariant {
				return &OaiOutputTextDelta{SequenceNumber: n, ItemID: it.v.(*OaiMessageItem).ID, OutputIndex: uint64(it.index), Delta: p.text, Logprobs: []any{}}
			})
		}
	case partTextEnd:
		if it := r.open[p.block]; it != nil {
			iid, text := it.v.(*OaiMessageItem).ID, it.text.String()
			add(func(n uint64) OaiStreamEventVariant {
				return &OaiOutputTextDone{SequenceNumber: n, ItemID: iid, OutputIndex: uint64(it.index), Text: text, Logprobs: []any{}}
			})
			add(func(n uint64) OaiStreamEventVariant {
				return &OaiContentPartDone{SequenceNumber: n, ItemID: iid, OutputIndex: uint64(it.index), Part: OaiOutputText{Text: text, Annotations: []any{}}}
			})
			done(it, OaiItemStatusCompleted)
		}
	case partReasonStart:
		it := newItem(&OaiReasoningItem{ID: id("rs_"), Summary: []OaiSummaryText{}})
		it.v.(*OaiReasoningItem).Summary = []OaiSummaryText{{}}
		it.text.WriteString(p.text)
		add(func(n uint64) OaiStreamEventVariant {
			return &OaiSummaryPartAdded{SequenceNumber: n, ItemID: it.v.(*OaiReasoningItem).ID, OutputIndex: uint64(it.index), Part: OaiSummaryText{Text: p.text}}
		})
	case partReason:
		if it := r.open[p.block]; it != nil && p.text != "" {
			it.text.WriteString(p.text)
			r.outBytes += len(p.text)
			add(func(n uint64) OaiStreamEventVariant {
				return &OaiSummaryTextDelta{SequenceNumber: n, ItemID: it.v.(*OaiReasoningItem).ID, OutputIndex: uint64(it.index), Delta: p.text}
			})
		}
	case partReasonEnd:
		if it := r.open[p.block]; it != nil {
			iid, text := it.v.(*OaiReasoningItem).ID, it.text.String()
			add(func(n uint64) OaiStreamEventVariant {
				return &OaiSummaryTextDone{SequenceNumber: n, ItemID: iid, OutputIndex: uint64(it.index), Text: text}
			})
			add(func(n uint64) OaiStreamEventVariant {
				return &OaiSummaryPartDone{SequenceNumber: n, ItemID: iid, OutputIndex: uint64(it.index), Part: OaiSummaryText{Text: text}}
			})
			done(it, OaiItemStatusCompleted)
		}
	case partCallStart:
		it := newItem(&OaiFunctionCallItem{ID: id("fc_"), CallID: WireCallID(r.thread, p.id), Name: p.name, Status: OaiItemStatusInProgress})
		it.text.WriteString(p.text)
	case partCallArgs:
		if it := r.open[p.block]; it != nil && p.text != "" {
			it.text.WriteString(p.text)
			add(func(n uint64) OaiStreamEventVariant {
				return &OaiArgumentsDelta{SequenceNumber: n, ItemID: it.v.(*OaiFunctionCallItem).ID, OutputIndex: uint64(it.index), Delta: p.text}
			})
		}
	case partCallEnd:
		if it := r.open[p.block]; it != nil {
			if it.text.Len() == 0 {
				it.text.WriteString(p.text)
			}
			args := it.text.String()
			add(func(n uint64) OaiStreamEventVariant {
				return &OaiArgumentsDone{SequenceNumber: n, ItemID: it.v.(*OaiFunctionCallItem).ID, OutputIndex: uint64(it.index), Arguments: args}
			})
			done(it, OaiItemStatusCompleted)
		}
	case partWaiting:
		if in := r.run.interrupt; in != nil {
			cid, name, args, named := interruptCall(in)
			if !named || !r.hasCall(cid) {
				if named {
					name, args = "input", "{}"
					if b, err := json.Marshal(in.payload); err == nil {
						args = string(b)
					}
				}
				p.block = "interrupt"
				it := newItem(&OaiFunctionCallItem{ID: id("fc_"), CallID: WireCallID(r.thread, cid), Name: name, Status: OaiItemStatusInProgress})
				it.text.WriteString(args)
				add(func(n uint64) OaiStreamEventVariant {
					return &OaiArgumentsDone{SequenceNumber: n, ItemID: it.v.(*OaiFunctionCallItem).ID, OutputIndex: uint64(it.index), Arguments: args}
				})
				done(it, OaiItemStatusCompleted)
			}
		}
		r.finish(OaiResponseStatusIncomplete)
		r.incomplete = &OaiIncompleteDetails{Reason: "interrupt"}
		add(func(n uint64) OaiStreamEventVariant {
			return &OaiResponseIncomplete{SequenceNumber: n, Response: r.object()}
		})
	case partCompleted:
		r.finish(OaiResponseStatusCompleted)
		add(func(n uint64) OaiStreamEventVariant {
			return &OaiResponseCompleted{SequenceNumber: n, Response: r.object()}
		})
	case partCancelled:
		r.finish(OaiResponseStatusCancelled)
		add(func(n uint64) OaiStreamEventVariant {
			return &OaiResponseCancelled{SequenceNumber: n, Response: r.object()}
		})
	case partFailed:
		r.finish(OaiResponseStatusFailed)
		r.err = &OaiResponseError{Code: "server_error", Message: p.text}
		add(func(n uint64) OaiStreamEventVariant {
			return &OaiResponseFailed{SequenceNumber: n, Response: r.object()}
		})
	}
	return out
}

// finish ends the response with status: items still open end incomplete.
func (r *response) finish(status OaiResponseStatus) {
	r.done, r.status = true, status
	for _, it := range r.open {
		switch v := it.v.(type) {
		case *OaiMessageItem:
			v.Status = OaiItemStatusIncomplete
		case *OaiFunctionCallItem:
			v.Status = OaiItemStatusIncomplete
		}
	}
	clear(r.open)
}

func (r *response) hasCall(id string) bool {
	wid := WireCallID(r.thread, id)
	for _, it := range r.items {
		if fc, ok := it.v.(*OaiFunctionCallItem); ok && fc.CallID == wid {
			return true
		}
	}
	return false
}

// responseFrames writes a response's stream: `event:` and `data:` lines
// for each of its events after sequence_number after (all with after
// -1), ending with the response.
type responseFrames struct {
	r     *response
	after int64
}

func eventFrame(buf []byte, v OaiStreamEventVariant) []byte {
	start := len(buf)
	buf = append(buf, "event: "...)
	buf = append(buf, v.Type()...)
	buf = append(buf, "\ndata: "...)
	buf, err := v.AppendJSON(buf) // generated (cddlgen --go-fast): no reflection
	if err != nil {
		return buf[:start]
	}
	return append(buf, "\n\n"...)
}

func (f *responseFrames) Append(buf []byte, e *server.Event) ([]byte, bool) {
	if gone(e) {
		// Numbered from what is left, the events would not be the
		// response's: the stream says so and ends.
		return eventFrame(buf, &OaiStreamError{SequenceNumber: f.r.seq, Code: "history_gone", Message: errGone.Error()}), true
	}
	first := f.r.seq
	evs := f.r.feed(e)
	for i, v := range evs {
		if int64(first)+int64(i) > f.after {
			buf = eventFrame(buf, v)
		}
	}
	return buf, f.r.done
}

func (f *responseFrames) AppendEnd(buf []byte, err error) []byte {
	msg := "the server is shutting down"
	if err != nil {
		msg = err.Error()
	}
	return eventFrame(buf, &OaiStreamError{SequenceNumber: f.r.seq, Code: "stream_ended", Message: msg})
}

// errGone is what a response or completion whose first events the
// thread no longer keeps answers.
var errGone = errors.New("the response's first events are no longer kept (the thread's history was trimmed): it cannot be read again")

// gone reports whether e is the notice of events no longer kept.
func gone(e *server.Event) bool { return e.Seq == 0 && e.Method == "events.missed" }

// now is the Unix time in seconds.
func now() uint64 { return uint64(time.Now().Unix()) }

package langgraph

import (
	"context"
	"crypto/sha1"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/stream"
	"github.com/agentstream/agentstream/transport/wire"
)

// Run streams (client.runs.stream): the run started as runs.create starts
// it, its protocol events translated to the Platform's SSE frames as they
// come (`event: metadata` first, then `event: <mode>` frames, `event:
// error` when it fails); the stream ends with the run, or as it waits on
// interrupts (after the `__interrupt__` frames).

// modeChannels are the protocol channels each served stream mode reads
// (the run's lifecycle and input requests are read always).
var modeChannels = map[string][]string{
	"values":         {channels.Values},
	"updates":        {channels.Updates},
	"messages-tuple": {channels.Messages},
	"messages":       {channels.Messages},
	"custom":         {channels.Custom},
	"tasks":          {channels.Updates},
	"checkpoints":    {channels.Checkpoints, channels.Values},
	"debug":          {channels.Checkpoints, channels.Values, channels.Updates},
}

// modesOf reads a stream_mode: one mode or a list (def when absent). A
// mode not served is an error naming it.
func modesOf(v any, def ...string) ([]string, error) {
	var modes []string
	switch v := v.(type) {
	case nil:
		modes = def
	case string:
		modes = []string{v}
	case []any:
		for _, m := range v {
			s, ok := m.(string)
			if !ok {
				return nil, fmt.Errorf("stream_mode: a mode or a list of modes")
			}
			modes = append(modes, s)
		}
	case []string: // a query's, def when empty
		modes = v
		if len(v) == 0 {
			modes = def
		}
	default:
		return nil, fmt.Errorf("stream_mode: a mode or a list of modes")
	}
	for _, m := range modes {
		if m == "events" {
			return nil, fmt.Errorf("stream_mode \"events\" is not served: agentstream's assistants report no LangChain callback events (messages-tuple streams the tokens, debug the tasks and checkpoints)")
		}
		if _, ok := modeChannels[m]; !ok {
			return nil, fmt.Errorf("stream_mode %q is not a stream mode (served: values, updates, messages-tuple, messages, custom, tasks, checkpoints, debug)", m)
		}
	}
	slices.Sort(modes)
	return slices.Compact(modes), nil
}

// streamFilter is what a stream of modes subscribes to: the root's
// events, or with subgraphs every namespace's.
func streamFilter(modes []string, subgraphs bool) channels.Filter {
	f := channels.Filter{Channels: []string{channels.Lifecycle, channels.Input}, Depth: 0}
	for _, m := range modes {
		f.Channels = append(f.Channels, modeChannels[m]...)
	}
	slices.Sort(f.Channels)
	f.Channels = slices.Compact(f.Channels)
	if subgraphs {
		f.Depth = channels.Unlimited
	}
	return f
}

// streamRun serves POST /threads/{id}/runs/stream.
func (h *Handler) streamRun(w http.ResponseWriter, r *http.Request) {
	h.startStream(w, r, r.PathValue("id"), false) // checked by the transport; authorized once its assistant is known
}

// streamStateless serves POST /runs/stream: on a new thread (deleted once
// the run ended unless on_completion is "keep"), or the body's thread_id.
func (h *Handler) streamStateless(w http.ResponseWriter, r *http.Request) {
	h.startStream(w, r, "", true)
}

func (h *Handler) startStream(w http.ResponseWriter, r *http.Request, thread string, stateless bool) {
	req, thread, stateless, ok := h.readRun(w, r, thread, stateless)
	if !ok {
		return
	}
	modes, err := modesOf(req.StreamMode, "values")
	if err != nil {
		fail(w, http.StatusUnprocessableEntity, "%v", err)
		return
	}
	subgraphs := req.StreamSubgraphs != nil && *req.StreamSubgraphs
	var before []any // the messages mode: the thread's messages, and the input's, as the run starts
	if slices.Contains(modes, "messages") {
		if st, ok, err := h.Server.State(r.Context(), thread); err == nil && ok {
			before, _ = st.Values["messages"].([]any)
		}
		if in, ok := req.Input.(map[string]any); ok {
			more, _ := in["messages"].([]any)
			before = append(slices.Clone(before), more...)
		}
	}
	// from, the metadata frame's id, is where the stream's session starts:
	// a resume from it reads the whole run.
	runID, ss, from, ok := h.startRunWith(w, r, thread, req, streamFilter(modes, subgraphs))
	if !ok {
		return
	}
	meta, _ := json.Marshal(LgRunMetadata{RunID: runID, Attempt: 1})
	first := fmt.Appendf(nil, "event: metadata\ndata: %s\nid: %d\n\n", meta, from)
	for _, m := range before {
		// As the Platform's messages mode begins: each message the run
		// starts from, complete.
		if o, ok := m.(map[string]any); ok {
			o = maps.Clone(o)
			if role, ok := o["role"].(string); ok && o["type"] == nil {
				o["type"] = map[string]string{"user": "human", "assistant": "ai"}[role]
				if o["type"] == "" {
					o["type"] = role
				}
				delete(o, "role")
			}
			first = frame(first, "messages/complete", from, []any{o})
		}
	}
	f := newFrames(thread, runID, modes, subgraphs, h.views)
	if stateless && temporary(req) {
		// The thread goes once this stream has read the run's end (not
		// as the run ends: a reader behind it would lose its last
		// events); a run whose reader went first keeps it until
		// --thread-ttl.
		f.ended = func() {
			go func() { _ = h.catalog.DeleteOnCompletion(context.Background(), thread, runID) }()
		}
	}
	h.serveRun(w, r, ss, thread, runID, f, first, req.StreamResumable != nil && *req.StreamResumable,
		req.OnDisconnect != nil && *req.OnDisconnect == LgOnDisconnectCancel)
}

// serveRun streams the frames f makes of session ss's events (after
// first): with Content-Location, the join's path as Location when
// resumable (where the SDK comes back, with Last-Event-ID, if the stream
// is cut), and the run cancelled if the stream ends before it when cancel.
func (h *Handler) serveRun(w http.ResponseWriter, r *http.Request, ss *server.Session, thread, runID string, f *platformFrames, first []byte, resumable, cancel bool) {
	hdr := http.Header{}
	hdr.Set("Content-Location", "/threads/"+thread+"/runs/"+runID)
	if resumable {
		hdr.Set("Location", "/threads/"+thread+"/runs/"+runID+"/stream")
	}
	st := wire.Stream{Frames: f, First: first, Header: hdr}
	if cancel {
		st.Closed = h.cancelOnDisconnect(r, thread, runID, f)
	}
	h.Streams.Serve(w, r, ss, st)
}

// cancelOnDisconnect is a stream's Closed for on_disconnect "cancel": a
// stream that ends before its frames read the run's end (the client went,
// or was cut off as a slow consumer) cancels the run, as run.cancel does;
// a server shutting down cancels nothing.
func (h *Handler) cancelOnDisconnect(r *http.Request, thread, runID string, f *platformFrames) func(shutdown bool) {
	ctx := context.WithoutCancel(r.Context()) // the principal's, past the request
	return func(shutdown bool) {
		if shutdown || f.done.Load() {
			return
		}
		_, _ = h.Server.Do(ctx, thread, &protocol.ClientCommand{Value: &protocol.ClientCommandRunCancel{ID: 1, Params: protocol.RunCancelParams{RunID: &runID}}})
	}
}

// joinStream serves GET and POST /threads/{id}/runs/{run}/stream (and
// the Agent Protocol's GET /runs/{run}/stream): the run's frames from now
// on, or after the event a Last-Event-ID header names (a frame's id is
// its event's sequence number, so a reader cut off resumes where it
// stopped, on any node; -1, as useStream sends, is the run's start), to
// the run's end. stream_mode (repeated in the query) selects the modes;
// without it, every mode the Platform's SDK reads by default;
// stream_subgraphs=true adds the subgraphs' frames, and
// cancel_on_disconnect=true cancels the run if the stream ends first. A
// run that has ended answers an empty stream, or its frames after
// Last-Event-ID.
func (h *Handler) joinStream(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("id") == "" { // /runs/{run}/stream
		if _, ok := h.byRunID(w, r); !ok {
			return
		}
	}
	h.catalog.SyncRuns(r.Context()) // the record of a run just started says where it starts
	thread, rec, ok := h.findRun(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	modes, err := modesOf(q["stream_mode"], "values", "updates", "messages-tuple", "custom")
	if err != nil {
		fail(w, http.StatusUnprocessableEntity, "%v", err)
		return
	}
	subgraphs, cancel := isTrue(q.Get("stream_subgraphs")), isTrue(q.Get("cancel_on_disconnect"))
	cursor := server.SeqCursor(h.Server.LastSeq(thread))
	resume := r.Header.Get("Last-Event-ID")
	if resume == "-1" && rec.Status != server.RunPending { // the SDK's "from the run's start"
		resume = strconv.FormatUint(rec.After, 10)
	} else if resume == "-1" {
		resume = "" // queued: from now
	}
	if resume != "" {
		seq, err := strconv.ParseUint(resume, 10, 64)
		if err != nil {
			fail(w, http.StatusUnprocessableEntity, "Last-Event-ID: the id of a frame of this run's stream")
			return
		}
		cursor = server.SeqCursor(seq)
	} else if h.catalog.Run(thread, rec.ID).Ended() || h.catalog.Run(thread, rec.ID).Waits {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		return
	}
	f := newFrames(thread, rec.ID, modes, subgraphs, h.views)
	if !rec.Open() && h.catalog.Run(thread, rec.ID).Ended() {
		// Its stream is a replay that holds its end, unless a crash or
		// the retention policy lost its events: then it ends at once.
		f.over = rec.Status
		if r.Header.Get("Last-Event-ID") == "-1" {
			f.startAt = rec.After + 1
		}
		if f.startAt > 0 && h.Server.LastSeq(thread) <= rec.After {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(f.lost(nil, 0))
			return
		}
	}
	ss := h.Server.NewSession(thread)
	if _, _, err := ss.Subscribe(streamFilter(modes, subgraphs), cursor); err != nil {
		ss.Close()
		serverError(w, err)
		return
	}
	h.serveRun(w, r, ss, thread, rec.ID, f, nil, true, cancel)
}

// (A join's checkpoint_id, which useStream sends as it rejoins a run
// with the checkpoint it shows, needs nothing more: the stream replays
// the run from its start, or from Last-Event-ID, which holds all that
// came after any checkpoint of the run.)

// isTrue reads a query's boolean.
func isTrue(s string) bool { return s == "true" || s == "1" }

// platformFrames makes the Platform's frames of one run's events.
type platformFrames struct {
	thread, run string
	// The modes asked for (read for every event: flags, not a list).
	values, updates, tuple, legacy, custom, tasks, checkpoints, debug bool

	subgraphs bool              // frames of every namespace, named MODE|NAMESPACE
	open      map[string]string // namespace -> the id of its open message
	tuples    map[string]tuple  // namespace -> its open message's messages-tuple parts
	texts     map[string]string // namespace -> the open message's text so far (the messages mode)
	state     map[string][]byte // namespace -> its latest values (checkpoints, debug)
	graph     string            // the root graph's name (an interrupt's task)
	step      int64             // the tasks seen (debug's step of a task)
	ended     func()            // called once as the run's end is read, if set
	// over is set for a run its record says ended that runs nowhere: its
	// stream is a replay, and a second run's start before its end means
	// its own events are gone (the record's status, for the error frame).
	over    string
	started bool        // a root start was read
	startAt uint64      // with over, read from the run's start: its start's seq (the first after its record's After)
	done    atomic.Bool // the stream read the run's end, or its interrupt
	views   *viewCache
}

func newFrames(thread, run string, modes []string, subgraphs bool, views *viewCache) *platformFrames {
	has := func(m string) bool { return slices.Contains(modes, m) }
	return &platformFrames{thread: thread, run: run, open: map[string]string{}, views: views, subgraphs: subgraphs,
		values: has("values"), updates: has("updates"), tuple: has("messages-tuple"), legacy: has("messages"), custom: has("custom"),
		tasks: has("tasks"), checkpoints: has("checkpoints"), debug: has("debug")}
}

// frame appends one `event: NAME` frame of v, its id the event's seq.
func frame(buf []byte, name string, seq uint64, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return buf
	}
	return rawFrame(buf, name, seq, b)
}

// named appends fr, a frame made as `event: NAME`, as the frame of
// namespace ns: `event: NAME|NS` (the Platform's name of a subgraph's
// frame) when ns is not the root.
func named(buf, fr []byte, name, ns string) []byte {
	if ns == "" {
		return append(buf, fr...)
	}
	buf = append(buf, "event: "...)
	buf = append(buf, name...)
	buf = append(buf, '|')
	buf = append(buf, ns...)
	return append(buf, fr[len("event: ")+len(name):]...)
}

// tupleKey keys a text delta's messages-tuple frame, the same for every
// reader of the run that knows the message it belongs to.
type tupleKey struct{ run, message string }

// tuple is what a stream keeps of its open message for messages-tuple
// frames: the key of their shared frames, boxed once per message rather
// than at each delta, and the chunk after its content.
type tuple struct {
	key  any // a tupleKey
	tail []byte
}

// partialKey keys a text delta's messages/partial frame (the legacy
// messages mode), the same for every reader of the run that has as much
// of the message's text.
type partialKey struct {
	run, message string
	n            int
}

// viewKey keys the wire's view of an event (server.Event.View): what every
// reader of the event shares, made once (decoded and encoded), of which
// each stream makes its frames with its own state (its modes, the message
// a delta belongs to).
type viewKey struct{}

// view is an event as the Platform's frames need it.
type view struct {
	kind viewKind
	ns   string // the namespace, labels joined by "|"
	ts   uint64 // when, in Unix ms
	// data: a failure's error object; for a text delta, its text as a
	// JSON string; values: the values (within frame); an update: its
	// values; the interrupt: its __interrupt__ list.
	data   []byte
	frame  []byte // values, updates, custom: the whole frame
	frame2 []byte // the interrupt: its values frame (frame: its updates frame)
	text   string // a text delta's text
	// id: a message's id (at its start), a checkpoint's, the task an
	// update or an interrupt shows; node: a message's or an update's
	// node, the graph's name as it starts.
	id, node string
	parent   string // a checkpoint's parent
	step     int64  // a checkpoint's step
	source   string // a checkpoint's source
}

// isoTime is when the event happened, as the debug mode's timestamps.
func (v *view) isoTime() string {
	return time.UnixMilli(int64(v.ts)).UTC().Format("2006-01-02T15:04:05.000Z")
}

type viewKind uint8

const (
	viewNone    viewKind = iota
	viewStarted          // the root graph starts (node: its name)
	viewEnd              // the root run ended (data: the error frame's, when it failed)
	viewValues
	viewUpdates
	viewCustom
	viewCheckpoint
	viewStart // a message starts
	viewDelta // a text delta of the open message
	viewFinish
	viewInterrupt // the run asks (data: the __interrupt__ list)
)

// taskID is the id of the task an update shows: a UUID made of the
// update's event id, the same for every reader.
func taskID(eventID string) string {
	h := sha1.Sum([]byte("agentstream task " + eventID))
	h[6] = h[6]&0x0f | 0x50
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// makeView decodes e once for every reader.
func makeView(e *server.Event) any {
	v := &view{ns: strings.Join(e.Namespace, "|")}
	e, err := e.WithPayload()
	if err != nil {
		return v
	}
	enc := func(x any) []byte { b, _ := json.Marshal(x); return b }
	switch p := e.Payload.(type) {
	case *protocol.ServerEventLifecycle:
		v.ts = uint64(p.Params.Timestamp)
		if len(e.Namespace) == 0 && e.EndsRun() {
			v.kind = viewEnd
			if d := p.Params.Data; d.Event == protocol.AgentStatusFailed {
				msg := "the run failed"
				if d.Error != nil {
					msg = *d.Error
				}
				v.data = enc(LgStreamError{Error: "RunError", Message: msg})
			}
		} else if len(e.Namespace) == 0 && p.Params.Data.Event == protocol.AgentStatusStarted {
			v.kind = viewStarted
			if g := p.Params.Data.GraphName; g != nil {
				v.node = *g
			}
		}
	case *protocol.ServerEventValues:
		data := enc(p.Params.Data)
		v.kind, v.ts, v.frame = viewValues, uint64(p.Params.Timestamp), rawFrame(nil, "values", e.Seq, data)
		at := len("event: values\ndata: ")
		v.data = v.frame[at : at+len(data)]
	case *protocol.ServerEventUpdates:
		node := "agent"
		if p.Params.Data.Node != nil {
			node = *p.Params.Data.Node
		}
		v.kind, v.ts, v.node, v.id = viewUpdates, uint64(p.Params.Timestamp), node, taskID(e.EventID())
		v.data = enc(p.Params.Data.Values) // {node: values}, its frame, holds it
		upd := append(append(stream.AppendJSONString([]byte{'{'}, node), ':'), v.data...)
		v.frame = rawFrame(nil, "updates", e.Seq, append(upd, '}'))
	case *protocol.ServerEventCustom:
		v.kind, v.ts, v.frame = viewCustom, uint64(p.Params.Timestamp), rawFrame(nil, "custom", e.Seq, enc(p.Params.Data.Payload))
	case *protocol.ServerEventCheckpoints:
		d := p.Params.Data
		v.kind, v.ts, v.id, v.step, v.source = viewCheckpoint, uint64(p.Params.Timestamp), d.ID, int64(d.Step), string(d.Source)
		if d.ParentID != nil {
			v.parent = *d.ParentID
		}
	case *protocol.ServerEventInputRequested:
		v.data = enc([]LgInterrupt{{ID: p.Params.Data.InterruptID, Value: p.Params.Data.Payload}})
		ask := append(append([]byte(`{"__interrupt__":`), v.data...), '}')
		v.kind, v.ts, v.frame, v.frame2 = viewInterrupt, uint64(p.Params.Timestamp), rawFrame(nil, "updates", e.Seq, ask), rawFrame(nil, "values", e.Seq, ask)
		v.id = taskID(e.EventID())
	case *protocol.ServerEventMessages:
		if p.Params.Node != nil {
			v.node = *p.Params.Node
		}
		switch d := p.Params.Data.Value.(type) {
		case *protocol.MessageStartData:
			v.kind, v.id = viewStart, d.ID
		case *protocol.ContentBlockDeltaData:
			if t, ok := d.Delta.Value.(*protocol.TextDelta); ok {
				v.kind, v.text, v.data = viewDelta, t.Text, stream.AppendJSONString(nil, t.Text)
			}
		case *protocol.MessageFinishData:
			v.kind = viewFinish
		}
	}
	return v
}

// maxViewBytes bounds what the view cache holds.
const maxViewBytes = 16 << 20

// viewCache shares the views of events by thread and event id. A live
// event is one object for all its readers (Event.View shares its view),
// but a log's replay makes each reader its own copy of an event: the
// joins of a run from its start would each decode it again.
type viewCache struct {
	mu    sync.Mutex
	m     map[viewAt]*view
	fifo  []viewAt // oldest first
	bytes int
	max   int
}

type viewAt struct{ thread, id string }

func newViewCache(max int) *viewCache { return &viewCache{m: map[viewAt]*view{}, max: max} }

func (v *view) size() int {
	n := 96 + len(v.frame) + len(v.frame2) + len(v.text) + len(v.id) + len(v.node) + len(v.ns) + len(v.parent) + len(v.source)
	if v.kind != viewValues { // a values view's data is within its frame
		n += len(v.data)
	}
	return n
}

// get returns e's view, made once while the cache holds it. An event this
// process made is one object for all its readers, which share its view
// through it (Event.View): it is not cached.
func (c *viewCache) get(thread string, e *server.Event) any {
	if _, live := e.Age(); live || c == nil || e.EventID() == "" {
		return makeView(e)
	}
	k := viewAt{thread, e.EventID()}
	c.mu.Lock()
	v := c.m[k]
	c.mu.Unlock()
	if v != nil {
		return v
	}
	v = makeView(e).(*view)
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.m[k]; old != nil {
		return old
	}
	c.m[k] = v
	c.fifo = append(c.fifo, k)
	c.bytes += v.size()
	for c.bytes > c.max && len(c.fifo) > 0 {
		old := c.fifo[0]
		c.fifo = c.fifo[1:]
		if ov := c.m[old]; ov != nil {
			c.bytes -= ov.size()
			delete(c.m, old)
		}
	}
	if cap(c.fifo) > 4*len(c.fifo)+1024 { // give back what the front's removals left
		c.fifo = slices.Clone(c.fifo)
	}
	return v
}

// rawFrame appends one `event: NAME` frame of JSON data.
func rawFrame(buf []byte, name string, seq uint64, data []byte) []byte {
	buf = append(buf, "event: "...)
	buf = append(buf, name...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, data...)
	buf = append(buf, "\nid: "...)
	buf = strconv.AppendUint(buf, seq, 10)
	return append(buf, "\n\n"...)
}

func (f *platformFrames) Append(buf []byte, e *server.Event) ([]byte, bool) {
	if e.Seq == 0 {
		if e.Method == "events.missed" {
			return frame(buf, "error", 0, LgStreamError{Error: "EventsMissed", Message: "some of the run's events were missed (this stream fell behind the server's buffer)"}), true
		}
		return buf, false // the state as the subscription was made: the run's own values follow
	}
	v := e.View(viewKey{}, func() any { return f.views.get(f.thread, e) }).(*view)
	if f.over != "" && f.startAt > 0 && !f.started && (e.Seq != f.startAt || v.kind != viewStarted || v.ns != "") {
		// The first event after the run's After is not its start.
		return f.lost(buf, e.Seq), true
	}
	if v.ns != "" && !f.subgraphs && v.kind != viewEnd {
		return buf, false
	}
	switch v.kind {
	case viewStarted:
		if v.ns == "" && f.over != "" && f.started {
			// Another run starts: this one's end is not in the stream.
			return f.lost(buf, e.Seq), true
		}
		f.started = f.started || v.ns == ""
		f.graph = v.node
	case viewEnd:
		if v.data != nil {
			buf = rawFrame(buf, "error", e.Seq, v.data)
		}
		f.done.Store(true)
		if f.ended != nil {
			f.ended()
			f.ended = nil
		}
		return buf, true
	case viewValues:
		if f.values {
			buf = named(buf, v.frame, "values", v.ns)
		}
		if f.checkpoints || f.debug {
			if f.state == nil {
				f.state = map[string][]byte{}
			}
			f.state[v.ns] = v.data
		}
	case viewUpdates:
		if f.updates {
			buf = named(buf, v.frame, "updates", v.ns)
		}
		buf = f.task(buf, e.Seq, v, v.node, v.data, []byte("[]"))
	case viewCustom:
		if f.custom {
			buf = named(buf, v.frame, "custom", v.ns)
		}
	case viewCheckpoint:
		buf = f.checkpoint(buf, e.Seq, v)
	case viewStart, viewDelta, viewFinish:
		if f.legacy && v.ns == "" {
			buf = f.legacyMessage(buf, e, v)
		}
		if f.tuple {
			buf = f.message(buf, e, v)
		}
	case viewInterrupt:
		// The run waits: the interrupt as the Platform shows it, and the
		// stream ends (the run goes on with the next run's command).
		if f.updates {
			buf = named(buf, v.frame, "updates", v.ns)
		}
		if f.values {
			buf = named(buf, v.frame2, "values", v.ns)
		}
		if f.tasks || f.debug {
			name := f.graph
			if name == "" {
				name = "agent"
			}
			buf = f.task(buf, e.Seq, v, name, []byte("{}"), v.data)
		}
		if v.ns != "" {
			return buf, false // the root's own request ends the stream
		}
		f.done.Store(true)
		return buf, true
	}
	return buf, false
}

// task appends the tasks mode's frames of task v.id, node name's (its
// start, then its result and interrupts, JSON) and debug's (`task`,
// `task_result`).
func (f *platformFrames) task(buf []byte, seq uint64, v *view, name string, result, interrupts []byte) []byte {
	if !f.tasks && !f.debug {
		return buf
	}
	start, _ := json.Marshal(LgTaskStart{ID: v.id, Name: name, Triggers: []string{"branch:to:" + name}, Interrupts: []any{},
		Metadata: LgTaskMetadata{RunID: f.run, ThreadID: f.thread, LanggraphNode: name}})
	result, _ = json.Marshal(LgTaskResult{ID: v.id, Name: name, Result: json.RawMessage(result), Interrupts: json.RawMessage(interrupts)})
	if f.tasks {
		buf = named(buf, rawFrame(nil, "tasks", seq, start), "tasks", v.ns)
		buf = named(buf, rawFrame(nil, "tasks", seq, result), "tasks", v.ns)
	}
	if f.debug {
		f.step++
		for i, p := range [][]byte{start, result} {
			kind := [...]LgDebugFrameType{LgDebugFrameTypeTask, LgDebugFrameTypeTaskResult}[i]
			buf = named(buf, frame(nil, "debug", seq, LgDebugFrame{Step: f.step, Type: kind, Timestamp: v.isoTime(), Payload: json.RawMessage(p)}), "debug", v.ns)
		}
	}
	return buf
}

// checkpoint appends the checkpoints mode's frame of a checkpoint (the
// namespace's latest values, its metadata and config) and debug's.
func (f *platformFrames) checkpoint(buf []byte, seq uint64, v *view) []byte {
	if !f.checkpoints && !f.debug {
		return buf
	}
	values := json.RawMessage(f.state[v.ns])
	if values == nil {
		values = json.RawMessage("{}")
	}
	at := func(id string) LgCheckpointConfig {
		return LgCheckpointConfig{ThreadID: f.thread, CheckpointNs: v.ns, CheckpointID: id}
	}
	config := func(id string) *LgRunnableConfig {
		if id == "" {
			return nil
		}
		return &LgRunnableConfig{Configurable: LgConfigurable{ThreadID: f.thread, CheckpointNs: v.ns, CheckpointID: id}}
	}
	meta := LgStreamCheckpointMetadata{Source: v.source, Step: v.step, Parents: map[string]any{}, RunID: f.run}
	if f.checkpoints {
		cp := LgStreamCheckpoint{Values: values, Next: []string{}, Tasks: []any{}, Metadata: meta, Config: config(v.id), ParentConfig: config(v.parent)}
		buf = named(buf, frame(nil, "checkpoints", seq, cp), "checkpoints", v.ns)
	}
	if f.debug {
		cp := LgDebugCheckpoint{Values: values, Next: []string{}, Tasks: []any{}, Metadata: meta, Config: config(v.id), ParentConfig: config(v.parent),
			Checkpoint: at(v.id)}
		if v.parent != "" {
			parent := at(v.parent)
			cp.ParentCheckpoint = &parent
		}
		d := LgDebugFrame{Step: v.step, Type: LgDebugFrameTypeCheckpoint, Timestamp: v.isoTime(), Payload: cp}
		buf = named(buf, frame(nil, "debug", seq, d), "debug", v.ns)
	}
	return buf
}

// message appends a messages-tuple frame for a text delta of the open
// message of its namespace: [the chunk, its metadata], written from bytes
// made once per message (what follows the chunk's content) and the
// delta's text, encoded once for all readers.
func (f *platformFrames) message(buf []byte, e *server.Event, v *view) []byte {
	seq := e.Seq
	switch v.kind {
	case viewStart:
		f.open[v.ns] = v.id
		delete(f.tuples, v.ns)
	case viewDelta:
		tu, ok := f.tuples[v.ns]
		if !ok {
			m, _ := json.Marshal(f.messageMeta(v))
			tail := append(stream.AppendJSONString([]byte(`,"id":`), f.open[v.ns]),
				`,"type":"ai","tool_calls":[],"invalid_tool_calls":[],"tool_call_chunks":[],"additional_kwargs":{},"response_metadata":{}},`...)
			tu = tuple{key: tupleKey{run: f.run, message: f.open[v.ns]}, tail: append(append(tail, m...), ']')}
			if f.tuples == nil {
				f.tuples = map[string]tuple{}
			}
			f.tuples[v.ns] = tu
		}
		// The whole frame is the same for every reader of this run that
		// saw the message start: made once, under that message's key.
		fr := e.View(tu.key, func() any {
			b := append([]byte("event: messages\ndata: [{\"content\":"), v.data...)
			b = append(b, tu.tail...)
			b = append(b, "\nid: "...)
			b = strconv.AppendUint(b, seq, 10)
			return append(b, "\n\n"...)
		}).([]byte)
		buf = named(buf, fr, "messages", v.ns)
	case viewFinish:
		delete(f.open, v.ns)
		delete(f.tuples, v.ns)
	}
	return buf
}

// messageMeta is the metadata of a message's frames: the run, the thread,
// the node and the namespace where they are known.
func (f *platformFrames) messageMeta(v *view) LgMessageMetadata {
	meta := LgMessageMetadata{RunID: f.run, ThreadID: f.thread}
	if v.node != "" {
		meta.LanggraphNode = &v.node
	}
	if v.ns != "" {
		meta.LanggraphCheckpointNs = &v.ns
	}
	return meta
}

// legacyMessage appends the `messages` mode's frames: messages/metadata
// as a message starts, messages/partial with its text so far at each text
// delta, messages/complete with the whole as it finishes.
func (f *platformFrames) legacyMessage(buf []byte, e *server.Event, v *view) []byte {
	seq := e.Seq
	if f.texts == nil {
		f.texts = map[string]string{}
	}
	msg := func(id, text string) []LgAIMessage {
		return []LgAIMessage{{Content: text, ID: id, ToolCalls: []any{}, InvalidToolCalls: []any{},
			AdditionalKwargs: map[string]any{}, ResponseMetadata: map[string]any{}}}
	}
	switch v.kind {
	case viewStart:
		f.open[v.ns], f.texts[v.ns] = v.id, ""
		buf = frame(buf, "messages/metadata", seq, map[string]map[string]LgMessageMetadata{v.id: {"metadata": f.messageMeta(v)}})
	case viewDelta:
		f.texts[v.ns] += v.text
		// The same for every reader that saw the message from its start
		// (a reader that joined later has less of its text): made once.
		id, text := f.open[v.ns], f.texts[v.ns]
		fr := e.View(partialKey{run: f.run, message: id, n: len(text)}, func() any {
			return frame(nil, "messages/partial", seq, msg(id, text))
		}).([]byte)
		buf = append(buf, fr...)
	case viewFinish:
		buf = frame(buf, "messages/complete", seq, msg(f.open[v.ns], f.texts[v.ns]))
		delete(f.texts, v.ns)
	}
	return buf
}

// AppendEnd ends the stream with an error frame saying why.
// lost appends the error frame of a run whose record says it ended and
// whose events (or their end) are not in the thread's stream: lost in a
// crash, or dropped by the retention policy.
func (f *platformFrames) lost(buf []byte, seq uint64) []byte {
	f.done.Store(true)
	return frame(buf, "error", seq, LgStreamError{Error: "RunEventsLost",
		Message: fmt.Sprintf("run %s's events are not in the thread's stream (lost in a crash, or dropped by the retention policy); its record says %s", f.run, f.over)})
}

func (f *platformFrames) AppendEnd(buf []byte, err error) []byte {
	msg := "the server is shutting down"
	if err != nil {
		msg = err.Error()
	}
	return frame(buf, "error", 0, LgStreamError{Error: "StreamEnded", Message: msg})
}

package langgraph

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/agentstream/agentstream/channels"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/transport/wire"
)

// Run streams (client.runs.stream): the run started as runs.create starts
// it, its protocol events translated to the Platform's SSE frames as they
// come (`event: metadata` first, then `event: <mode>` frames, `event:
// error` when it fails); the stream ends with the run, or as it waits on
// interrupts (after the `__interrupt__` frames).

// streamModes are the stream modes served, and the protocol channels each
// reads.
var streamModes = map[string]string{
	"values":         channels.Values,
	"updates":        channels.Updates,
	"messages-tuple": channels.Messages,
	"messages":       channels.Messages,
	"custom":         channels.Custom,
}

// modesOf reads a run's stream_mode: one mode or a list ("values" when
// absent). A mode not served yet is an error naming it.
func modesOf(req *LgRunCreate) ([]string, error) {
	var modes []string
	switch v := req.Extra["stream_mode"].(type) {
	case nil:
		modes = []string{"values"}
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
	default:
		return nil, fmt.Errorf("stream_mode: a mode or a list of modes")
	}
	for _, m := range modes {
		if _, ok := streamModes[m]; !ok {
			return nil, fmt.Errorf("stream_mode %q is not served (served: values, updates, messages-tuple, messages, custom)", m)
		}
	}
	slices.Sort(modes)
	return slices.Compact(modes), nil
}

// streamRun serves POST /threads/{id}/runs/stream.
func (h *Handler) streamRun(w http.ResponseWriter, r *http.Request) {
	if thread, ok := h.threadOf(w, r); ok {
		h.startStream(w, r, thread, false)
	}
}

// streamStateless serves POST /runs/stream: on a new thread (deleted once
// the run ended unless on_completion is "keep"), or the body's thread_id.
func (h *Handler) streamStateless(w http.ResponseWriter, r *http.Request) {
	h.startStream(w, r, "", true)
}

func (h *Handler) startStream(w http.ResponseWriter, r *http.Request, thread string, stateless bool) {
	var req LgRunCreate
	if !h.body(w, r, &req) {
		return
	}
	if stateless {
		if thread, stateless = h.bodyThread(w, &req); thread == "" {
			return
		}
	}
	modes, err := modesOf(&req)
	if err != nil {
		fail(w, http.StatusUnprocessableEntity, "%v", err)
		return
	}
	chans := []string{channels.Lifecycle, channels.Input}
	for _, m := range modes {
		chans = append(chans, streamModes[m])
	}
	from := h.Server.LastSeq(thread) // the metadata frame's id: a resume from it reads the whole run
	var before []any                 // the messages mode: the thread's messages, and the input's, as the run starts
	if slices.Contains(modes, "messages") {
		if st, ok, err := h.Server.State(r.Context(), thread); err == nil && ok {
			before, _ = st.Values["messages"].([]any)
		}
		if in, ok := req.Input.(map[string]any); ok {
			more, _ := in["messages"].([]any)
			before = append(slices.Clone(before), more...)
		}
	}
	runID, ss, ok := h.startRunWith(w, r, thread, &req, channels.Filter{Channels: chans, Depth: 0})
	if !ok {
		return
	}
	meta, _ := json.Marshal(map[string]any{"run_id": runID, "attempt": 1})
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
	f := &platformFrames{thread: thread, run: runID, modes: modes, open: map[string]string{}}
	if stateless && temporary(&req) {
		// The thread goes once this stream has read the run's end (not
		// as the run ends: a reader behind it would lose its last
		// events); a run whose reader went first keeps it until
		// --thread-ttl.
		f.ended = func() {
			go func() { _ = h.Server.DeleteOnCompletion(context.Background(), thread, runID) }()
		}
	}
	hdr := http.Header{}
	hdr.Set("Content-Location", "/threads/"+thread+"/runs/"+runID)
	if req.Extra["stream_resumable"] == true {
		// Where the SDK comes back, with Last-Event-ID, if the stream is cut.
		hdr.Set("Location", "/threads/"+thread+"/runs/"+runID+"/stream")
	}
	h.Streams.Serve(w, r, ss, wire.Stream{Frames: f, First: first, Header: hdr})
}

// joinStream serves GET and POST /threads/{id}/runs/{run}/stream (and
// the Agent Protocol's GET /runs/{run}/stream): the run's frames from now
// on, or after the event a Last-Event-ID header names (a frame's id is
// its event's sequence number, so a reader cut off resumes where it
// stopped, on any node; -1, as useStream sends, is the run's start), to
// the run's end. stream_mode (repeated in the
// query) selects the modes; without it, every mode served. A run that has
// ended answers an empty stream, or its frames after Last-Event-ID.
func (h *Handler) joinStream(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("id") == "" { // /runs/{run}/stream
		if _, ok := h.byRunID(w, r); !ok {
			return
		}
	}
	h.Server.SyncRunRecords(r.Context()) // the record of a run just started says where it starts
	thread, rec, ok := h.findRun(w, r)
	if !ok {
		return
	}
	modes := r.URL.Query()["stream_mode"]
	if len(modes) == 0 {
		modes = []string{"values", "updates", "messages-tuple", "custom"}
	}
	req := LgRunCreate{Extra: map[string]any{}}
	list := make([]any, len(modes))
	for i, m := range modes {
		list[i] = m
	}
	req.Extra["stream_mode"] = list
	modes, err := modesOf(&req)
	if err != nil {
		fail(w, http.StatusUnprocessableEntity, "%v", err)
		return
	}
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
	} else if h.Server.RunEnded(thread, rec.ID) || h.Server.RunWaits(thread, rec.ID) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		return
	}
	chans := []string{channels.Lifecycle, channels.Input}
	for _, m := range modes {
		chans = append(chans, streamModes[m])
	}
	ss := h.Server.NewSession(thread)
	if _, _, err := ss.Subscribe(channels.Filter{Channels: chans, Depth: 0}, cursor); err != nil {
		ss.Close()
		serverError(w, err)
		return
	}
	f := &platformFrames{thread: thread, run: rec.ID, modes: modes, open: map[string]string{}}
	hdr := http.Header{}
	hdr.Set("Content-Location", "/threads/"+thread+"/runs/"+rec.ID)
	hdr.Set("Location", "/threads/"+thread+"/runs/"+rec.ID+"/stream")
	h.Streams.Serve(w, r, ss, wire.Stream{Frames: f, Header: hdr})
}

// platformFrames makes the Platform's frames of one run's events.
type platformFrames struct {
	thread, run string
	modes       []string
	open        map[string]string // namespace -> the id of its open message
	tails       map[string][]byte // namespace -> the open message's chunk after its content
	texts       map[string]string // namespace -> the open message's text so far (the messages mode)
	ended       func()            // called once as the run's end is read, if set
}

func (f *platformFrames) wants(mode string) bool { return slices.Contains(f.modes, mode) }

// frame appends one `event: NAME` frame of v, its id the event's seq.
func frame(buf []byte, name string, seq uint64, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return buf
	}
	buf = append(buf, "event: "...)
	buf = append(buf, name...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, b...)
	buf = append(buf, "\nid: "...)
	buf = strconv.AppendUint(buf, seq, 10)
	return append(buf, "\n\n"...)
}

func (f *platformFrames) Append(buf []byte, e *server.Event) ([]byte, bool) {
	if e.Seq == 0 {
		if e.Method == "events.missed" {
			return frame(buf, "error", 0, map[string]any{"error": "EventsMissed", "message": "some of the run's events were missed (this stream fell behind the server's buffer)"}), true
		}
		return buf, false // the state as the subscription was made: the run's own values follow
	}
	e, err := e.WithPayload()
	if err != nil {
		return buf, false
	}
	ns := strings.Join(e.Namespace, "|")
	switch p := e.Payload.(type) {
	case *protocol.ServerEventLifecycle:
		if len(e.Namespace) != 0 || !e.EndsRun() {
			return buf, false
		}
		if d := p.Params.Data; d.Event == protocol.AgentStatusFailed {
			msg := "the run failed"
			if d.Error != nil {
				msg = *d.Error
			}
			buf = frame(buf, "error", e.Seq, map[string]any{"error": "RunError", "message": msg})
		}
		if f.ended != nil {
			f.ended()
			f.ended = nil
		}
		return buf, true
	case *protocol.ServerEventValues:
		if f.wants("values") && ns == "" {
			buf = frame(buf, "values", e.Seq, p.Params.Data)
		}
	case *protocol.ServerEventUpdates:
		if f.wants("updates") && ns == "" {
			node := "agent"
			if p.Params.Data.Node != nil {
				node = *p.Params.Data.Node
			}
			buf = frame(buf, "updates", e.Seq, map[string]any{node: p.Params.Data.Values})
		}
	case *protocol.ServerEventCustom:
		if f.wants("custom") {
			buf = frame(buf, "custom", e.Seq, p.Params.Data.Payload)
		}
	case *protocol.ServerEventMessages:
		if f.wants("messages") {
			buf = f.legacyMessage(buf, e.Seq, ns, p)
		}
		if f.wants("messages-tuple") {
			buf = f.message(buf, e.Seq, ns, p)
		}
	case *protocol.ServerEventInputRequested:
		// The run waits: the interrupt as the Platform shows it, and the
		// stream ends (the run goes on with the next run's command).
		ask := []map[string]any{{"id": p.Params.Data.InterruptID, "value": p.Params.Data.Payload}}
		if f.wants("updates") {
			buf = frame(buf, "updates", e.Seq, map[string]any{"__interrupt__": ask})
		}
		if f.wants("values") {
			buf = frame(buf, "values", e.Seq, map[string]any{"__interrupt__": ask})
		}
		return buf, true
	}
	return buf, false
}

// message appends a messages-tuple frame for a text delta of the open
// message of namespace ns: [the chunk, its metadata]. Most of a stream,
// it is written from bytes made once per message (what follows the
// chunk's content), not marshalled per token.
func (f *platformFrames) message(buf []byte, seq uint64, ns string, p *protocol.ServerEventMessages) []byte {
	switch d := p.Params.Data.Value.(type) {
	case *protocol.MessageStartData:
		f.open[ns] = d.ID
		delete(f.tails, ns)
	case *protocol.ContentBlockDeltaData:
		t, ok := d.Delta.Value.(*protocol.TextDelta)
		if !ok {
			return buf
		}
		tail := f.tails[ns]
		if tail == nil {
			meta := map[string]any{"run_id": f.run, "thread_id": f.thread}
			if p.Params.Node != nil {
				meta["langgraph_node"] = *p.Params.Node
			}
			m, _ := json.Marshal(meta)
			tail = append(server.AppendJSONString([]byte(`,"id":`), f.open[ns]),
				`,"type":"ai","tool_calls":[],"invalid_tool_calls":[],"tool_call_chunks":[],"additional_kwargs":{},"response_metadata":{}},`...)
			tail = append(append(tail, m...), ']')
			if f.tails == nil {
				f.tails = map[string][]byte{}
			}
			f.tails[ns] = tail
		}
		buf = append(buf, "event: messages\ndata: [{\"content\":"...)
		buf = server.AppendJSONString(buf, t.Text)
		buf = append(buf, tail...)
		buf = append(buf, "\nid: "...)
		buf = strconv.AppendUint(buf, seq, 10)
		buf = append(buf, "\n\n"...)
	case *protocol.MessageFinishData:
		delete(f.open, ns)
		delete(f.tails, ns)
	}
	return buf
}

// legacyMessage appends the `messages` mode's frames: messages/metadata
// as a message starts, messages/partial with its text so far at each text
// delta, messages/complete with the whole as it finishes.
func (f *platformFrames) legacyMessage(buf []byte, seq uint64, ns string, p *protocol.ServerEventMessages) []byte {
	if f.texts == nil {
		f.texts = map[string]string{}
	}
	msg := func(id, text string) []any {
		return []any{map[string]any{"content": text, "id": id, "type": "ai", "tool_calls": []any{}, "invalid_tool_calls": []any{},
			"additional_kwargs": map[string]any{}, "response_metadata": map[string]any{}}}
	}
	switch d := p.Params.Data.Value.(type) {
	case *protocol.MessageStartData:
		f.open[ns], f.texts[ns] = d.ID, ""
		meta := map[string]any{"run_id": f.run, "thread_id": f.thread}
		if p.Params.Node != nil {
			meta["langgraph_node"] = *p.Params.Node
		}
		buf = frame(buf, "messages/metadata", seq, map[string]any{d.ID: map[string]any{"metadata": meta}})
	case *protocol.ContentBlockDeltaData:
		if t, ok := d.Delta.Value.(*protocol.TextDelta); ok {
			f.texts[ns] += t.Text
			buf = frame(buf, "messages/partial", seq, msg(f.open[ns], f.texts[ns]))
		}
	case *protocol.MessageFinishData:
		buf = frame(buf, "messages/complete", seq, msg(f.open[ns], f.texts[ns]))
		delete(f.texts, ns)
	}
	return buf
}

// AppendEnd ends the stream with an error frame saying why.
func (f *platformFrames) AppendEnd(buf []byte, err error) []byte {
	msg := "the server is shutting down"
	if err != nil {
		msg = err.Error()
	}
	return frame(buf, "error", 0, map[string]any{"error": "StreamEnded", "message": msg})
}

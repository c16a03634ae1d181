package server

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"github.com/agentstream/agentstream/protocol"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/agentstream/agentstream/auth"
)

// ThreadRecord is what a thread says of itself beyond its events and
// state, as the LangGraph Platform API shows it: when it was made and last
// changed, and the metadata and config its client gave it. A thread made
// by the protocol (a run.start, a subscription) has none until a Platform
// client asks for it: it then gets one dated from then.
type ThreadRecord struct {
	ID        string
	Owner     string // the principal that owns it ("" without authentication)
	CreatedAt time.Time
	UpdatedAt time.Time
	Metadata  map[string]any
	Config    map[string]any
}

// ThreadCatalog is a StateStore that keeps ThreadRecords, and forgets a
// thread's with the rest of it (Delete). The in-memory and disk engines'
// stores are.
type ThreadCatalog interface {
	// Record returns the thread's record; ok is false when it has none.
	Record(ctx context.Context, thread string) (rec ThreadRecord, ok bool, err error)
	// SetRecord writes a thread's record.
	SetRecord(ctx context.Context, rec ThreadRecord) error
	// Records calls fn with every record, in no set order, until fn
	// returns false.
	Records(ctx context.Context, fn func(ThreadRecord) bool) error
}

// ThreadDeleter is a StateStore that deletes a thread for good on demand
// (DeleteThread) where its Delete, the one idle threads get, leaves the
// thread to expire (Redis).
type ThreadDeleter interface {
	DeleteThread(ctx context.Context, thread string) error
}

// ErrNoCatalog refuses the Platform API's thread routes on an engine whose
// StateStore keeps no ThreadRecords.
var ErrNoCatalog = coded(protocol.ErrorCodeNotSupported, ReasonNotServed, "server: this engine keeps no thread records (the LangGraph Platform API's threads)")

// ErrThreadExists refuses to create a thread that exists (if_exists
// raise).
var ErrThreadExists = coded(protocol.ErrorCodeInvalidArgument, ReasonConflict, "server: the thread exists")

// ErrThreadDeleted ends the sessions of a thread that was deleted.
var ErrThreadDeleted = errors.New("server: the thread was deleted")

// ErrThreadBusy refuses to delete a thread while a run of it goes on.
var ErrThreadBusy = coded(protocol.ErrorCodeInvalidArgument, ReasonThreadBusy, "server: the thread has an active run")

// ThreadInfo is a thread as the Platform API shows it: its record, its
// status (idle, busy, interrupted) and, when asked, its values and
// pending interrupts.
type ThreadInfo struct {
	ThreadRecord
	Status     string
	Values     map[string]any
	Interrupts []PendingInterrupt
}

// catalog is the StateStore's ThreadCatalog.
func (s *Server) catalog() (ThreadCatalog, error) {
	c := s.st.Catalog
	if c == nil {
		return nil, ErrNoCatalog
	}
	return c, nil
}

// CreateThread makes thread id for p (a new id when id is empty), with
// metadata, and returns its record; created is false when it existed
// already and ifExists was "do_nothing" (its record is returned). An
// existing thread with ifExists "raise" (or empty) is ErrThreadExists;
// one p may not use is ErrPermissionDenied either way.
func (s *Server) CreateThread(ctx context.Context, p *auth.Principal, id string, metadata map[string]any, ifExists string) (ThreadInfo, bool, error) {
	c, err := s.catalog()
	if err != nil {
		return ThreadInfo{}, false, err
	}
	if id == "" {
		id = NewUUID()
	}
	if p != nil {
		if err := s.Authorize(p, id, true); err != nil {
			return ThreadInfo{}, false, err
		}
	} else if err := ValidThreadID(id); err != nil {
		return ThreadInfo{}, false, err
	}
	s.catalogMu.Lock()
	defer s.catalogMu.Unlock()
	rec, ok, err := c.Record(ctx, id)
	if err != nil {
		return ThreadInfo{}, false, storeError(err)
	}
	if !ok {
		exists, err := s.threadExists(ctx, id)
		if err != nil {
			return ThreadInfo{}, false, err
		}
		if exists && p == nil {
			ok = true // made by the protocol: it exists, with no record yet
			rec, err = s.adoptRecord(ctx, c, id)
			if err != nil {
				return ThreadInfo{}, false, err
			}
		}
	}
	if ok {
		if ifExists != "do_nothing" {
			return ThreadInfo{}, false, fmt.Errorf("%w: %s", ErrThreadExists, id)
		}
		info, err := s.threadInfo(ctx, rec, false)
		return info, false, err
	}
	if err := s.sizeOK(metadata, s.cfg.MaxThreadMetadataBytes, LimitThreadMetadata, "the thread's metadata", "--max-thread-metadata-bytes"); err != nil {
		return ThreadInfo{}, false, err
	}
	now := s.cfg.Now().UTC()
	rec = ThreadRecord{ID: id, CreatedAt: now, UpdatedAt: now, Metadata: orEmptyMap(metadata), Config: map[string]any{}}
	if p != nil {
		rec.Owner = p.Subject
	}
	if err := c.SetRecord(ctx, rec); err != nil {
		return ThreadInfo{}, false, storeError(err)
	}
	return ThreadInfo{ThreadRecord: rec, Status: "idle"}, true, nil
}

// threadExists reports whether the thread has state or history, or a run
// or events on this node.
func (s *Server) threadExists(ctx context.Context, id string) (bool, error) {
	if t, _ := s.thread(id, false); t != nil {
		// Held with something in it: a run, or events. (Held empty, by a
		// subscription alone, it exists only once something is written:
		// a thread just deleted is not made again by a late subscriber.)
		t.mu.Lock()
		busy := t.run != nil || len(t.queued) > 0 || t.acked > 0
		t.mu.Unlock()
		if busy {
			return true, nil
		}
	}
	ok, err := s.st.State.Exists(ctx, id)
	if err != nil {
		return false, storeError(err)
	}
	if ok {
		return true, nil
	}
	return s.hasHistory(ctx, id)
}

// adoptRecord gives a thread the protocol made a record, dated now, owned
// by its owner. The caller holds s.catalogMu.
func (s *Server) adoptRecord(ctx context.Context, c ThreadCatalog, id string) (ThreadRecord, error) {
	owner, _, err := s.st.State.Owner(ctx, id)
	if err != nil {
		return ThreadRecord{}, storeError(err)
	}
	now := s.cfg.Now().UTC()
	rec := ThreadRecord{ID: id, Owner: owner, CreatedAt: now, UpdatedAt: now, Metadata: map[string]any{}, Config: map[string]any{}}
	if err := c.SetRecord(ctx, rec); err != nil {
		return ThreadRecord{}, storeError(err)
	}
	return rec, nil
}

// Thread returns thread id as the Platform API shows it, with its values
// and interrupts; ok is false for a thread that does not exist. The
// caller has authorized p for it.
func (s *Server) Thread(ctx context.Context, id string) (ThreadInfo, bool, error) {
	c, err := s.catalog()
	if err != nil {
		return ThreadInfo{}, false, err
	}
	rec, ok, err := c.Record(ctx, id)
	if err != nil {
		return ThreadInfo{}, false, storeError(err)
	}
	if !ok {
		exists, err := s.threadExists(ctx, id)
		if err != nil || !exists {
			return ThreadInfo{}, false, err
		}
		s.catalogMu.Lock()
		rec, ok, err = c.Record(ctx, id)
		if err == nil && !ok {
			rec, err = s.adoptRecord(ctx, c, id)
		}
		s.catalogMu.Unlock()
		if err != nil {
			return ThreadInfo{}, false, storeError(err)
		}
	}
	info, err := s.threadInfo(ctx, rec, true)
	return info, err == nil, err
}

// threadInfo completes rec with the thread's status, and its values and
// interrupts when full.
func (s *Server) threadInfo(ctx context.Context, rec ThreadRecord, full bool) (ThreadInfo, error) {
	info := ThreadInfo{ThreadRecord: rec, Status: "idle"}
	status, interrupts := s.runState(rec.ID)
	switch {
	case len(interrupts) > 0 || status == "interrupted":
		info.Status = "interrupted"
	case status != "idle":
		info.Status = "busy"
	}
	if full {
		info.Interrupts = interrupts
		v, ok, err := s.st.State.Values(ctx, rec.ID)
		if err != nil {
			return ThreadInfo{}, storeError(err)
		}
		if ok {
			info.Values = v
		}
	}
	return info, nil
}

// UpdateThread merges metadata into thread id's (a member set to null
// is kept as null, as the Platform does) and returns the thread; ok is
// false for a thread that does not exist.
func (s *Server) UpdateThread(ctx context.Context, id string, metadata map[string]any) (ThreadInfo, bool, error) {
	c, err := s.catalog()
	if err != nil {
		return ThreadInfo{}, false, err
	}
	if _, ok, err := s.Thread(ctx, id); err != nil || !ok {
		return ThreadInfo{}, ok, err
	}
	s.catalogMu.Lock()
	rec, ok, err := c.Record(ctx, id)
	if err == nil && ok {
		rec.Metadata = maps.Clone(rec.Metadata)
		if rec.Metadata == nil {
			rec.Metadata = map[string]any{}
		}
		maps.Copy(rec.Metadata, metadata)
		rec.UpdatedAt = s.cfg.Now().UTC()
		err = s.sizeOK(rec.Metadata, s.cfg.MaxThreadMetadataBytes, LimitThreadMetadata, "the thread's metadata", "--max-thread-metadata-bytes")
		if err == nil {
			err = c.SetRecord(ctx, rec)
		}
	}
	s.catalogMu.Unlock()
	if err != nil {
		return ThreadInfo{}, false, storeError(err)
	}
	if !ok {
		return ThreadInfo{}, false, nil
	}
	info, err := s.threadInfo(ctx, rec, false)
	return info, err == nil, err
}

// DeleteThread forgets thread id: its record, state, checkpoints, owner
// and events. A thread with an active run on this node is ErrThreadBusy
// (cancel the run first); ok is false for one that does not exist.
func (s *Server) DeleteThread(ctx context.Context, id string) (ok bool, err error) {
	c, err := s.catalog()
	if err != nil {
		return false, err
	}
	_, exists, err := c.Record(ctx, id)
	if err != nil {
		return false, storeError(err)
	}
	if !exists {
		if exists, err = s.threadExists(ctx, id); err != nil || !exists {
			return false, err
		}
	}
	if s.runActive(id) {
		return true, fmt.Errorf("%w: cancel it first", ErrThreadBusy)
	}
	if t, _ := s.thread(id, false); t != nil {
		t.mu.Lock()
		if t.run != nil || len(t.queued) > 0 {
			t.mu.Unlock()
			return true, fmt.Errorf("%w: cancel it first", ErrThreadBusy)
		}
		t.evicted = true
		sessions := t.sessionList()
		for _, ss := range sessions {
			ss.leave(t)
		}
		t.mu.Unlock()
		for _, ss := range sessions {
			ss.end(ErrThreadDeleted)
		}
		s.unhold(t)
	}
	// The run records queued before now land before the thread's are
	// deleted, not after (which would list its runs again).
	s.SyncRunRecords(ctx)
	s.catalogMu.Lock()
	defer s.catalogMu.Unlock()
	del := s.st.State.Delete
	if d := s.st.Deleter; d != nil {
		del = d.DeleteThread
	}
	if err := del(ctx, id); err != nil {
		return true, storeError(err)
	}
	s.st.Log.Release(ctx, id)
	return true, nil
}

// ThreadQuery selects threads (SearchThreads): those whose metadata holds
// every member of Metadata with an equal value, and whose values hold
// every member of Values likewise (the thread's values are read only for
// a query that names some), with Status when set; Limit of them (10
// when 0) after Offset, sorted by SortBy (thread_id, created_at,
// updated_at or status; created_at when empty) in SortOrder (asc or
// desc; desc when empty).
type ThreadQuery struct {
	IDs              []string // when set, only these threads
	Metadata, Values map[string]any
	Status           string
	Limit, Offset    int
	SortBy           string
	SortOrder        string
}

// SearchThreads lists the threads p may use that q selects (every thread
// without authentication, p nil), and how many q selects in all.
func (s *Server) SearchThreads(ctx context.Context, p *auth.Principal, q ThreadQuery, anonymous bool) ([]ThreadInfo, int, error) {
	c, err := s.catalog()
	if err != nil {
		return nil, 0, err
	}
	var found []ThreadInfo
	var ferr error
	// Without a selection by status or values, and not sorted by status,
	// a thread's status is found for the page only.
	late := q.Status == "" && len(q.Values) == 0 && q.SortBy != "status"
	visit := func(rec ThreadRecord) bool {
		if !anonymous && (p == nil || !p.MayUse(rec.ID, rec.Owner)) {
			return true
		}
		if !MetadataMatches(rec.Metadata, q.Metadata) || len(q.IDs) > 0 && !slices.Contains(q.IDs, rec.ID) {
			return true
		}
		if late {
			found = append(found, ThreadInfo{ThreadRecord: rec})
			return true
		}
		info, err := s.threadInfo(ctx, rec, len(q.Values) > 0)
		if err != nil {
			ferr = err
			return false
		}
		if q.Status != "" && info.Status != q.Status || !MetadataMatches(info.Values, q.Values) {
			return true
		}
		info.Values = nil
		found = append(found, info)
		return true
	}
	switch ic, indexed := s.st.Index, s.st.Index != nil; {
	case len(q.IDs) > 0: // the ids asked for, read one by one
		for _, id := range slices.Compact(slices.Sorted(slices.Values(q.IDs))) {
			rec, ok, rerr := c.Record(ctx, id)
			if err = rerr; err != nil || ok && !visit(rec) {
				break
			}
		}
	case indexed && len(q.Metadata) > 0:
		if indexed, err = ic.RecordsMatching(ctx, q.Metadata, visit); err == nil && !indexed {
			err = c.Records(ctx, visit)
		}
	default:
		err = c.Records(ctx, visit)
	}
	if err == nil {
		err = ferr
	}
	if err != nil {
		return nil, 0, storeError(err)
	}
	desc := q.SortOrder != "asc"
	cmp := func(a, b *ThreadInfo) int {
		switch q.SortBy {
		case "thread_id":
			return strings.Compare(a.ID, b.ID)
		case "updated_at":
			return a.UpdatedAt.Compare(b.UpdatedAt)
		case "status":
			return strings.Compare(a.Status, b.Status)
		}
		return a.CreatedAt.Compare(b.CreatedAt)
	}
	slices.SortFunc(found, func(a, b ThreadInfo) int {
		c := cmp(&a, &b)
		if c == 0 {
			c = strings.Compare(a.ID, b.ID)
		}
		if desc {
			return -c
		}
		return c
	})
	total := len(found)
	limit := q.Limit
	if limit <= 0 {
		limit = 10
	}
	if q.Offset >= len(found) {
		return []ThreadInfo{}, total, nil
	}
	found = found[q.Offset:]
	if len(found) > limit {
		found = found[:limit]
	}
	if late {
		for i := range found {
			if found[i], err = s.threadInfo(ctx, found[i].ThreadRecord, false); err != nil {
				return nil, 0, err
			}
		}
	}
	return found, total, nil
}

// MetadataMatches reports whether have holds every member of want with an
// equal value (a search's selection by metadata or values; JSON values:
// reflect.DeepEqual of their decoded forms, numbers compared as numbers).
func MetadataMatches(have, want map[string]any) bool {
	for k, w := range want {
		h, ok := have[k]
		if !ok || !jsonEqual(h, w) {
			return false
		}
	}
	return true
}

func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case string:
		y, ok := b.(string)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case nil:
		return b == nil
	}
	if fa, ok := number(a); ok {
		fb, ok := number(b)
		return ok && fa == fb
	}
	return reflect.DeepEqual(a, b)
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	}
	return 0, false
}

func orEmptyMap(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return maps.Clone(m)
}

// NewUUID returns a random (version 4) UUID, the form of the Platform
// API's thread ids.
func NewUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Checkpoints lists thread id's checkpoints, newest first (the Platform's
// history).
func (s *Server) Checkpoints(ctx context.Context, id string) ([]CheckpointRecord, error) {
	cps, err := s.st.State.Checkpoints(ctx, id)
	if err != nil {
		return nil, storeError(err)
	}
	return cps, nil
}

// CopyThread makes a new thread (a new UUID) for p with thread id's
// metadata, values and checkpoints, and returns it; ok is false when id
// does not exist. The copy has no events (its stream starts empty) and no
// runs.
func (s *Server) CopyThread(ctx context.Context, p *auth.Principal, id string) (ThreadInfo, bool, error) {
	src, ok, err := s.Thread(ctx, id)
	if err != nil || !ok {
		return ThreadInfo{}, ok, err
	}
	md := maps.Clone(src.Metadata)
	if md == nil {
		md = map[string]any{}
	}
	md["thread_id"] = id // where it was copied from, as the Platform says
	dst, _, err := s.CreateThread(ctx, p, "", md, "raise")
	if err != nil {
		return ThreadInfo{}, true, err
	}
	cps, err := s.st.State.Checkpoints(ctx, id)
	if err != nil {
		return ThreadInfo{}, true, storeError(err)
	}
	for i := len(cps) - 1; i >= 0; i-- { // oldest first, as they were added
		if err := s.st.State.AddCheckpoint(ctx, dst.ID, cps[i]); err != nil {
			return ThreadInfo{}, true, storeError(err)
		}
	}
	if src.Values != nil {
		if err := s.st.State.SetValues(ctx, dst.ID, src.Values); err != nil {
			return ThreadInfo{}, true, storeError(err)
		}
	}
	return dst, true, nil
}

// ErrNoGraph refuses a state update of a thread no graph ran on: the
// update has no graph to say how its values combine.
var ErrNoGraph = errors.New("server: the thread has no graph")

// UpdateState changes thread id's values as a graph's node would (the
// Platform API's threads.updateState): each member replaces the one of
// the same name, but for "messages", where messages are added (one with
// the id of a message there replaces it). It saves a checkpoint of the
// new values (source "update", its parent the newest) and returns it. A
// thread with a run going on (not waiting on interrupts) is
// ErrThreadBusy; one that does not exist, ok false.
func (s *Server) UpdateState(ctx context.Context, id string, values map[string]any, asNode string) (CheckpointRecord, bool, error) {
	info, ok, err := s.Thread(ctx, id)
	if err != nil || !ok {
		return CheckpointRecord{}, ok, err
	}
	cps, err := s.st.State.Checkpoints(ctx, id)
	if err != nil {
		return CheckpointRecord{}, true, storeError(err)
	}
	if _, hasGraph := info.Metadata["graph_id"]; !hasGraph && len(cps) == 0 {
		return CheckpointRecord{}, true, fmt.Errorf("%w: thread %s has no graph ID", ErrNoGraph, id)
	}
	if t, _ := s.thread(id, false); t != nil {
		// No run starts while the values change, and none goes on but
		// one waiting for its interrupts' answers (the update then comes
		// before the resume, as a person edits a draft before approving).
		t.mu.Lock()
		defer t.mu.Unlock()
		if r := t.run; r != nil && (r.over() || len(r.pending) == 0) {
			return CheckpointRecord{}, true, ErrThreadBusy
		}
	}
	cur, _, err := s.st.State.Values(ctx, id)
	if err != nil {
		return CheckpointRecord{}, true, storeError(err)
	}
	merged := maps.Clone(cur)
	if merged == nil {
		merged = map[string]any{}
	}
	for k, v := range values {
		if k == "messages" {
			v = addMessages(merged[k], v)
		}
		merged[k] = v
	}
	if err := s.sizeOK(merged, s.cfg.MaxStateBytes, LimitState, "the thread's values", "--max-state-bytes"); err != nil {
		return CheckpointRecord{}, true, err
	}
	cp := CheckpointRecord{ID: s.cfg.NewID("ckpt_"), Source: "update", Node: asNode, Time: s.cfg.Now(), Values: maps.Clone(merged),
		Metadata: map[string]any{}}
	if len(cps) > 0 {
		cp.ParentID, cp.Step = cps[0].ID, cps[0].Step+1
	}
	if err := s.st.State.SetValues(ctx, id, merged); err != nil {
		return CheckpointRecord{}, true, storeError(err)
	}
	if err := s.st.State.AddCheckpoint(ctx, id, cp); err != nil {
		return CheckpointRecord{}, true, storeError(err)
	}
	return cp, true, nil
}

// addMessages adds update's messages (one, or a list) to have's, as
// LangGraph's add_messages reducer does: a message with the id of one
// there replaces it, others are appended.
func addMessages(have, update any) any {
	list, _ := have.([]any)
	out := slices.Clone(list)
	add, ok := update.([]any)
	if !ok {
		add = []any{update}
	}
	for _, m := range add {
		id := messageID(m)
		replaced := false
		if id != "" {
			for i, o := range out {
				if messageID(o) == id {
					out[i], replaced = m, true
					break
				}
			}
		}
		if !replaced {
			out = append(out, m)
		}
	}
	return out
}

func messageID(m any) string {
	if o, ok := m.(map[string]any); ok {
		if id, ok := o["id"].(string); ok {
			return id
		}
	}
	return ""
}

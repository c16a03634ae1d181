// Package threads is the LangGraph Platform API's thread resource on the
// core: the thread catalog (a thread's record, metadata, status, values
// and checkpoints as the Platform shows them; creating, copying, searching,
// changing and deleting threads) and the run records a thread keeps (its
// runs as the Platform lists them, written from the core's run-lifecycle
// hook). It keeps its data in the engine's ThreadCatalog and RunCatalog
// (server.EngineStores) and asks the core (server.ResourceHost) what only
// the core knows: whether a thread exists, its run's status, and a
// thread's release before it is deleted.
package threads

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/records"
)

// Catalog is a server's threads as the Platform API shows them, and
// their runs (Of).
type Catalog struct {
	host server.ResourceHost
	st   server.EngineStores
	cfg  server.Config
	// mu serializes the changes of thread records (Create, Update,
	// Delete) on this node.
	mu   sync.Mutex
	runs *recorder // writes run records (nil: the store keeps none)
}

type sharedKey struct{}

// Of is the server's Catalog: made on the first call, which starts
// keeping run records (a run that changed before is recorded from its
// next change), and the same one after. transport.New calls it.
func Of(srv *server.Server) *Catalog {
	h := srv.Resources()
	return h.Shared(sharedKey{}, func() any { return newCatalog(h) }).(*Catalog)
}

func newCatalog(h server.ResourceHost) *Catalog {
	cat := &Catalog{host: h, st: h.Stores(), cfg: h.Config()}
	cat.startRecorder()
	cat.startExpiry()
	return cat
}

// records is the engine's ThreadCatalog, or ErrNoCatalog.
func (cat *Catalog) records() (server.ThreadCatalog, error) {
	if cat.st.Catalog == nil {
		return nil, server.ErrNoCatalog
	}
	return cat.st.Catalog, nil
}

// ThreadInfo is a thread as the Platform API shows it: its record, its
// status (idle, busy, interrupted) and, when asked, its values and
// pending interrupts.
type ThreadInfo struct {
	server.ThreadRecord
	Status     string
	Values     map[string]any
	Interrupts []server.PendingInterrupt
}

// Create makes thread id for p (a new id when id is empty), with
// metadata, and returns its record; created is false when it existed
// already and ifExists was "do_nothing" (its record is returned). An
// existing thread with ifExists "raise" (or empty) is server.ErrThreadExists;
// one p may not use is server.ErrPermissionDenied either way.
func (cat *Catalog) Create(ctx context.Context, p *auth.Principal, id string, metadata map[string]any, ifExists string) (ThreadInfo, bool, error) {
	c, err := cat.records()
	if err != nil {
		return ThreadInfo{}, false, err
	}
	if id == "" {
		id = records.NewUUID()
	}
	if p != nil {
		if err := cat.host.Authorize(p, id, true); err != nil {
			return ThreadInfo{}, false, err
		}
	} else if err := server.ValidThreadID(id); err != nil {
		return ThreadInfo{}, false, err
	}
	cat.mu.Lock()
	defer cat.mu.Unlock()
	rec, ok, err := c.Record(ctx, id)
	if err != nil {
		return ThreadInfo{}, false, server.StoreError(err)
	}
	if !ok {
		exists, err := cat.host.ThreadExists(ctx, id)
		if err != nil {
			return ThreadInfo{}, false, err
		}
		if exists && p == nil {
			ok = true // made by the protocol: it exists, with no record yet
			rec, err = cat.adoptRecord(ctx, c, id)
			if err != nil {
				return ThreadInfo{}, false, err
			}
		}
	}
	if ok {
		if ifExists != "do_nothing" {
			return ThreadInfo{}, false, fmt.Errorf("%w: %s", server.ErrThreadExists, id)
		}
		info, err := cat.threadInfo(ctx, rec, false)
		return info, false, err
	}
	if err := cat.host.SizeOK(metadata, cat.cfg.MaxThreadMetadataBytes, server.LimitThreadMetadata, "the thread's metadata", "--max-thread-metadata-bytes"); err != nil {
		return ThreadInfo{}, false, err
	}
	now := cat.cfg.Now().UTC()
	rec = server.ThreadRecord{ID: id, CreatedAt: now, UpdatedAt: now, Metadata: emptyIfNil(metadata), Config: map[string]any{}}
	if p != nil {
		rec.Owner = p.Subject
	}
	if err := c.SetRecord(ctx, rec); err != nil {
		return ThreadInfo{}, false, server.StoreError(err)
	}
	return ThreadInfo{ThreadRecord: rec, Status: "idle"}, true, nil
}

// adoptRecord gives a thread the protocol made a record, dated now, owned
// by its owner. The caller holds cat.mu.
func (cat *Catalog) adoptRecord(ctx context.Context, c server.ThreadCatalog, id string) (server.ThreadRecord, error) {
	owner, _, err := cat.st.State.Owner(ctx, id)
	if err != nil {
		return server.ThreadRecord{}, server.StoreError(err)
	}
	now := cat.cfg.Now().UTC()
	rec := server.ThreadRecord{ID: id, Owner: owner, CreatedAt: now, UpdatedAt: now, Metadata: map[string]any{}, Config: map[string]any{}}
	if err := c.SetRecord(ctx, rec); err != nil {
		return server.ThreadRecord{}, server.StoreError(err)
	}
	return rec, nil
}

// Get returns thread id as the Platform API shows it, with its values
// and interrupts; ok is false for a thread that does not exist. The
// caller has authorized p for it.
func (cat *Catalog) Get(ctx context.Context, id string) (ThreadInfo, bool, error) {
	c, err := cat.records()
	if err != nil {
		return ThreadInfo{}, false, err
	}
	rec, ok, err := c.Record(ctx, id)
	if err != nil {
		return ThreadInfo{}, false, server.StoreError(err)
	}
	if !ok {
		exists, err := cat.host.ThreadExists(ctx, id)
		if err != nil || !exists {
			return ThreadInfo{}, false, err
		}
		cat.mu.Lock()
		rec, ok, err = c.Record(ctx, id)
		if err == nil && !ok {
			rec, err = cat.adoptRecord(ctx, c, id)
		}
		cat.mu.Unlock()
		if err != nil {
			return ThreadInfo{}, false, server.StoreError(err)
		}
	}
	info, err := cat.threadInfo(ctx, rec, true)
	return info, err == nil, err
}

// threadInfo completes rec with the thread's status, and its values and
// interrupts when full.
func (cat *Catalog) threadInfo(ctx context.Context, rec server.ThreadRecord, full bool) (ThreadInfo, error) {
	info := ThreadInfo{ThreadRecord: rec, Status: "idle"}
	status, interrupts := cat.host.RunStatus(rec.ID)
	switch {
	case len(interrupts) > 0 || status == "interrupted":
		info.Status = "interrupted"
	case status != "idle":
		info.Status = "busy"
	}
	if full {
		info.Interrupts = interrupts
		v, ok, err := cat.st.State.Values(ctx, rec.ID)
		if err != nil {
			return ThreadInfo{}, server.StoreError(err)
		}
		if ok {
			info.Values = v
		}
	}
	return info, nil
}

// Update merges metadata into thread id's (a member set to null
// is kept as null, as the Platform does) and returns the thread; ok is
// false for a thread that does not exist.
func (cat *Catalog) Update(ctx context.Context, id string, metadata map[string]any) (ThreadInfo, bool, error) {
	return cat.edit(ctx, id, func(rec *server.ThreadRecord) error {
		rec.Metadata = maps.Clone(rec.Metadata)
		if rec.Metadata == nil {
			rec.Metadata = map[string]any{}
		}
		maps.Copy(rec.Metadata, metadata)
		return cat.host.SizeOK(rec.Metadata, cat.cfg.MaxThreadMetadataBytes, server.LimitThreadMetadata, "the thread's metadata", "--max-thread-metadata-bytes")
	})
}

// edit changes thread id's record with change and writes it, dated now,
// and returns the thread; ok is false for a thread that does not exist.
func (cat *Catalog) edit(ctx context.Context, id string, change func(*server.ThreadRecord) error) (ThreadInfo, bool, error) {
	c, err := cat.records()
	if err != nil {
		return ThreadInfo{}, false, err
	}
	if _, ok, err := cat.Get(ctx, id); err != nil || !ok {
		return ThreadInfo{}, ok, err
	}
	cat.mu.Lock()
	rec, ok, err := c.Record(ctx, id)
	if err == nil && ok {
		rec.UpdatedAt = cat.cfg.Now().UTC()
		if err = change(&rec); err == nil {
			err = c.SetRecord(ctx, rec)
		}
	}
	cat.mu.Unlock()
	if err != nil {
		return ThreadInfo{}, false, server.StoreError(err)
	}
	if !ok {
		return ThreadInfo{}, false, nil
	}
	info, err := cat.threadInfo(ctx, rec, false)
	return info, err == nil, err
}

// Delete forgets thread id: its record, state, checkpoints, owner
// and events. A thread with an active run on this node is server.ErrThreadBusy
// (cancel the run first); ok is false for one that does not exist.
func (cat *Catalog) Delete(ctx context.Context, id string) (ok bool, err error) {
	c, err := cat.records()
	if err != nil {
		return false, err
	}
	_, exists, err := c.Record(ctx, id)
	if err != nil {
		return false, server.StoreError(err)
	}
	if !exists {
		if exists, err = cat.host.ThreadExists(ctx, id); err != nil || !exists {
			return false, err
		}
	}
	if err := cat.host.Release(id); err != nil {
		return true, err
	}
	// The run records queued before now land before the thread's are
	// deleted, not after (which would list its runs again).
	cat.SyncRuns(ctx)
	cat.mu.Lock()
	defer cat.mu.Unlock()
	del := cat.st.State.Delete
	if d := cat.st.Deleter; d != nil {
		del = d.DeleteThread
	}
	if err := del(ctx, id); err != nil {
		return true, server.StoreError(err)
	}
	// A use of the thread while its data was being deleted (a late
	// subscriber) held it again as it was: it goes too, so that what is
	// held next starts from nothing.
	_ = cat.host.Release(id)
	cat.st.Log.Release(ctx, id)
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

// Search lists the threads p may use that q selects (every thread
// without authentication, p nil), with their values and interrupts, and
// how many q selects in all.
func (cat *Catalog) Search(ctx context.Context, p *auth.Principal, q ThreadQuery, anonymous bool) ([]ThreadInfo, int, error) {
	c, err := cat.records()
	if err != nil {
		return nil, 0, err
	}
	var found []ThreadInfo
	var ferr error
	// Without a selection by status or values, and not sorted by status,
	// a thread's status is found for the page only.
	late := q.Status == "" && len(q.Values) == 0 && q.SortBy != "status"
	visit := func(rec server.ThreadRecord) bool {
		if !anonymous && (p == nil || !p.MayUse(rec.ID, rec.Owner)) {
			return true
		}
		if !records.MetadataMatches(rec.Metadata, q.Metadata) || len(q.IDs) > 0 && !slices.Contains(q.IDs, rec.ID) {
			return true
		}
		if late {
			found = append(found, ThreadInfo{ThreadRecord: rec})
			return true
		}
		info, err := cat.threadInfo(ctx, rec, len(q.Values) > 0)
		if err != nil {
			ferr = err
			return false
		}
		if q.Status != "" && info.Status != q.Status || !records.MetadataMatches(info.Values, q.Values) {
			return true
		}
		info.Values = nil
		found = append(found, info)
		return true
	}
	switch ic, indexed := cat.st.Index, cat.st.Index != nil; {
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
		return nil, 0, server.StoreError(err)
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
	// The page's threads with their values and interrupts, as the
	// Platform lists them (read for the page alone: a search holds no
	// thread's values but those it answers).
	for i := range found {
		if found[i], err = cat.threadInfo(ctx, found[i].ThreadRecord, true); err != nil {
			return nil, 0, err
		}
	}
	return found, total, nil
}

// Checkpoints lists thread id's checkpoints, newest first (the Platform's
// history).
func (cat *Catalog) Checkpoints(ctx context.Context, id string) ([]server.CheckpointRecord, error) {
	cps, err := cat.st.State.Checkpoints(ctx, id)
	if err != nil {
		return nil, server.StoreError(err)
	}
	return cps, nil
}

// Checkpoint is checkpoint cp of thread id; ok is false when it has none
// of that id.
func (cat *Catalog) Checkpoint(ctx context.Context, id, cp string) (server.CheckpointRecord, bool, error) {
	rec, ok, err := cat.st.State.Checkpoint(ctx, id, cp)
	if err != nil {
		return server.CheckpointRecord{}, false, server.StoreError(err)
	}
	return rec, ok, nil
}

// NewestCheckpoint is thread id's newest checkpoint; ok is false when it
// has none.
func (cat *Catalog) NewestCheckpoint(ctx context.Context, id string) (server.CheckpointRecord, bool, error) {
	rec, ok, err := server.NewestCheckpoint(ctx, cat.st.State, id)
	if err != nil {
		return server.CheckpointRecord{}, false, server.StoreError(err)
	}
	return rec, ok, nil
}

// Copy makes a new thread (a new UUID) for p with thread id's
// metadata, values and checkpoints, and returns it; ok is false when id
// does not exist. The copy has no events (its stream starts empty) and no
// runs.
func (cat *Catalog) Copy(ctx context.Context, p *auth.Principal, id string) (ThreadInfo, bool, error) {
	src, ok, err := cat.Get(ctx, id)
	if err != nil || !ok {
		return ThreadInfo{}, ok, err
	}
	md := maps.Clone(src.Metadata)
	if md == nil {
		md = map[string]any{}
	}
	md["thread_id"] = id // where it was copied from, as the Platform says
	dst, _, err := cat.Create(ctx, p, "", md, "raise")
	if err != nil {
		return ThreadInfo{}, true, err
	}
	cps, err := cat.st.State.Checkpoints(ctx, id)
	if err != nil {
		return ThreadInfo{}, true, server.StoreError(err)
	}
	for i := len(cps) - 1; i >= 0; i-- { // oldest first, as they were added
		if err := cat.st.State.AddCheckpoint(ctx, dst.ID, cps[i]); err != nil {
			return ThreadInfo{}, true, server.StoreError(err)
		}
	}
	if src.Values != nil {
		if err := cat.st.State.SetValues(ctx, dst.ID, src.Values); err != nil {
			return ThreadInfo{}, true, server.StoreError(err)
		}
	}
	return dst, true, nil
}

// ErrNoGraph refuses a state update of a thread no graph ran on: the
// update has no graph to say how its values combine.
var ErrNoGraph = server.NewError(protocol.ErrorCodeInvalidArgument, "", "threads: the thread has no graph")

// UpdateState changes thread id's values as a graph's node would (the
// Platform API's threads.updateState): each member replaces the one of
// the same name, but for "messages", where messages are added (one with
// the id of a message there replaces it). It saves a checkpoint of the
// new values (source "update", its parent the newest) and returns it. A
// thread with a run going on (not waiting on interrupts) is
// server.ErrThreadBusy; one that does not exist, ok false.
func (cat *Catalog) UpdateState(ctx context.Context, id string, values map[string]any, asNode string) (server.CheckpointRecord, bool, error) {
	info, ok, err := cat.Get(ctx, id)
	if err != nil || !ok {
		return server.CheckpointRecord{}, ok, err
	}
	var cp server.CheckpointRecord
	// No run starts while the values change, and none goes on but one
	// waiting for its interrupts' answers (the update then comes before
	// the resume, as a person edits a draft before approving).
	err = cat.host.WhileIdle(id, func() error {
		parent, has, err := server.NewestCheckpoint(ctx, cat.st.State, id)
		if err != nil {
			return server.StoreError(err)
		}
		if _, hasGraph := info.Metadata["graph_id"]; !hasGraph && !has {
			return fmt.Errorf("%w: thread %s has no graph ID", ErrNoGraph, id)
		}
		cp, err = cat.update(ctx, id, values, asNode, parent, has)
		return err
	})
	if err != nil {
		return server.CheckpointRecord{}, true, err
	}
	return cp, true, nil
}

// ErrNoCheckpoint refuses a change of a thread's newest checkpoint when
// it has none.
var ErrNoCheckpoint = server.NewError(protocol.ErrorCodeNoSuchCheckpoint, "", "threads: the thread has no checkpoint")

// ErrNoPatch refuses PatchState on an engine whose store cannot change a
// checkpoint (records.CheckpointPatcher).
var ErrNoPatch = server.NewError(protocol.ErrorCodeNotSupported, records.ReasonNotServed, "threads: this engine does not change a checkpoint")

// PatchState merges metadata into thread id's newest checkpoint's (the
// Platform API's threads.patchState), with no run starting meanwhile; a
// thread with a run going on is server.ErrThreadBusy, one with no
// checkpoint ErrNoCheckpoint, one that does not exist ok false.
func (cat *Catalog) PatchState(ctx context.Context, id string, metadata map[string]any) (server.CheckpointRecord, bool, error) {
	p, can := cat.st.State.(records.CheckpointPatcher)
	if !can {
		return server.CheckpointRecord{}, false, ErrNoPatch
	}
	if _, ok, err := cat.Get(ctx, id); err != nil || !ok {
		return server.CheckpointRecord{}, ok, err
	}
	var cp server.CheckpointRecord
	err := cat.host.WhileIdle(id, func() error {
		if err := cat.host.SizeOK(metadata, cat.cfg.MaxThreadMetadataBytes, server.LimitThreadMetadata, "the checkpoint's metadata", "--max-thread-metadata-bytes"); err != nil {
			return err
		}
		got, found, err := p.PatchNewestCheckpoint(ctx, id, metadata)
		if err != nil {
			return server.StoreError(err)
		}
		if !found {
			return fmt.Errorf("%w: thread %s", ErrNoCheckpoint, id)
		}
		cp = got
		return nil
	})
	return cp, true, err
}

// update is UpdateState's change, while no run starts.
func (cat *Catalog) update(ctx context.Context, id string, values map[string]any, asNode string, parent server.CheckpointRecord, hasParent bool) (server.CheckpointRecord, error) {
	cur, _, err := cat.st.State.Values(ctx, id)
	if err != nil {
		return server.CheckpointRecord{}, server.StoreError(err)
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
	if err := cat.host.SizeOK(merged, cat.cfg.MaxStateBytes, server.LimitState, "the thread's values", "--max-state-bytes"); err != nil {
		return server.CheckpointRecord{}, err
	}
	cp := server.CheckpointRecord{ID: cat.cfg.NewID("ckpt_"), Source: "update", Node: asNode, Time: cat.cfg.Now(), Values: maps.Clone(merged),
		Metadata: map[string]any{}}
	if hasParent {
		cp.ParentID, cp.Step = parent.ID, parent.Step+1
	}
	if err := cat.st.State.SetValues(ctx, id, merged); err != nil {
		return server.CheckpointRecord{}, server.StoreError(err)
	}
	if err := cat.st.State.AddCheckpoint(ctx, id, cp); err != nil {
		return server.CheckpointRecord{}, server.StoreError(err)
	}
	return cp, nil
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

// emptyIfNil is a copy of m, an empty map for nil.
func emptyIfNil(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return maps.Clone(m)
}

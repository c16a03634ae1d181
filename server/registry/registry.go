// Package registry keeps the LangGraph Platform API's assistants as
// resources (its /assistants routes): the assistants clients create, each
// a graph of the server with its own config, metadata, name and
// description, every update a new version that can be made the latest
// again; and the graphs' own assistants, which the server makes (one per
// assistant it runs) and a client may update like any other. They are
// kept in the engine's ItemStore (server.EngineStores.Items) under a
// scope of their own, which the /store routes never reach, so that they
// outlive a restart on disk and are shared by every node on Redis.
package registry

import (
	"cmp"
	"context"
	"crypto/sha1"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/server"
	"github.com/agentstream/agentstream/server/records"
)

// Assistant is an assistant as the Platform shows it, and one of its
// versions.
type Assistant struct {
	ID          string         `json:"assistant_id"`
	GraphID     string         `json:"graph_id"`
	Name        string         `json:"name"`
	Description *string        `json:"description"`
	Config      map[string]any `json:"config"`
	Context     map[string]any `json:"context"`
	Metadata    map[string]any `json:"metadata"`
	Version     int            `json:"version"`
	CreatedAt   time.Time      `json:"created_at"`
	UpdatedAt   time.Time      `json:"updated_at"`
	// Owner is the subject of the principal that created it ("" without
	// authentication, and for a graph's own).
	Owner string `json:"owner,omitempty"`
}

// Changes are what an update changes: the members that are set.
type Changes struct {
	GraphID     *string
	Name        *string
	Description *string
	Config      map[string]any
	Context     map[string]any
	// Metadata is merged into the assistant's.
	Metadata map[string]any
}

// Query selects assistants: by graph, by a part of the name (any case),
// by metadata (each member equal), then a page of them.
type Query struct {
	GraphID, Name string
	Metadata      map[string]any
	Limit, Offset int
	// SortBy is assistant_id, graph_id, name, created_at (the default) or
	// updated_at; SortOrder desc (the default) or asc.
	SortBy, SortOrder string
}

// Errors, for errors.Is.
var (
	ErrNotFound = server.NewError(protocol.ErrorCodeInvalidArgument, "", "registry: no such assistant")
	ErrExists   = server.NewError(protocol.ErrorCodeInvalidArgument, "", "registry: the assistant exists")
	ErrNoGraph  = server.NewError(protocol.ErrorCodeInvalidArgument, "", "registry: no such graph")
	ErrNotYours = server.NewError(protocol.ErrorCodePermissionDenied, "", "registry: the assistant is another principal's")
	ErrTooMany  = server.NewError(protocol.ErrorCodeResourceExhausted, "", "registry: as many assistants as the server keeps (--max-assistants)")
	ErrNoStore  = server.NewError(protocol.ErrorCodeNotSupported, records.ReasonNotServed, "registry: this engine keeps no assistants")
)

// scope is the ItemStore scope the assistants are kept in: no principal's
// (a principal's scope is its subject, which items.ItemScope never lets
// begin with a NUL).
const scope = "\x00assistants"

// Namespaces within scope: the assistants as they are now, by id, and
// each one's versions, by number; and the generation, a token every
// change writes anew (genKey in genNS), so that a node's copy of the
// list (Search) is read again only once some node changed it.
var (
	latestNS = []string{"latest"}
	genNS    = []string{"generation"}
)

const genKey = "gen"

func versionsNS(id string) []string { return []string{"versions", id} }

func versionKey(v int) string { return fmt.Sprintf("%010d", v) }

// Registry is a server's assistants (Of).
type Registry struct {
	host server.ResourceHost
	// graphOf lists the assistants the server runs now (Server.Assistants:
	// remote workers' come and go).
	graphOf func() []string
	st      server.ItemStore
	cfg     server.Config
	// mu serializes the changes, so that a version number and the count
	// checked are the ones written.
	mu      sync.Mutex
	counted bool
	count   int // the assistants clients made, once counted (countMade)
	started time.Time
	// cached is the kept assistants as read at generation cachedGen
	// (cacheMu; a search reads the generation, then the list only when
	// it changed).
	cacheMu   sync.Mutex
	cachedGen string
	cached    []Assistant
}

type sharedKey struct{}

// Of is the server's Registry, the same one on every call.
func Of(srv *server.Server) *Registry {
	h := srv.Resources()
	return h.Shared(sharedKey{}, func() any {
		return &Registry{host: h, graphOf: srv.Assistants, st: h.Stores().Items, cfg: h.Config(), started: h.Config().Now().UTC()}
	}).(*Registry)
}

// graphs are the graphs the server runs (its assistants' names).
func (r *Registry) graphs() []string {
	names := r.graphOf()
	slices.Sort(names)
	return names
}

// graphNamespace is the namespace of the Platform's ids of the graphs'
// own assistants: an assistant's id is the version 5 UUID of its graph's
// name in it.
var graphNamespace = [16]byte{0x6b, 0xa7, 0xb8, 0x21, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}

// GraphAssistantID is the Platform's id of graph's own assistant.
func GraphAssistantID(graph string) string {
	h := sha1.New()
	h.Write(graphNamespace[:])
	h.Write([]byte(graph))
	b := h.Sum(nil)[:16]
	b[6] = b[6]&0x0f | 0x50
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// graphsOwn reports whether a is a graph's own assistant (kept once
// updated), not one a client made.
func (r *Registry) graphsOwn(a Assistant) bool {
	return a.Owner == "" && slices.ContainsFunc(r.graphs(), func(g string) bool { return GraphAssistantID(g) == a.ID })
}

// system is the graph's own assistant as the server makes it: id the
// Platform's UUID of its name (GraphAssistantID), made when it started.
func (r *Registry) system(graph string) Assistant {
	return Assistant{ID: GraphAssistantID(graph), GraphID: graph, Name: graph, Version: 1, Config: map[string]any{}, Context: map[string]any{},
		Metadata: map[string]any{"created_by": "system"}, CreatedAt: r.started, UpdatedAt: r.started}
}

func (r *Registry) engine() (server.ItemStore, error) {
	if r.st == nil {
		return nil, ErrNoStore
	}
	return r.st, nil
}

func encode(a Assistant) (map[string]any, error) {
	b, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}

// decode is the assistant encode kept, read from the item's members as
// the engine decoded them (a search reads every assistant: no second
// pass through JSON).
func decode(v map[string]any) (Assistant, error) {
	str := func(k string) string { s, _ := v[k].(string); return s }
	obj := func(k string) map[string]any { m, _ := v[k].(map[string]any); return m }
	at := func(k string) (time.Time, error) {
		if s := str(k); s != "" {
			return time.Parse(time.RFC3339Nano, s)
		}
		return time.Time{}, nil
	}
	a := Assistant{ID: str("assistant_id"), GraphID: str("graph_id"), Name: str("name"), Owner: str("owner"),
		Config: obj("config"), Context: obj("context"), Metadata: obj("metadata")}
	if d, ok := v["description"].(string); ok {
		a.Description = &d
	}
	switch n := v["version"].(type) {
	case float64:
		a.Version = int(n)
	case int64:
		a.Version = int(n)
	case int:
		a.Version = n
	case json.Number:
		i, _ := n.Int64()
		a.Version = int(i)
	}
	var err error
	if a.CreatedAt, err = at("created_at"); err != nil {
		return Assistant{}, err
	}
	if a.UpdatedAt, err = at("updated_at"); err != nil {
		return Assistant{}, err
	}
	if a.ID == "" || a.GraphID == "" {
		return Assistant{}, fmt.Errorf("registry: a kept assistant without its id or graph")
	}
	return a, nil
}

// stored is assistant id as kept; ok false when it is not.
func (r *Registry) stored(ctx context.Context, st server.ItemStore, id string) (Assistant, bool, error) {
	it, ok, err := st.GetItem(ctx, scope, latestNS, id)
	if err != nil || !ok {
		return Assistant{}, false, server.StoreError(err)
	}
	a, err := decode(it.Value)
	return a, err == nil, err
}

// Get is assistant id (a kept one, or a graph's own by its id or its
// name, as updated if it was); ok is false when there is none. One read.
func (r *Registry) Get(ctx context.Context, id string) (Assistant, bool, error) {
	graph := ""
	for _, g := range r.graphs() {
		if g == id || GraphAssistantID(g) == id {
			graph, id = g, GraphAssistantID(g)
		}
	}
	if r.st != nil {
		if a, ok, err := r.stored(ctx, r.st, id); err != nil || ok {
			return a, ok, err
		}
	}
	if graph != "" {
		return r.system(graph), true, nil
	}
	return Assistant{}, false, nil
}

// Visible reports whether p sees a: its own, one made without
// authentication, and a graph's own; an admin sees every one.
func Visible(p *auth.Principal, a Assistant) bool {
	return p == nil || p.Admin || a.Owner == "" || a.Owner == p.Subject
}

func mayChange(p *auth.Principal, a Assistant) error {
	if !Visible(p, a) {
		return ErrNotFound
	}
	if p != nil && !p.Admin && a.Owner == "" && a.Metadata["created_by"] == "system" {
		return fmt.Errorf("%w: a graph's own assistant is changed by an admin only", ErrNotYours)
	}
	return nil
}

// changeable is assistant id, if there is one p may change (r.mu held).
func (r *Registry) changeable(ctx context.Context, p *auth.Principal, id string) (Assistant, error) {
	a, ok, err := r.Get(ctx, id)
	if err != nil {
		return Assistant{}, err
	}
	if !ok {
		return Assistant{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return a, mayChange(p, a)
}

// put writes a as the latest and as its version (r.mu held).
func (r *Registry) put(ctx context.Context, st server.ItemStore, a Assistant, version bool) error {
	v, err := encode(a)
	if err != nil {
		return err
	}
	if err := r.host.SizeOK(v, r.cfg.MaxThreadMetadataBytes, server.LimitThreadMetadata, "the assistant", "--max-thread-metadata-bytes"); err != nil {
		return err
	}
	now := r.cfg.Now().UTC()
	if version {
		if err := st.PutItem(ctx, server.StoreItem{Scope: scope, Namespace: versionsNS(a.ID), Key: versionKey(a.Version), Value: v, CreatedAt: now, UpdatedAt: now}); err != nil {
			return server.StoreError(err)
		}
	}
	if err := st.PutItem(ctx, server.StoreItem{Scope: scope, Namespace: latestNS, Key: a.ID, Value: v, CreatedAt: now, UpdatedAt: now}); err != nil {
		return server.StoreError(err)
	}
	return r.changed(ctx, st)
}

// changed writes a new generation, after a change was written: every
// node's copy of the list is read again at its next search.
func (r *Registry) changed(ctx context.Context, st server.ItemStore) error {
	now := r.cfg.Now().UTC()
	return server.StoreError(st.PutItem(ctx, server.StoreItem{Scope: scope, Namespace: genNS, Key: genKey, Value: map[string]any{"g": records.NewUUID()}, CreatedAt: now, UpdatedAt: now}))
}

// kept is every kept assistant: the node's copy while the generation is
// the one it was read at, else read again (one read of the generation
// when it did not change).
func (r *Registry) kept(ctx context.Context, st server.ItemStore) ([]Assistant, error) {
	gen := ""
	if it, ok, err := st.GetItem(ctx, scope, genNS, genKey); err != nil {
		return nil, server.StoreError(err)
	} else if ok {
		gen, _ = it.Value["g"].(string)
	}
	r.cacheMu.Lock()
	defer r.cacheMu.Unlock()
	if gen != "" && gen == r.cachedGen {
		return r.cached, nil
	}
	var all []Assistant
	var derr error
	if err := st.ScanItems(ctx, scope, latestNS, func(it server.StoreItem) bool {
		a, err := decode(it.Value)
		if err != nil {
			derr = err
			return false
		}
		all = append(all, a)
		return true
	}); err != nil {
		return nil, server.StoreError(err)
	}
	if derr != nil {
		return nil, derr
	}
	r.cachedGen, r.cached = gen, all
	return all, nil
}

// countMade is how many assistants clients made (r.mu held): counted
// once from the kept ones (the graphs' own left out), then as this node
// makes and deletes them.
func (r *Registry) countMade(ctx context.Context, st server.ItemStore) (int, error) {
	if !r.counted {
		all, err := r.kept(ctx, st)
		if err != nil {
			return 0, err
		}
		r.count = 0
		for _, a := range all {
			if !r.graphsOwn(a) {
				r.count++
			}
		}
		r.counted = true
	}
	return r.count, nil
}

// Create makes assistant a for p (a new id when a.ID is empty), version
// 1. One whose id exists is ErrExists, unless ifExists is "do_nothing":
// the existing one is returned (created false).
func (r *Registry) Create(ctx context.Context, p *auth.Principal, a Assistant, ifExists string) (Assistant, bool, error) {
	st, err := r.engine()
	if err != nil {
		return Assistant{}, false, err
	}
	if !slices.Contains(r.graphs(), a.GraphID) {
		return Assistant{}, false, fmt.Errorf("%w: %q (the graphs: %s)", ErrNoGraph, a.GraphID, strings.Join(r.graphs(), ", "))
	}
	if a.ID == "" {
		a.ID = records.NewUUID()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old, exists, err := r.Get(ctx, a.ID)
	if err != nil {
		return Assistant{}, false, err
	}
	if exists {
		if ifExists == "do_nothing" && Visible(p, old) {
			return old, false, nil
		}
		return Assistant{}, false, fmt.Errorf("%w: %s", ErrExists, a.ID)
	}
	n, err := r.countMade(ctx, st)
	if err != nil {
		return Assistant{}, false, err
	}
	if n >= r.cfg.MaxAssistants {
		r.host.Refused(server.LimitAssistants)
		return Assistant{}, false, fmt.Errorf("%w: %d", ErrTooMany, r.cfg.MaxAssistants)
	}
	now := r.cfg.Now().UTC()
	a.Version, a.CreatedAt, a.UpdatedAt = 1, now, now
	if p != nil {
		a.Owner = p.Subject
	}
	if a.Name == "" {
		a.Name = "Untitled" // as the Platform names one
	}
	a.Config, a.Context, a.Metadata = orEmpty(a.Config), orEmpty(a.Context), orEmpty(a.Metadata)
	if err := r.put(ctx, st, a, true); err != nil {
		return Assistant{}, false, err
	}
	r.count++
	return a, true, nil
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// versions are assistant id's versions, newest first.
func (r *Registry) versions(ctx context.Context, st server.ItemStore, id string) ([]Assistant, error) {
	var out []Assistant
	var derr error
	if err := st.ScanItems(ctx, scope, versionsNS(id), func(it server.StoreItem) bool {
		a, err := decode(it.Value)
		if err != nil {
			derr = err
			return false
		}
		out = append(out, a)
		return true
	}); err != nil {
		return nil, server.StoreError(err)
	}
	slices.SortFunc(out, func(a, b Assistant) int { return cmp.Compare(b.Version, a.Version) })
	return out, derr
}

// Update makes a new version of assistant id with ch, and makes it the
// latest. A graph's own assistant, updated, is kept from then on (its
// first version the one the server made).
func (r *Registry) Update(ctx context.Context, p *auth.Principal, id string, ch Changes) (Assistant, error) {
	st, err := r.engine()
	if err != nil {
		return Assistant{}, err
	}
	if ch.GraphID != nil && !slices.Contains(r.graphs(), *ch.GraphID) {
		return Assistant{}, fmt.Errorf("%w: %q", ErrNoGraph, *ch.GraphID)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	a, err := r.changeable(ctx, p, id)
	if err != nil {
		return Assistant{}, err
	}
	vs, err := r.versions(ctx, st, a.ID)
	if err != nil {
		return Assistant{}, err
	}
	if len(vs) == 0 { // a graph's own, kept from now on: its first version
		if err := r.put(ctx, st, a, true); err != nil {
			return Assistant{}, err
		}
		vs = []Assistant{a}
	}
	if ch.GraphID != nil {
		a.GraphID = *ch.GraphID
	}
	if ch.Name != nil {
		a.Name = *ch.Name
	}
	if ch.Description != nil {
		a.Description = ch.Description
	}
	if ch.Config != nil {
		a.Config = ch.Config
	}
	if ch.Context != nil {
		a.Context = ch.Context
	}
	if ch.Metadata != nil {
		a.Metadata = maps.Clone(orEmpty(a.Metadata))
		maps.Copy(a.Metadata, ch.Metadata)
	}
	a.Version = vs[0].Version + 1
	a.UpdatedAt = r.cfg.Now().UTC()
	if err := r.put(ctx, st, a, true); err != nil {
		return Assistant{}, err
	}
	return a, nil
}

// SetLatest makes version the latest of assistant id.
func (r *Registry) SetLatest(ctx context.Context, p *auth.Principal, id string, version int) (Assistant, error) {
	st, err := r.engine()
	if err != nil {
		return Assistant{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	a, err := r.changeable(ctx, p, id)
	if err != nil {
		return Assistant{}, err
	}
	it, found, err := st.GetItem(ctx, scope, versionsNS(a.ID), versionKey(version))
	if err != nil {
		return Assistant{}, server.StoreError(err)
	}
	if !found {
		if version == 1 && a.Version == 1 {
			return a, nil // a graph's own, never updated: its one version
		}
		return Assistant{}, fmt.Errorf("%w: assistant %s has no version %d", ErrNotFound, a.ID, version)
	}
	v, err := decode(it.Value)
	if err != nil {
		return Assistant{}, err
	}
	v.CreatedAt, v.UpdatedAt = a.CreatedAt, r.cfg.Now().UTC()
	return v, r.put(ctx, st, v, false)
}

// Versions are assistant id's versions, newest first, those whose
// metadata holds md, a page of them.
func (r *Registry) Versions(ctx context.Context, p *auth.Principal, id string, md map[string]any, limit, offset int) ([]Assistant, error) {
	a, ok, err := r.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if !ok || !Visible(p, a) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	var vs []Assistant
	if r.st != nil {
		if vs, err = r.versions(ctx, r.st, a.ID); err != nil {
			return nil, err
		}
	}
	if len(vs) == 0 {
		vs = []Assistant{a}
	}
	var out []Assistant
	for _, v := range vs {
		if records.MetadataMatches(v.Metadata, md) {
			out = append(out, v)
		}
	}
	return page(out, limit, offset), nil
}

func page(all []Assistant, limit, offset int) []Assistant {
	if limit <= 0 {
		limit = 10
	}
	if offset >= len(all) {
		return []Assistant{}
	}
	all = all[offset:]
	return all[:min(limit, len(all))]
}

// Delete deletes assistant id and its versions. A graph's own assistant
// cannot be deleted (the server makes it at every start); one updated
// goes back to what the server made.
func (r *Registry) Delete(ctx context.Context, p *auth.Principal, id string) error {
	st, err := r.engine()
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	a, err := r.changeable(ctx, p, id)
	if err != nil {
		return err
	}
	vs, err := r.versions(ctx, st, a.ID)
	if err != nil {
		return err
	}
	if len(vs) == 0 {
		return fmt.Errorf("%w: assistant %s is graph %s's own: the server makes it at every start", ErrExists, a.ID, a.GraphID)
	}
	for _, v := range vs {
		if err := st.DeleteItem(ctx, scope, versionsNS(a.ID), versionKey(v.Version)); err != nil {
			return server.StoreError(err)
		}
	}
	if err := st.DeleteItem(ctx, scope, latestNS, a.ID); err != nil {
		return server.StoreError(err)
	}
	if r.counted && !r.graphsOwn(a) {
		r.count--
	}
	return r.changed(ctx, st)
}

// Search lists the assistants p sees that q selects (the graphs' own
// among them, as updated), and how many q selects in all.
func (r *Registry) Search(ctx context.Context, p *auth.Principal, q Query) ([]Assistant, int, error) {
	var kept []Assistant
	if r.st != nil {
		var err error
		if kept, err = r.kept(ctx, r.st); err != nil {
			return nil, 0, err
		}
	}
	name := strings.ToLower(q.Name)
	var found []Assistant
	selects := func(a Assistant) bool {
		return Visible(p, a) && (q.GraphID == "" || a.GraphID == q.GraphID) &&
			(name == "" || strings.Contains(strings.ToLower(a.Name), name)) && records.MetadataMatches(a.Metadata, q.Metadata)
	}
	own := map[string]bool{} // the graphs' own, by id: those kept (updated) are in kept
	for _, g := range r.graphs() {
		own[GraphAssistantID(g)] = true
	}
	for _, a := range kept {
		delete(own, a.ID)
		if selects(a) {
			found = append(found, a)
		}
	}
	for _, g := range r.graphs() {
		if a := r.system(g); own[a.ID] && selects(a) {
			found = append(found, a)
		}
	}
	slices.SortFunc(found, func(a, b Assistant) int {
		c := 0
		switch q.SortBy {
		case "assistant_id":
			c = strings.Compare(a.ID, b.ID)
		case "graph_id":
			c = strings.Compare(a.GraphID, b.GraphID)
		case "name":
			c = strings.Compare(a.Name, b.Name)
		case "updated_at":
			c = a.UpdatedAt.Compare(b.UpdatedAt)
		default:
			c = a.CreatedAt.Compare(b.CreatedAt)
		}
		if c == 0 {
			c = strings.Compare(a.ID, b.ID)
		}
		if q.SortOrder != "asc" {
			c = -c
		}
		return c
	})
	return page(found, q.Limit, q.Offset), len(found), nil
}

// RunConfig is the config a run of a with its own config runs with: a's,
// with the run's members over it (configurable merged member by member),
// as LangGraph merges an assistant's config into a run's.
func RunConfig(a Assistant, run map[string]any) map[string]any {
	out := maps.Clone(orEmpty(a.Config))
	for k, v := range run {
		if k == "configurable" {
			own, _ := out[k].(map[string]any)
			theirs, _ := v.(map[string]any)
			merged := maps.Clone(orEmpty(own))
			maps.Copy(merged, theirs)
			out[k] = merged
			continue
		}
		out[k] = v
	}
	return out
}

// IsNotFound reports whether err says there is no such assistant.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

package diskstore

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/agentstream/agentstream/server"
	"github.com/cockroachdb/pebble/v2"
)

// The threads' records (server.ThreadCatalog): "m/" THREAD -> the record
// as JSON, written synced (a Platform client's thread outlives a crash
// once it was answered), deleted with the thread (State.Delete).

var _ server.ThreadCatalog = (*State)(nil)

func recordKey(thread string) []byte { return append([]byte("m/"), thread...) }

// threadRecord is a ThreadRecord on disk.
type threadRecord struct {
	Owner     string         `json:"o,omitempty"`
	CreatedAt time.Time      `json:"c"`
	UpdatedAt time.Time      `json:"u"`
	Metadata  map[string]any `json:"m,omitempty"`
	Config    map[string]any `json:"g,omitempty"`
}

func decodeRecord(thread string, b []byte) (server.ThreadRecord, error) {
	var r threadRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return server.ThreadRecord{}, errors.Join(errCorrupt, err)
	}
	if r.Metadata == nil {
		r.Metadata = map[string]any{}
	}
	if r.Config == nil {
		r.Config = map[string]any{}
	}
	return server.ThreadRecord{ID: thread, Owner: r.Owner, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, Metadata: r.Metadata, Config: r.Config}, nil
}

// Record implements server.ThreadCatalog.
func (s *State) Record(_ context.Context, thread string) (server.ThreadRecord, bool, error) {
	b, ok, err := s.get(recordKey(thread))
	if err != nil || !ok {
		return server.ThreadRecord{}, false, err
	}
	r, err := decodeRecord(thread, b)
	return r, err == nil, err
}

// SetRecord implements server.ThreadCatalog.
func (s *State) SetRecord(_ context.Context, rec server.ThreadRecord) error {
	if err := s.log.checkWritable(); err != nil {
		return err
	}
	b, err := json.Marshal(threadRecord{Owner: rec.Owner, CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt, Metadata: rec.Metadata, Config: rec.Config})
	if err != nil {
		return err
	}
	return s.db.Set(recordKey(rec.ID), b, pebble.Sync)
}

// Records implements server.ThreadCatalog: the records in thread order.
func (s *State) Records(_ context.Context, fn func(server.ThreadRecord) bool) error {
	prefix := []byte("m/")
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper(prefix)})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		r, err := decodeRecord(string(it.Key()[len(prefix):]), it.Value())
		if err != nil {
			continue // one that cannot be read is left out of lists
		}
		if !fn(r) {
			break
		}
	}
	return errors.Join(it.Error(), it.Close())
}

package records

import (
	"encoding/json"
	"time"
)

// The JSON a store keeps a ThreadRecord or a RunRecord in (the disk and
// Redis engines keep the same), short member names for many records.

type threadRecordJSON struct {
	Owner     string         `json:"o,omitempty"`
	CreatedAt time.Time      `json:"c"`
	UpdatedAt time.Time      `json:"u"`
	Metadata  map[string]any `json:"m,omitempty"`
	Config    map[string]any `json:"g,omitempty"`
	TTL       time.Duration  `json:"x,omitempty"`
}

// MarshalThreadRecord encodes rec for a store (its ID is the store's key).
func MarshalThreadRecord(rec ThreadRecord) ([]byte, error) {
	return json.Marshal(threadRecordJSON{Owner: rec.Owner, CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt, Metadata: rec.Metadata, Config: rec.Config, TTL: rec.TTL})
}

// UnmarshalThreadRecord decodes thread's record, its metadata and config
// never nil.
func UnmarshalThreadRecord(thread string, b []byte) (ThreadRecord, error) {
	var r threadRecordJSON
	if err := json.Unmarshal(b, &r); err != nil {
		return ThreadRecord{}, err
	}
	return ThreadRecord{ID: thread, Owner: r.Owner, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		Metadata: orEmptyMap(r.Metadata), Config: orEmptyMap(r.Config), TTL: r.TTL}, nil
}

type runRecordJSON struct {
	Assistant string         `json:"a"`
	Status    string         `json:"s"`
	Strategy  string         `json:"m,omitempty"`
	Input     any            `json:"i,omitempty"`
	Config    map[string]any `json:"c,omitempty"`
	Metadata  map[string]any `json:"d,omitempty"`
	CreatedAt time.Time      `json:"t"`
	UpdatedAt time.Time      `json:"u"`
	After     uint64         `json:"q,omitempty"`
	Error     string         `json:"e,omitempty"`
}

// MarshalRunRecord encodes rec for a store (its thread and ID are the
// store's key).
func MarshalRunRecord(rec RunRecord) ([]byte, error) {
	return json.Marshal(runRecordJSON{Assistant: rec.Assistant, Status: rec.Status, Strategy: rec.MultitaskStrategy, Input: rec.Input,
		Config: rec.Config, Metadata: rec.Metadata, CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt, After: rec.After, Error: rec.Error})
}

// UnmarshalRunRecord decodes run id of thread.
func UnmarshalRunRecord(thread, id string, b []byte) (RunRecord, error) {
	var r runRecordJSON
	if err := json.Unmarshal(b, &r); err != nil {
		return RunRecord{}, err
	}
	return RunRecord{ID: id, Thread: thread, Assistant: r.Assistant, Status: r.Status, MultitaskStrategy: r.Strategy,
		Input: r.Input, Config: r.Config, Metadata: r.Metadata, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, After: r.After, Error: r.Error}, nil
}

type storeItemJSON struct {
	Scope     string         `json:"s,omitempty"`
	Namespace []string       `json:"n"`
	Key       string         `json:"k"`
	Value     map[string]any `json:"v"`
	CreatedAt time.Time      `json:"c"`
	UpdatedAt time.Time      `json:"u"`
	TTL       time.Duration  `json:"t,omitempty"`
	ExpiresAt *time.Time     `json:"e,omitempty"`
}

// MarshalStoreItem encodes an item for a store, whole (its path is the
// store's key, which a reader need not parse).
func MarshalStoreItem(it StoreItem) ([]byte, error) {
	j := storeItemJSON{Scope: it.Scope, Namespace: it.Namespace, Key: it.Key, Value: it.Value, CreatedAt: it.CreatedAt, UpdatedAt: it.UpdatedAt, TTL: it.TTL}
	if !it.ExpiresAt.IsZero() {
		j.ExpiresAt = &it.ExpiresAt
	}
	return json.Marshal(j)
}

// UnmarshalStoreItem decodes an item, its value never nil.
func UnmarshalStoreItem(b []byte) (StoreItem, error) {
	var j storeItemJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return StoreItem{}, err
	}
	it := StoreItem{Scope: j.Scope, Namespace: j.Namespace, Key: j.Key, Value: orEmptyMap(j.Value), CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, TTL: j.TTL}
	if j.ExpiresAt != nil {
		it.ExpiresAt = *j.ExpiresAt
	}
	return it, nil
}

package diskstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/agentstream/agentstream/server"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// The store's keys. Events are written twice, both times compressed: at
// once into the commit log, in the order they came (one record per group
// commit, in files of its own: package commitlog; S2, which is fast,
// since a commit lives only seconds), and later, a thread's run of them
// at a time, into that thread's chunks (zstd, which is smaller; S2 while
// the process has no CPU to spare, rewritten later), which replays read;
// the commit log lets go of a segment once every event in it is in a
// chunk. A store an earlier version left may hold commits in
// the tree ("w/"), which the next Open folds and deletes.
//
//	"w/" COMMIT(8)             -> (earlier versions) a group commit: its events (thread, seq, JSON)
//	"c/" THREAD 0 FIRST(8)     -> a chunk: the thread's events FIRST.. (chunkHead, then JSON)
//	"t/" TIME(8) THREAD 0 FIRST(8) -> the chunks in the order they were written: the chunk's size
//	"h/" THREAD                -> the id of the thread's last event in a chunk
//	"n/" THREAD                -> the id (new epoch, seq) from which a thread goes on after a crash
//	"l/" THREAD                -> the oldest seq the retention policy keeps of the thread
//	"x/" THREAD                -> a deleted thread: the last commit its events can be in
//	"r/" THREAD                -> the thread's root run is open (Engine.Start ends it)
//	"p/" THREAD 0 PRODUCER     -> a producer's last batch on the thread (server.LastBatch)
//	"s/" THREAD 0 ...          -> values ("v"), owner ("o"), checkpoints ("c" N(8))
//	"m/" THREAD                -> its record for the Platform API (records.go)
//	"n/" THREAD 0 RUN          -> a run's record for the Platform API (records.go)
//	"o/" RUN                   -> the run's thread (records.go)
//	"q/" THREAD 0 RUN          -> a run whose record says it runs or is queued (Engine.Start ends it)
//	"i/" records.ItemPath      -> an item of the long-term store (items.go)
//	"m/clean"                  -> the store was closed cleanly
func chunkPrefix(thread string) []byte {
	return append(append([]byte("c/"), thread...), 0)
}

func chunkKey(thread string, first uint64) []byte {
	return binary.BigEndian.AppendUint64(chunkPrefix(thread), first)
}

// chunkFirst reads a chunk key's first seq.
func chunkFirst(k []byte) uint64 { return binary.BigEndian.Uint64(k[len(k)-8:]) }

// indexFrom is where the index's entries of chunks written at time at
// (Unix ms) and later begin.
func indexFrom(at uint64) []byte { return binary.BigEndian.AppendUint64([]byte("t/"), at) }

// wholeIndex bounds every entry of the index.
func wholeIndex() (from, to []byte) { return []byte("t/"), []byte("t0") }

func indexKey(at uint64, thread string, first uint64) []byte {
	k := indexFrom(at)
	k = append(append(k, thread...), 0)
	return binary.BigEndian.AppendUint64(k, first)
}

// parseIndexKey reads an index key's thread and first seq.
func parseIndexKey(k []byte) (thread string, first uint64, ok bool) {
	if len(k) < 2+8+1+8 {
		return "", 0, false
	}
	return string(k[10 : len(k)-9]), binary.BigEndian.Uint64(k[len(k)-8:]), true
}

func headKey(thread string) []byte    { return append([]byte("h/"), thread...) }
func renewKey(thread string) []byte   { return append([]byte("n/"), thread...) }
func floorKey(thread string) []byte   { return append([]byte("l/"), thread...) }
func deletedKey(thread string) []byte { return append([]byte("x/"), thread...) }

// runKey marks a thread whose root run is open (its last root lifecycle
// event neither completed nor failed): a store that opens with one has
// a run no process runs (Engine.Start ends it).
func runKey(thread string) []byte { return append([]byte("r/"), thread...) }

// upper is the end of the keys starting with prefix.
func upper(prefix []byte) []byte {
	return append(append([]byte(nil), prefix...), 0xff)
}

// chunkHead is what a chunk says of itself before its compressed events:
// enough for the retention policy to drop it without reading them.
type chunkHead struct {
	Written        uint64 // when it was written (Unix ms): its index key's TIME
	Count          uint64
	Last           uint64 // the last event's seq
	Oldest, Newest uint64 // its events' timestamps (Unix ms)
}

func (h chunkHead) append(b []byte) []byte {
	for _, v := range []uint64{h.Written, h.Count, h.Last, h.Oldest, h.Newest} {
		b = binary.AppendUvarint(b, v)
	}
	return b
}

var errCorrupt = errors.New("diskstore: a stored value does not decode")

// readChunkHead reads a chunk value's head and returns the rest.
func readChunkHead(b []byte) (chunkHead, []byte, error) {
	var h chunkHead
	for _, p := range []*uint64{&h.Written, &h.Count, &h.Last, &h.Oldest, &h.Newest} {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return h, nil, errCorrupt
		}
		*p, b = v, b[n:]
	}
	return h, b, nil
}

// codec compresses the store's values. Chunks are zstd at its fastest:
// the events of a chunk repeat each other's field names, and keep a sixth
// to a tenth of their size. While the process has no CPU to spare
// (Options.Busy) chunks are S2 instead, at a fraction of zstd's CPU for
// more bytes (docs/durability.md has the figures), rewritten as zstd once
// it has CPU again
// (recompressSome) or by Engine.Compact.
// Commits are S2: they are read only after a crash. Both are a marker
// byte, then an S2 block; a zstd value begins with zstd's magic number
// (and a store written before holds zstd commits): decodeValue reads
// either.
type codec struct {
	enc *zstd.Encoder
	dec *zstd.Decoder
}

// s2Value marks a value compressed with S2 (a zstd frame begins with
// its magic number, 0x28 B5 2F FD).
const s2Value = 0x02

var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// encodeCommit appends the compressed group commit raw to dst.
func (c *codec) encodeCommit(dst, raw []byte) []byte { return c.encode(dst, raw, true) }

// encode appends raw compressed to dst: with S2 when fast, else zstd.
func (c *codec) encode(dst, raw []byte, fast bool) []byte {
	m := s2.MaxEncodedLen(len(raw))
	if !fast || m < 0 { // m < 0: over 4 GiB, past what an S2 block holds
		return c.enc.EncodeAll(raw, dst)
	}
	dst = slices.Grow(append(dst, s2Value), m)
	n := len(dst)
	return dst[:n+len(s2.Encode(dst[n:n+m], raw))]
}

// isFast says whether a value written by encode is S2.
func isFast(v []byte) bool { return len(v) > 0 && v[0] == s2Value }

// decodeValue reads a value written by encode (a chunk or a commit).
func (c *codec) decodeValue(v []byte) ([]byte, error) {
	switch {
	case isFast(v):
		return s2.Decode(nil, v[1:])
	case bytes.HasPrefix(v, zstdMagic):
		return c.dec.DecodeAll(v, nil)
	}
	return nil, errors.New("diskstore: a value of an unknown format")
}

func newCodec() (*codec, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<18))
	if err != nil {
		return nil, err
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(1<<30))
	if err != nil {
		enc.Close()
		return nil, err
	}
	return &codec{enc: enc, dec: dec}, nil
}

func (c *codec) close() {
	_ = c.enc.Close()
	c.dec.Close()
}

// commitRecord appends an event of a group commit: its thread, seq and
// JSON.
func commitRecord(b []byte, thread string, seq uint64, json []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(thread)))
	b = append(b, thread...)
	b = binary.AppendUvarint(b, seq)
	b = binary.AppendUvarint(b, uint64(len(json)))
	return append(b, json...)
}

// readCommit calls fn with each event of a decompressed group commit.
func readCommit(b []byte, fn func(thread string, seq uint64, json []byte) error) error {
	for len(b) > 0 {
		var fields [3][]byte
		var seq uint64
		for i := range fields {
			v, n := binary.Uvarint(b)
			if n <= 0 {
				return errCorrupt
			}
			b = b[n:]
			if i == 1 {
				seq = v
				continue
			}
			if uint64(len(b)) < v {
				return errCorrupt
			}
			fields[i], b = b[:v], b[v:]
		}
		if err := fn(string(fields[0]), seq, fields[2]); err != nil {
			return err
		}
	}
	return nil
}

// readChunk decodes a decompressed chunk's events, each a
// length-prefixed JSON.
func readChunk(b []byte, fn func(*server.Event) (bool, error)) (bool, error) {
	for len(b) > 0 {
		v, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < v {
			return false, errCorrupt
		}
		e, err := server.DecodeEvent(b[n : n+int(v)])
		if err != nil {
			return false, fmt.Errorf("diskstore: %w", err)
		}
		b = b[n+int(v):]
		more, err := fn(e)
		if err != nil || !more {
			return more, err
		}
	}
	return true, nil
}

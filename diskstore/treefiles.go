package diskstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	pebblerecord "github.com/cockroachdb/pebble/v2/record"
)

// The tree's own files besides its logs and tables: the MANIFEST (the
// list of tables each version of the tree holds, a record log like the
// tree's logs) and the OPTIONS file. Pebble takes a MANIFEST record that
// fails its checksum for the file's torn end, silently, and opens the
// tree as it was before that record: the tables the later records named
// are forgotten, and deleted as obsolete, and what they held is lost
// without a word. checkManifest reads the current MANIFEST before Pebble
// does and refuses one that cannot be read to its end (ErrDamaged, naming
// the file and offset) but for a last record cut short (a crash while
// it was written, never acknowledged). checkOptions parses the OPTIONS
// file Pebble would read, so that its damage names the file; repair
// deletes a damaged one (it holds only what this package sets in code,
// written again as Pebble opens).

// checkManifest checks dir's current MANIFEST; nil when there is none (a
// new store) or it reads whole.
func checkManifest(dir string) error {
	name, err := currentManifest(dir)
	if err != nil || name == "" {
		return err
	}
	path := filepath.Join(dir, name)
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("diskstore: %w", err)
	}
	r := newLogReader(bytes.NewReader(b), 0)
	for {
		good := r.Offset()
		rec, err := r.Next()
		if err == nil {
			_, err = io.Copy(io.Discard, rec)
		}
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err == nil:
			continue
		case !pebblerecord.IsInvalidRecord(err) && !errors.Is(err, io.ErrUnexpectedEOF):
			return fmt.Errorf("diskstore: reading %s: %w", path, err)
		case tornEnd(b, good):
			return nil
		}
		return fmt.Errorf("%w: the tree's MANIFEST %s offset %d: a record cannot be read (%v) and is not the file's torn end: the tables it lists cannot be known (restore the store from a backup)", ErrDamaged, path, good, err)
	}
}

// tornEnd reports whether what follows offset at in a record log is the
// end a crash leaves: zeros, or one chunk that the file ends inside.
func tornEnd(b []byte, at int64) bool {
	rest := b[at:]
	if len(bytes.Trim(rest, "\x00")) == 0 {
		return true
	}
	// A chunk does not cross a block: one with too little room left in
	// its block starts the next.
	if left := blockBytes - at%blockBytes; left < 7 {
		at += left
		if at >= int64(len(b)) {
			return true
		}
		rest = b[at:]
	}
	if len(rest) < 7 {
		return true // the header itself was cut
	}
	size := int64(binary.LittleEndian.Uint16(rest[4:6]))
	header := int64(7)
	if rest[6] > 4 {
		header = 11 // the recyclable chunk's header, with its log number
	}
	return at+header+size > int64(len(b))
}

// currentManifest is the MANIFEST Pebble's marker names in dir ("" when
// none).
func currentManifest(dir string) (string, error) {
	marks, err := filepath.Glob(filepath.Join(dir, "marker.manifest.*"))
	if err != nil {
		return "", err
	}
	best, bestN := "", int64(-1)
	for _, m := range marks {
		parts := strings.SplitN(filepath.Base(m), ".", 4) // marker.manifest.N.MANIFEST-X
		if len(parts) != 4 {
			continue
		}
		n, err := strconv.ParseInt(parts[2], 10, 64)
		if err == nil && n > bestN {
			best, bestN = parts[3], n
		}
	}
	return best, nil
}

// checkOptions parses the OPTIONS file Pebble reads at open (the newest);
// a damaged one is ErrDamaged naming it, or with repair deleted. It says
// what repair did ("" when nothing).
func checkOptions(dir string, repair bool) (string, error) {
	names, err := filepath.Glob(filepath.Join(dir, "OPTIONS-*"))
	if err != nil || len(names) == 0 {
		return "", err
	}
	num := func(p string) uint64 {
		n, _ := strconv.ParseUint(strings.TrimPrefix(filepath.Base(p), "OPTIONS-"), 10, 64)
		return n
	}
	sort.Slice(names, func(i, j int) bool { return num(names[i]) < num(names[j]) })
	path := names[len(names)-1]
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("diskstore: %w", err)
	}
	var o pebble.Options
	perr := o.Parse(string(b), nil)
	if perr == nil {
		return "", nil
	}
	if !repair {
		return "", fmt.Errorf("%w: the tree's options %s: %v (repair writes it again: it holds only what the server sets)", ErrDamaged, path, perr)
	}
	if err := os.Remove(path); err != nil {
		return "", fmt.Errorf("diskstore: repairing %s: %w", path, err)
	}
	return "the tree's options " + path + ": damaged, written again", nil
}

package diskstore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// A damaged table (a block whose checksum fails) is repaired by writing
// the tree again from what can be read of it (Options.Repair): a new
// tree is filled with every key a read from the start reaches before the
// damage and every key a read from the end reaches before it, and takes
// the old one's place; the old tree's files are kept aside in a
// directory of their own ("damaged-TIME"), for whoever wants to look.
// The keys between the two reads cannot be read while the damaged block
// is there (of its table, or of another table inside its span) and are
// lost, said by Engine.Repaired: a chunk of events lost so is a hole in
// its thread's stream, which readers are told of (events.missed). With
// damage in more than one place, what lies between the first and the
// last is lost.

// rebuildTree writes the tree of db (in dir, opened with po) again from
// what can be read, closes db and returns the new tree open, with what
// was lost; nil when db was closed and no tree is open (the error says
// why).
func rebuildTree(db *pebble.DB, dir string, po func() *pebble.Options, damage error) (*pebble.DB, string, error) {
	tmp := filepath.Join(dir, ".rebuild")
	if err := os.RemoveAll(tmp); err != nil {
		return db, "", err
	}
	fresh, err := pebble.Open(tmp, po())
	if err != nil {
		return db, "", fmt.Errorf("diskstore: repairing %s: %w", dir, err)
	}
	lo, hi, copyErr := copyReadable(db, fresh)
	if copyErr == nil && lo == nil && hi == nil {
		// Not a key read from either end: a table that cannot be opened
		// at all (its footer or index damaged), whose rebuilt tree would
		// hold nothing.
		copyErr = fmt.Errorf("%w (no key of the tree can be read around it: restore the store from a backup)", damage)
	}
	closeErr := fresh.Close()
	if err := errors.Join(copyErr, closeErr); err != nil {
		_ = os.RemoveAll(tmp)
		return db, "", err
	}
	if err := db.Close(); err != nil {
		return nil, "", fmt.Errorf("diskstore: repairing %s: %w", dir, err)
	}
	aside := filepath.Join(dir, "damaged-"+time.Now().UTC().Format("20060102T150405"))
	if err := swapTree(dir, tmp, aside); err != nil {
		return nil, "", fmt.Errorf("diskstore: repairing %s: %w", dir, err)
	}
	db, err = pebble.Open(dir, po())
	if err != nil {
		return nil, "", fmt.Errorf("diskstore: repairing %s: %w", dir, err)
	}
	what, _ := strings.CutPrefix(damage.Error(), ErrTableDamaged.Error()+" ")
	return db, fmt.Sprintf("table %s: the keys after %s and before %s could not be read; the tree was written again without them (the damaged one is in %s)",
		what, showKey(lo, "the first"), showKey(hi, "the last"), aside), nil
}

// copyReadable writes into to every key of from a read from the start
// reaches, and every key a read from the end reaches; it returns the
// last key of the first read and the first of the second (nil: none).
func copyReadable(from, to *pebble.DB) (lo, hi []byte, err error) {
	read := func(first, next func(*pebble.Iterator) bool, stopAt []byte, forward bool) ([]byte, error) {
		it, err := from.NewIter(nil)
		if err != nil {
			return nil, err
		}
		defer it.Close()
		b := to.NewBatch()
		var last []byte
		for ok := first(it); ok; ok = next(it) {
			if stopAt != nil && (forward && bytes.Compare(it.Key(), stopAt) >= 0 || !forward && bytes.Compare(it.Key(), stopAt) <= 0) {
				break // read by the other way already (no damage at all)
			}
			v, err := it.ValueAndErr()
			if err != nil {
				break
			}
			if err := b.Set(it.Key(), v, nil); err != nil {
				return nil, err
			}
			last = append(last[:0], it.Key()...)
			if b.Len() > 4<<20 {
				if err := b.Commit(pebble.NoSync); err != nil {
					return nil, err
				}
				b = to.NewBatch()
			}
		}
		return last, b.Commit(pebble.NoSync)
	}
	if lo, err = read((*pebble.Iterator).First, (*pebble.Iterator).Next, nil, true); err != nil {
		return nil, nil, err
	}
	if hi, err = read((*pebble.Iterator).Last, (*pebble.Iterator).Prev, lo, false); err != nil {
		return nil, nil, err
	}
	return lo, hi, to.Flush()
}

// treeFile reports whether name is one of Pebble's files (which the
// rebuilt tree replaces), not the commit log's or the store's own.
func treeFile(name string) bool {
	for _, p := range []string{"MANIFEST-", "OPTIONS-", "marker."} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".log") || strings.HasSuffix(name, ".blob")
}

// swapTree moves the tree's files of dir into aside and the rebuilt
// tree's (in tmp) into dir.
func swapTree(dir, tmp, aside string) error {
	if err := os.Mkdir(aside, 0o750); err != nil {
		return err
	}
	if err := moveTreeFiles(dir, aside); err != nil {
		return err
	}
	if err := moveTreeFiles(tmp, dir); err != nil {
		return err
	}
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// moveTreeFiles moves the tree's files of from into to.
func moveTreeFiles(from, to string) error {
	files, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	for _, e := range files {
		if !e.IsDir() && treeFile(e.Name()) {
			if err := os.Rename(filepath.Join(from, e.Name()), filepath.Join(to, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// showKey is a key as repair names it (none: what).
func showKey(k []byte, what string) string {
	if k == nil {
		return what + " key"
	}
	return fmt.Sprintf("%q", k)
}

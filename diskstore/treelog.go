package diskstore

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"

	pebblerecord "github.com/cockroachdb/pebble/v2/record"
)

// The tree's write-ahead logs (Pebble's NNNNNN.log files) are read here
// before Pebble opens them: Pebble takes a record that fails its checksum
// with nothing valid after it in the same block for the log's torn end
// and starts with what came before, silently, though later blocks of the
// log hold more. checkTreeLogs reads each log to its end and, where a
// record cannot be read, looks for a valid record in the blocks after
// it: one found means the disk damaged the log (a crash only tears its
// end). Such a store is refused (ErrDamaged), naming the file and
// offset; Options.Repair cuts the log at the damage, so that Pebble
// keeps what came before it, and the events whose chunks the cut part
// held are announced to readers as missed (a hole in their thread's
// stream; see thread.history in package server).

// blockBytes is the size of a log's blocks: every block starts with a
// chunk of a record, so a reader can start at any of them.
const blockBytes = 32 << 10

// treeLogDamage is a tree log that cannot be read past Offset while a
// valid record follows at Next.
type treeLogDamage struct {
	File         string
	Offset, Next int64
}

func (d treeLogDamage) String() string {
	return fmt.Sprintf("%s offset %d: a record cannot be read (a checksum fails) and a valid one follows at offset %d", d.File, d.Offset, d.Next)
}

// checkTreeLogs reads the tree's logs in dir, oldest first, and reports
// the damaged ones.
func checkTreeLogs(dir string) ([]treeLogDamage, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		return nil, err
	}
	type logFile struct {
		path string
		num  uint64
	}
	var logs []logFile
	for _, p := range names {
		n, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(p), ".log"), 10, 64)
		if err != nil {
			continue // not one of Pebble's
		}
		logs = append(logs, logFile{p, n})
	}
	sort.Slice(logs, func(i, j int) bool { return logs[i].num < logs[j].num })
	var out []treeLogDamage
	for _, lf := range logs {
		d, err := checkTreeLog(lf.path, lf.num)
		if err != nil {
			return nil, err
		}
		if d != nil {
			out = append(out, *d)
		}
	}
	return out, nil
}

// checkTreeLog reads one log (number num) to its end.
func checkTreeLog(path string, num uint64) (*treeLogDamage, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	r := newLogReader(f, num)
	for {
		good := r.Offset()
		rec, err := r.Next()
		if err == nil {
			_, err = io.Copy(io.Discard, rec)
		}
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		if err == nil {
			continue
		}
		if !pebblerecord.IsInvalidRecord(err) {
			return nil, fmt.Errorf("diskstore: reading %s: %w", path, err)
		}
		at := good // where the record that cannot be read starts
		for next := (at/blockBytes + 1) * blockBytes; next < info.Size(); next += blockBytes {
			ahead := newLogReader(io.NewSectionReader(f, next, info.Size()-next), num)
			rec, err := ahead.Next()
			if err == nil {
				_, err = io.Copy(io.Discard, rec)
			}
			if err == nil {
				return &treeLogDamage{File: path, Offset: at, Next: next + ahead.Offset()}, nil
			}
		}
		return nil, nil // the log's torn end
	}
}

// cutTreeLog truncates a damaged log at its damage (Options.Repair).
func cutTreeLog(d treeLogDamage) error {
	if err := os.Truncate(d.File, d.Offset); err != nil {
		return fmt.Errorf("diskstore: repairing %s: %w", d.File, err)
	}
	f, err := os.Open(d.File)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// newLogReader is pebblerecord.NewReader for log number num. Its parameter's
// type lives in an internal package of Pebble, which no code outside it
// can name: the number is converted by reflection.
var newLogReader = func() func(r io.Reader, num uint64) *pebblerecord.Reader {
	fn := reflect.ValueOf(pebblerecord.NewReader)
	numType := fn.Type().In(1)
	return func(r io.Reader, num uint64) *pebblerecord.Reader {
		out := fn.Call([]reflect.Value{reflect.ValueOf(&r).Elem(), reflect.ValueOf(num).Convert(numType)})
		return out[0].Interface().(*pebblerecord.Reader)
	}
}()

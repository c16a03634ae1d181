// storebench measures embedded stores for the choice of agentstream's
// disk engine (package diskstore, whose doc holds the figures):
// group-committed appends, the replay of one long thread, bytes on disk
// per event, and start-up with many threads.
package main

import (
	"bytes"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	bolt "go.etcd.io/bbolt"
	_ "modernc.org/sqlite"
)

type store interface {
	appendBatch(evs []ev) error // one group commit, synced
	replay(thread string, fn func(seq uint64, b []byte)) error
	heads() (int, error) // the last seq of every thread (start-up)
	close() error
}

type ev struct {
	thread string
	seq    uint64
	data   []byte
}

func key(thread string, seq uint64) []byte {
	k := make([]byte, 0, len(thread)+10)
	k = append(k, 'e', '/')
	k = append(k, thread...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, seq)
}

// ---- pebble
type pebbleStore struct{ db *pebble.DB }

func openPebble(dir string) (store, error) {
	db, err := pebble.Open(dir, &pebble.Options{})
	return &pebbleStore{db}, err
}
func (s *pebbleStore) appendBatch(evs []ev) error {
	b := s.db.NewBatch()
	for _, e := range evs {
		_ = b.Set(key(e.thread, e.seq), e.data, nil)
	}
	return b.Commit(pebble.Sync)
}
func (s *pebbleStore) replay(thread string, fn func(uint64, []byte)) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: key(thread, 0), UpperBound: key(thread, ^uint64(0))})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		fn(binary.BigEndian.Uint64(k[len(k)-8:]), it.Value())
	}
	return nil
}
func (s *pebbleStore) heads() (int, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte("e/"), UpperBound: []byte("e0")})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	n := 0
	// Seek past each thread: last key of a thread prefix.
	for ok := it.First(); ok; {
		k := it.Key()
		i := bytes.IndexByte(k, 0)
		prefix := append([]byte(nil), k[:i+1]...)
		next := append(append([]byte(nil), prefix[:len(prefix)-1]...), 1)
		if !it.SeekLT(next) {
			break
		}
		n++
		ok = it.SeekGE(next)
	}
	return n, nil
}
func (s *pebbleStore) close() error { return s.db.Close() }

// ---- bbolt
type boltStore struct{ db *bolt.DB }

func openBolt(dir string) (store, error) {
	_ = os.MkdirAll(dir, 0o755)
	db, err := bolt.Open(filepath.Join(dir, "db"), 0o644, &bolt.Options{NoFreelistSync: true})
	if err != nil {
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucketIfNotExists([]byte("e")); return err })
	return &boltStore{db}, err
}
func (s *boltStore) appendBatch(evs []ev) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("e"))
		for _, e := range evs {
			if err := b.Put(key(e.thread, e.seq), e.data); err != nil {
				return err
			}
		}
		return nil
	})
}
func (s *boltStore) replay(thread string, fn func(uint64, []byte)) error {
	return s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket([]byte("e")).Cursor()
		lo := key(thread, 0)
		prefix := lo[:len(lo)-8]
		for k, v := c.Seek(lo); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			fn(binary.BigEndian.Uint64(k[len(k)-8:]), v)
		}
		return nil
	})
}
func (s *boltStore) heads() (int, error) {
	n := 0
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket([]byte("e")).Cursor()
		for k, _ := c.First(); k != nil; {
			i := bytes.IndexByte(k, 0)
			next := append(append([]byte(nil), k[:i]...), 1)
			n++
			k, _ = c.Seek(next)
		}
		return nil
	})
	return n, err
}
func (s *boltStore) close() error { return s.db.Close() }

// ---- sqlite
type sqliteStore struct {
	db *sql.DB
}

func openSQLite(dir string) (store, error) {
	_ = os.MkdirAll(dir, 0o755)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "db")+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	_, err = db.Exec(`CREATE TABLE IF NOT EXISTS events (thread TEXT NOT NULL, seq INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (thread, seq)) WITHOUT ROWID`)
	return &sqliteStore{db}, err
}
func (s *sqliteStore) appendBatch(evs []ev) error {
	tx, err := s.db.Begin()
	if err != nil {
		return err
	}
	st, err := tx.Prepare(`INSERT INTO events (thread, seq, data) VALUES (?, ?, ?)`)
	if err != nil {
		tx.Rollback()
		return err
	}
	for _, e := range evs {
		if _, err := st.Exec(e.thread, e.seq, e.data); err != nil {
			tx.Rollback()
			return err
		}
	}
	st.Close()
	return tx.Commit()
}
func (s *sqliteStore) replay(thread string, fn func(uint64, []byte)) error {
	rows, err := s.db.Query(`SELECT seq, data FROM events WHERE thread = ? ORDER BY seq`, thread)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var seq uint64
		var b []byte
		if err := rows.Scan(&seq, &b); err != nil {
			return err
		}
		fn(seq, b)
	}
	return rows.Err()
}
func (s *sqliteStore) heads() (int, error) {
	rows, err := s.db.Query(`SELECT thread, MAX(seq) FROM events GROUP BY thread`)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
	}
	return n, rows.Err()
}
func (s *sqliteStore) close() error { return s.db.Close() }

func du(dir string) int64 {
	out, _ := exec.Command("du", "-sb", dir).Output()
	n, _ := strconv.ParseInt(strings.Fields(string(out))[0], 10, 64)
	return n
}

func main() {
	which := flag.String("store", "pebble", "pebble, bolt or sqlite")
	root := flag.String("dir", "/tmp/storebench-data", "where")
	threads := flag.Int("threads", 1000, "threads of the append workload")
	total := flag.Int("events", 200000, "events appended")
	batch := flag.Int("batch", 100, "events per group commit")
	flag.Parse()
	open := map[string]func(string) (store, error){"pebble": openPebble, "bolt": openBolt, "sqlite": openSQLite}[*which]
	dir := filepath.Join(*root, *which)
	os.RemoveAll(dir)
	s, err := open(dir)
	if err != nil {
		panic(err)
	}
	// 100 bytes that compress as an event's JSON would, not as a run of one
	// letter: random base64 text.
	pool := make([][]byte, 4096)
	for i := range pool {
		raw := make([]byte, 75)
		rand.Read(raw)
		pool[i] = []byte(base64.StdEncoding.EncodeToString(raw))
	}
	k := 0
	next := func() []byte { k++; return pool[k%len(pool)] }
	// 1. appends, group-committed (fsync per batch), round robin over threads
	seqs := make([]uint64, *threads)
	start := time.Now()
	buf := make([]ev, 0, *batch)
	for i := 0; i < *total; i++ {
		t := i % *threads
		seqs[t]++
		buf = append(buf, ev{thread: "thread-" + strconv.Itoa(t), seq: seqs[t], data: next()})
		if len(buf) == *batch {
			if err := s.appendBatch(buf); err != nil {
				panic(err)
			}
			buf = buf[:0]
		}
	}
	el := time.Since(start)
	fmt.Printf("%s: %d events in %d threads, batches of %d: %.0f events/s (%.0f commits/s)\n", *which, *total, *threads, *batch, float64(*total)/el.Seconds(), float64(*total / *batch)/el.Seconds())
	// 2. one thread of 100,000 events, replayed
	buf = buf[:0]
	for i := 1; i <= 100000; i++ {
		buf = append(buf, ev{thread: "long", seq: uint64(i), data: next()})
		if len(buf) == 1000 {
			if err := s.appendBatch(buf); err != nil {
				panic(err)
			}
			buf = buf[:0]
		}
	}
	s.close()
	s, _ = open(dir)
	start = time.Now()
	n := 0
	if err := s.replay("long", func(uint64, []byte) { n++ }); err != nil {
		panic(err)
	}
	fmt.Printf("%s: replay of a 100,000-event thread (reopened): %d events in %v\n", *which, n, time.Since(start).Round(time.Millisecond))
	s.close()
	size := du(dir)
	fmt.Printf("%s: %d bytes on disk for %d events of 100 bytes: %.0f bytes per event\n", *which, size, *total+100000, float64(size)/float64(*total+100000))
	// 3. start-up with 10,000 threads
	os.RemoveAll(dir)
	s, _ = open(dir)
	buf = buf[:0]
	for t := 0; t < 10000; t++ {
		for q := 1; q <= 20; q++ {
			buf = append(buf, ev{thread: fmt.Sprintf("t%05d", t), seq: uint64(q), data: next()})
		}
		if len(buf) >= 2000 {
			s.appendBatch(buf)
			buf = buf[:0]
		}
	}
	s.close()
	start = time.Now()
	s, err = open(dir)
	if err != nil {
		panic(err)
	}
	h, err := s.heads()
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s: start-up with 10,000 threads of 20 events: open + every thread's head %v (%d threads)\n", *which, time.Since(start).Round(time.Millisecond), h)
	s.close()
}

// Run it on a real disk (not a tmpfs, where fsync costs nothing):
//
//	cd tools/storebench && go build -o /tmp/sb . && for s in pebble bolt sqlite; do /tmp/sb -store $s -dir /var/tmp/storebench; done

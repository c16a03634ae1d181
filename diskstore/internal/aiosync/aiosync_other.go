//go:build !linux

package aiosync

import "errors"

// Syncer is Linux-only; elsewhere New fails and callers sync as before.
type Syncer struct{}

// DefaultDepth is how many syncs a Syncer has in flight at most.
const DefaultDepth = 64

// New fails: the kernel's native AIO is Linux's.
func New(depth int) (*Syncer, error) { return nil, errors.New("aiosync: no native AIO on this system") }

// Counts reports how many syncs went through AIO and how many were made
// as blocking calls: none here.
func (s *Syncer) Counts() (async, blocking uint64) { return 0, 0 }

// Sync is never called here (New fails).
func (s *Syncer) Sync(fd uintptr, dataOnly bool) error {
	return errors.New("aiosync: no native AIO on this system")
}

// Close does nothing (a nil Syncer included).
func (s *Syncer) Close() error { return nil }

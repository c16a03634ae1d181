package longlived

import (
	"context"
	"sync"
)

// Slot is a taken resource, released once.
type Slot struct {
	once    sync.Once
	release func()
	kept    bool
}

type key struct{}

// WithSlot returns ctx carrying a slot that release gives back.
func WithSlot(ctx context.Context, release func()) (context.Context, *Slot) {
	s := &Slot{release: release}
	return context.WithValue(ctx, key{}, s), s
}

// KeepSlot takes over the slot of ctx (if any): the caller must call the
// function it returns when the resource ends, and Done no longer releases
// it.
func KeepSlot(ctx context.Context) func() {
	s, _ := ctx.Value(key{}).(*Slot)
	if s == nil {
		return func() {}
	}
	s.kept = true
	return s.Release
}

// Done releases the slot unless a handler kept it.
func (s *Slot) Done() {
	if !s.kept {
		s.Release()
	}
}

// Release gives the slot back (once).
func (s *Slot) Release() { s.once.Do(s.release) }

package limiter

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// forgotten records, in fixed memory, the keys whose counts process memory
// had no room to keep before their windows ended. Counting alone, such a
// key is not one this instance never saw: a share of the whole budget
// would pass what the store holds of it. So it is refused.
//
// Each key hashes to one slot, which holds the latest end of a window
// forgotten there (Unix seconds, memory's clock). Keys sharing a slot are
// refused together: the table errs toward refusing, never toward a share.
// It is made at the first key forgotten, with slots for twice as many keys
// as memory holds. The zero value, with size 0, has 1,024 slots.
type forgotten struct {
	size int // the entries of the memory it serves
	mu   sync.Mutex
	t    atomic.Pointer[forgotTable]
}

type forgotTable struct {
	seed  maphash.Seed
	slots []atomic.Uint32
}

// add records that the count of key, in a window ending at until, was
// forgotten.
func (f *forgotten) add(key string, until time.Time) {
	t := f.t.Load()
	if t == nil {
		f.mu.Lock()
		if t = f.t.Load(); t == nil {
			t = &forgotTable{seed: maphash.MakeSeed(), slots: make([]atomic.Uint32, slotsFor(f.size))}
			f.t.Store(t)
		}
		f.mu.Unlock()
	}
	end := uint32(min(max((until.UnixMilli()+999)/1000, 0), 1<<32-1))
	s := t.slot(key)
	for old := s.Load(); old < end && !s.CompareAndSwap(old, end); old = s.Load() {
	}
}

// has reports whether a count of key may have been forgotten in a window
// not ended at now.
func (f *forgotten) has(key string, now time.Time) bool {
	t := f.t.Load()
	return t != nil && int64(t.slot(key).Load()) > now.Unix()
}

func (t *forgotTable) slot(key string) *atomic.Uint32 {
	return &t.slots[maphash.String(t.seed, key)&uint64(len(t.slots)-1)]
}

// slotsFor is the table's size for a memory of n entries: a power of two,
// at least twice n and at least 1,024.
func slotsFor(n int) int {
	s := 1024
	for s < 2*n {
		s *= 2
	}
	return s
}

package degraded

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/gatecount/gatecount/store"
)

// Defaults of FleetOptions.
const (
	DefaultFresh = 10 * time.Minute
	DefaultLife  = 70 * time.Minute
)

// registryKey is the key of the registry, in a prefix of its own.
const registryKey = "members"

// Updater is what the fleet and the write-back need of a store: an Update
// under a handle's prefix. [store.Handle] is one.
type Updater interface {
	Update(ctx context.Context, keys []string, apply store.ApplyFunc) error
}

// FleetOptions configure a Fleet. The zero value gives the defaults.
type FleetOptions struct {
	// ID names this life in the registry; it must be new for every life.
	ID string
	// Now is this process's clock; nil means time.Now. Only durations
	// between its readings are used, so it may be off by any fixed amount.
	Now func() time.Time
	// Fresh is how long after its last beat a life may still count alone;
	// 0 means DefaultFresh.
	Fresh time.Duration
	// Life is how long the registry keeps a member after its last beat;
	// 0 means DefaultLife. Keys whose window is longer than Life less
	// Fresh are never counted alone.
	Life time.Duration
	// MaxMembers bounds the registry; 0 means as many as fit in one
	// entry (about 80). A life it has no room for reads it all the same:
	// it counts through the store, never alone.
	MaxMembers int
}

// member is a life as the registry keeps it: when it joined and when it
// last beat, in Unix milliseconds on the store's clock. While it holds
// keys a full store had no room for, Hold is when it began to, and N the
// members it counted then.
type member struct {
	Joined int64 `json:"j"`
	Beat   int64 `json:"b"`
	Hold   int64 `json:"h,omitempty"`
	N      int   `json:"n,omitempty"`
}

// Fleet is one life's place in the registry: when it joined, and the
// members it read at its last beat. It is safe for concurrent use.
type Fleet struct {
	o FleetOptions

	mu      sync.Mutex
	joined  int64     // store ms of this life's joining; 0 before
	beat    int64     // store ms of its last beat that succeeded
	beatAt  time.Time // the same on this process's clock
	members int       // members read then
	left    bool
	// holding: the life wants to hold keys a full store has no room for.
	// held is its registry entry's Hold and N, ready once every other
	// member has beaten since; holders are the N of the other holders.
	holding bool
	held    member
	ready   bool
	holders []int
}

// NewFleet returns a life that has not beaten yet: it counts nothing alone.
func NewFleet(o FleetOptions) *Fleet {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Fresh <= 0 {
		o.Fresh = DefaultFresh
	}
	if o.Life <= 0 {
		o.Life = DefaultLife
	}
	return &Fleet{o: o}
}

// errFull is the error of a beat the registry had no room for.
var errFull = errors.New("degraded: registry full")

// Beat writes this life into the registry and reads the other members.
// Members unheard for Life are dropped. A life missing from the registry
// (never in it, or dropped) joins anew. A registry with no room for it is
// read all the same, and Beat returns an error: the life is no member.
func (f *Fleet) Beat(ctx context.Context, u Updater) error {
	f.mu.Lock()
	joined, left := f.joined, f.left
	f.mu.Unlock()
	if left {
		return nil
	}
	var n int
	var beat int64
	var held member
	var ready bool
	var holders []int
	f.mu.Lock()
	holding := f.holding
	f.mu.Unlock()
	began := f.o.Now()
	err := u.Update(ctx, []string{registryKey}, func(now time.Time, es []store.Entry) error {
		m, nowMs := f.read(es[0], now)
		me, in := m[f.o.ID]
		if !in || joined == 0 || me.Joined != joined {
			me = member{Joined: nowMs}
		}
		me.Beat = nowMs
		if !holding {
			me.Hold, me.N = 0, 0
		} else if me.Hold == 0 {
			me.Hold, me.N = nowMs, len(m)+1-b2i(in)
		}
		m[f.o.ID] = me
		beat, holders = nowMs, nil
		var err error
		if f.o.MaxMembers > 0 && len(m) > f.o.MaxMembers || write(&es[0], m, now.Add(f.o.Life)) != nil {
			delete(m, f.o.ID)
			me, err = member{}, errFull
		}
		joined, n, held, ready = me.Joined, len(m), me, me.Hold != 0
		if err != nil {
			n = 0 // no member: no share
		}
		for id, o := range m {
			if id == f.o.ID {
				continue
			}
			if o.Beat <= me.Hold && o.Beat+f.o.Fresh.Milliseconds() > nowMs {
				ready = false // it may not have read that this life holds keys, and may count
			}
			if o.Hold != 0 {
				holders = append(holders, max(o.N, 1))
			}
		}
		return err
	})
	if err != nil && !errors.Is(err, errFull) {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.left {
		f.joined, f.beat, f.beatAt, f.members = joined, beat, began, n
		f.held, f.ready, f.holders = held, ready && f.holding, holders
	}
	return err
}

// fresh is FleetOptions.Fresh, or 0 for no fleet.
func (f *Fleet) fresh() time.Duration {
	if f == nil {
		return 0
	}
	return f.o.Fresh
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// hold records whether this life wants to hold keys a full store has no
// room for. Its next beat says so in the registry; once every other member
// has beaten since, it may (see holdShare).
func (f *Fleet) hold(h bool) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holding = h
	if !h {
		f.ready = false
	}
}

// holdShare returns how many of a key's limit this life may admit of a key
// a full store has no room for: limit divided by the members it counted
// when it began to hold keys, or since, whichever are more, and no more
// than the other holders leave (see room). It is 0 until every other
// member has read that it holds keys, and unless its last beat was within
// Fresh.
func (f *Fleet) holdShare(limit int64) int64 {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.ready || f.o.Now().Sub(f.beatAt) >= f.o.Fresh {
		return 0
	}
	return max(min(limit/int64(max(f.held.N, f.members)), limit-f.roomLocked(limit)), 0)
}

// room returns how much of a key's limit to count as spent when a count
// makes the key's entry: what the other lives that hold keys a full store
// had no room for may have admitted of it.
func (f *Fleet) room(limit int64) int64 {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.roomLocked(limit)
}

func (f *Fleet) roomLocked(limit int64) int64 {
	var r int64
	for _, n := range f.holders {
		r += limit / int64(n)
	}
	return min(r, limit)
}

// making reports how a count may make entries: at once (plain), or
// counting the holders' shares as spent (see room); and false for none, when
// this life has not beaten within Fresh, so that it may not know of every
// holder.
func (f *Fleet) making() (plain, ok bool) {
	if f == nil {
		return true, true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.beat == 0 || f.o.Now().Sub(f.beatAt) >= f.o.Fresh {
		return false, false
	}
	return len(f.holders) == 0, true
}

// Leave takes this life out of the registry. The caller leaves only once
// it owes the store nothing; a life that cannot leave is dropped after
// Life. Leave ends the life: it counts nothing alone after.
func (f *Fleet) Leave(ctx context.Context, u Updater) error {
	f.mu.Lock()
	f.left, f.members = true, 0
	f.mu.Unlock()
	return u.Update(ctx, []string{registryKey}, func(now time.Time, es []store.Entry) error {
		m, _ := f.read(es[0], now)
		delete(m, f.o.ID)
		return write(&es[0], m, now.Add(f.o.Life))
	})
}

// share returns how many of a key's limit, of a window of w, this life may
// admit alone in one window: limit divided by the members it read at its
// last beat, rounded down. It is 0 unless that beat was within Fresh, and
// the life joined at least w plus Fresh ago; so for a window longer than
// Life less Fresh.
func (f *Fleet) share(limit int64, w time.Duration) int64 {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	since := f.o.Now().Sub(f.beatAt)
	age := time.Duration(f.beat-f.joined)*time.Millisecond + since
	if f.members == 0 || since >= f.o.Fresh || age < w+f.o.Fresh || w > f.o.Life-f.o.Fresh {
		return 0
	}
	return limit / int64(f.members)
}

// storeNow returns the store's time as this life last saw it, carried forward
// by this process's clock; false before its first beat.
func (f *Fleet) storeNow() (time.Time, bool) {
	if f == nil {
		return time.Time{}, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.beat == 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(f.beat).Add(f.o.Now().Sub(f.beatAt)), true
}

// read returns the members of the registry entry e heard within Life of
// now, the store's time.
func (f *Fleet) read(e store.Entry, now time.Time) (map[string]member, int64) {
	m := map[string]member{}
	if e.Live() && json.Unmarshal(e.Value, &m) != nil {
		m = map[string]member{} // not ours: written anew
	}
	nowMs := now.UnixMilli()
	for id, o := range m {
		if o.Beat+f.o.Life.Milliseconds() <= nowMs {
			delete(m, id)
		}
	}
	return m, nowMs
}

// write puts the members m into e, to live until until at least past the
// last beat; it fails when they do not fit.
func write(e *store.Entry, m map[string]member, until time.Time) error {
	v, err := json.Marshal(m)
	if err != nil || len(v) > store.MaxValueSize {
		return errFull
	}
	e.Value, e.ExpiresAt = v, until
	return nil
}

package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gatecount/gatecount/store/value"
)

// MaxCountKeys is the most keys one Count may name.
const MaxCountKeys = 8

// Budget is Limit attempts per Window, counted by its Algorithm: the bound
// and window of one key's counter in a Count, and a limiter's budget
// (limiter.Budget is this type).
type Budget struct {
	// Limit is the highest count the key may reach, at least 1 (for a
	// [TokenBucket], the units refilled per Window).
	Limit int
	// Window is how long a counter lives from its first count, at least a
	// millisecond in a Count ([MinWindow] for a limiter); it is kept to the
	// millisecond.
	Window time.Duration
	// Burst is a [TokenBucket]'s capacity; 0 means Limit. Other algorithms
	// leave it 0.
	Burst int
	// Algorithm is how the budget counts; the zero value is [FixedWindow].
	Algorithm Algorithm
}

// Bounds of a Budget a limiter accepts (see Validate).
const (
	MinWindow = time.Second
	MaxWindow = 366 * 24 * time.Hour
	MaxLimit  = 1 << 30
)

// ErrInvalidBudget is returned by Validate for a budget out of range.
var ErrInvalidBudget = errors.New("invalid budget")

// Validate reports whether the budget is one a limiter can use. Limit runs
// from 1 to [MaxLimit], and Window from [MinWindow] to [MaxWindow], in
// whole milliseconds. Its Algorithm must be able to count it: a
// [SlidingWindow]'s Limit is at most [MaxSlidingLimit], a [TokenBucket]
// refills at most once a microsecond, and only a TokenBucket has a Burst.
// The error names the bound it passed.
func (b Budget) Validate() error {
	switch {
	case b.Limit < 1 || b.Limit > MaxLimit:
		return fmt.Errorf("%w: limit %d, want 1 to %d", ErrInvalidBudget, b.Limit, MaxLimit)
	case b.Window < MinWindow || b.Window > MaxWindow:
		return fmt.Errorf("%w: window %v, want %v to %v", ErrInvalidBudget, b.Window, MinWindow, MaxWindow)
	case b.Window%time.Millisecond != 0:
		return fmt.Errorf("%w: window %v is not whole milliseconds", ErrInvalidBudget, b.Window)
	case b.Burst > MaxLimit:
		return fmt.Errorf("%w: burst %d, want at most %d", ErrInvalidBudget, b.Burst, MaxLimit)
	case b.Algorithm == TokenBucket && b.Window.Microseconds() < int64(b.Limit):
		return fmt.Errorf("%w: token bucket of %d per %v refills more than once a microsecond", ErrInvalidBudget, b.Limit, b.Window)
	}
	if err := checkAlgorithm(b); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidBudget, err)
	}
	return nil
}

// String formats the budget as "5 per 15m0s", followed by the algorithm
// when it is not [FixedWindow]: "5 per 15m0s, sliding", "10 per 1s, bucket
// of 50".
func (b Budget) String() string {
	switch {
	case b.Algorithm == TokenBucket && b.Burst > 0:
		return fmt.Sprintf("%d per %v, bucket of %d", b.Limit, b.Window, b.Burst)
	case b.Algorithm != FixedWindow:
		return fmt.Sprintf("%d per %v, %v", b.Limit, b.Window, b.Algorithm)
	}
	return fmt.Sprintf("%d per %v", b.Limit, b.Window)
}

// Tally is the outcome of a Count.
type Tally struct {
	// Allowed reports whether every key had room and was counted.
	Allowed bool
	// Now is the store's time when it counted.
	Now time.Time
	// Limiting is the index of the first key that had no room, or -1.
	Limiting int
	// Counts[i] is keys[i]'s units in use after the call, as its budget's
	// algorithm counts them (see Charge): with n added when Allowed, as
	// they were otherwise.
	Counts [MaxCountKeys]int64
	// ExpiresAt[i] is when keys[i]'s count next drops, on the store's
	// clock: a fixed window's end, when a sliding window's oldest unit
	// leaves, a token bucket's next token. For a key without room, that is
	// when one more unit is admitted. It is the zero time when the key has
	// none in use.
	ExpiresAt [MaxCountKeys]time.Time
}

// KeyTally is the outcome of a one-key Count (Inline's CountOne), with its
// times in Unix milliseconds so that it fits in registers.
type KeyTally struct {
	// Allowed reports whether the key had room and was counted.
	Allowed bool
	// Count is the key's units in use after the call: with n added when
	// Allowed, as they were otherwise.
	Count int64
	// ExpiresAt is when the count next drops (Tally.ExpiresAt), in Unix
	// milliseconds on the store's clock; 0 when it has none.
	ExpiresAt int64
	// Now is the store's time when it counted, in Unix milliseconds.
	Now int64
}

// Counter is an optional Backend capability: a Count done by the store in
// one step, as fast as it can. A backend that offers it must give exactly
// the results of the generic Count, which runs on Update. It must keep each
// counter as the generic Count does. For a fixed window that is a JSON
// integer value expiring at the end of its window; the other algorithms'
// values are in algorithm.go. Unless it also offers [AlgorithmCounter], it is
// given only budgets of fixed windows. The guard calls it for a backend
// that is not [Inline]. The contract suite checks both promises. The suite
// also calls Count directly, since the guard counts through CountOne and
// CountInline on an Inline backend.
//
// It saves the work of an Update, and round trips on a store that does I/O.
// PostgreSQL's Count is one statement instead of a transaction, and Redis's
// is one script. The figures are in the package's DESIGN.md and in
// BENCHMARKS.md.
type Counter interface {
	Count(ctx context.Context, prefix string, keys []string, caps []Budget, n int64, t *Tally) error
}

// AlgorithmCounter is an optional capability of a Counter whose Count
// follows every Algorithm, in one step. On a Counter without it, a Count
// with a budget other than a [FixedWindow] runs the generic Count, through
// Update.
type AlgorithmCounter interface {
	Counter
	// CountsAlgorithms marks the capability.
	CountsAlgorithms()
}

// ErrInvalidCount is returned by Count for caps or an amount out of range.
var ErrInvalidCount = errors.New("store: invalid count")

// ErrNotCounter is returned by [ParseCount] for a value that is not a count.
var ErrNotCounter = errors.New("store: value is not a count")

// Count adds n to the counter of each of keys, all or nothing. When every
// key's count plus n stays within its cap, each is counted; a key with no
// live counter starts one. Otherwise none is, and the Tally says which key
// had no room. Each key counts by its budget's Algorithm (the rule is
// [Tally.Charge]), and one Count may mix them. It is the counter limiters are
// built on, done by the store in one step where it offers Counter or
// Inline, and through Update where it does not. On error the Tally is the
// zero Tally with Limiting -1.
func (h *Handle) Count(ctx context.Context, keys []string, caps []Budget, n int64) (t Tally, err error) {
	// Small enough to be inlined, so that the Tally is copied once, into the
	// caller's variable, not also through a result slot (CountInto spares
	// even that copy).
	err = h.checkedCount(ctx, keys, caps, n, &t)
	return t, err
}

// CountInto is Count, with the Tally written into t rather than returned. A
// caller that keeps the Tally in a variable of its own, as a limiter does,
// spares the copy of a returned one.
func (h *Handle) CountInto(ctx context.Context, keys []string, caps []Budget, n int64, t *Tally) error {
	*t = Tally{}
	return h.checkedCount(ctx, keys, caps, n, t)
}

// CountKey is Count on one key, with its outcome as a [KeyTally]: the path of
// a one-key limit. Its arguments and result fit in registers. On a store in
// process memory it runs the backend's CountOne with no Tally at all. On
// error the KeyTally is the zero KeyTally.
func (h *Handle) CountKey(ctx context.Context, key string, b Budget, n int64) (KeyTally, error) {
	if err := checkCount([]string{key}, []Budget{b}, n); err != nil {
		return KeyTally{}, err
	}
	if b.Algorithm != FixedWindow && !h.s.algorithms {
		return h.countApplied(ctx, key, b, n)
	}
	if h.s.obs == nil {
		return h.countKey(ctx, key, b, n)
	}
	start := time.Now()
	k, err := h.countKey(ctx, key, b, n)
	h.s.observe(opCount, h.prefix, start, err)
	return k, err
}

// countKey runs a one-key Count on the guard's path for the backend: its
// CountOne for a backend in process memory, under call for one that does
// I/O.
func (h *Handle) countKey(ctx context.Context, key string, b Budget, n int64) (KeyTally, error) {
	s := h.s
	if s.inline == nil {
		var t Tally
		if err := h.countCall(ctx, []string{key}, []Budget{b}, n, &t); err != nil {
			return KeyTally{}, err
		}
		return t.Key(), nil
	}
	if s.closed.Load() {
		return KeyTally{}, errClosed
	}
	k, err := s.inline.CountOne(h.prefix, key, b, n)
	if err != nil {
		return KeyTally{}, s.classify(ctx, err)
	}
	return k, nil
}

// checkedCount checks a Count's arguments, runs it into out and tells the
// Observer. It leaves out the zero Tally with Limiting -1 on error.
func (h *Handle) checkedCount(ctx context.Context, keys []string, caps []Budget, n int64, out *Tally) error {
	out.Limiting = -1
	if err := checkCount(keys, caps, n); err != nil {
		return err
	}
	if h.s.obs == nil {
		return h.count(ctx, keys, caps, n, out)
	}
	start := time.Now()
	err := h.count(ctx, keys, caps, n, out)
	h.s.observe(opCount, h.prefix, start, err)
	return err
}

// count runs a Count into out, which holds the zero Tally with Limiting -1
// on entry and again on error. It takes one of the guard's two paths: the
// caller's goroutine for a backend in process memory, call for one that
// does I/O. The Tally is written into out rather than returned: a Tally
// copied from function to function costs more than the count itself.
func (h *Handle) count(ctx context.Context, keys []string, caps []Budget, n int64, out *Tally) error {
	s := h.s
	if s.inline == nil {
		return h.countCall(ctx, keys, caps, n, out)
	}
	if !s.algorithms && !fixedOnly(caps) {
		return h.countInlineApplied(ctx, keys, caps, n, out)
	}
	if len(keys) == 1 {
		k, err := h.countKey(ctx, keys[0], caps[0], n)
		if err == nil {
			out.setKey(k)
		}
		return err
	}
	if s.closed.Load() {
		return errClosed
	}
	// The backend takes the keys and returns the Tally by value, so that
	// nothing of the caller's escapes to the heap.
	var ks [MaxCountKeys]string
	copy(ks[:], keys)
	var err error
	if *out, err = s.inline.CountInline(h.prefix, ks, caps, n); err != nil {
		*out = Tally{Limiting: -1}
		return s.classify(ctx, err)
	}
	return nil
}

// countApplied is CountKey of a budget whose algorithm the backend does
// not count itself: the generic Count, on the guard's path for the backend.
func (h *Handle) countApplied(ctx context.Context, key string, b Budget, n int64) (KeyTally, error) {
	var t Tally
	if err := h.checkedCount(ctx, []string{key}, []Budget{b}, n, &t); err != nil {
		return KeyTally{}, err
	}
	return t.Key(), nil
}

// countInlineApplied is a Count of budgets not all fixed on a backend in
// process memory that counts only fixed windows itself: ApplyCount through
// its UpdateInline.
func (h *Handle) countInlineApplied(ctx context.Context, keys []string, caps []Budget, n int64, out *Tally) error {
	s := h.s
	if s.closed.Load() {
		return errClosed
	}
	// Copies, so that the caller's slices do not escape on every Count.
	ks, cs := slices.Clone(keys), slices.Clone(caps)
	var t Tally
	_, err := s.inline.UpdateInline(h.prefix, ks, func(now time.Time, es []Entry) error {
		return ApplyCount(now, es, cs, n, &t)
	}, func(time.Time, []Entry) error { return nil })
	if err != nil {
		return s.classify(ctx, err)
	}
	*out = t
	return nil
}

// Key returns the outcome of a one-key Count, t, as a [KeyTally]: what a
// CountOne done by CountInline returns.
func (t *Tally) Key() KeyTally {
	k := KeyTally{Allowed: t.Allowed, Count: t.Counts[0], Now: t.Now.UnixMilli()}
	if !t.ExpiresAt[0].IsZero() {
		k.ExpiresAt = t.ExpiresAt[0].UnixMilli()
	}
	return k
}

// setKey writes k, the outcome of a one-key Count, into t, which holds the
// zero Tally with Limiting -1.
func (t *Tally) setKey(k KeyTally) {
	t.Allowed, t.Now, t.Counts[0] = k.Allowed, time.UnixMilli(k.Now), k.Count
	if k.ExpiresAt != 0 {
		t.ExpiresAt[0] = time.UnixMilli(k.ExpiresAt)
	}
	if !k.Allowed {
		t.Limiting = 0
	}
}

// countCall runs a Count into out under call: the backend's own
// (Counter), or the generic one through its Update (updateCounter).
func (h *Handle) countCall(ctx context.Context, keys []string, caps []Budget, n int64, out *Tally) error {
	s := h.s
	c := countPool.Get().(*countCall)
	// The backend gets the call's own copy of keys and its own Tally, so
	// that the caller's slice does not escape.
	own := c.keys[:copy(c.keys[:], keys)]
	br, err := h.breakerOf(own)
	if err != nil {
		clear(own)
		countPool.Put(c)
		return err
	}
	t := &c.t
	if !s.prompt {
		// The backend may still be writing after the caller's deadline: it
		// gets a Tally of its own, and c goes back to the pool only when it
		// has returned.
		t = new(Tally)
	}
	*t = Tally{Limiting: -1}
	counter := s.counter
	if !s.algorithms && !fixedOnly(caps) {
		counter = updateCounter{s.b}
	}
	err = s.call(ctx, &h.lane, br, func(ctx context.Context) error {
		return counter.Count(ctx, h.prefix, own, caps, n, t)
	})
	if err == nil {
		*out = *t
	}
	if s.prompt || err == nil {
		clear(own)
		countPool.Put(c)
	}
	return err
}

// updateCounter is the generic Count, for a backend that offers no Counter:
// ApplyCount run through the backend's Update.
type updateCounter struct{ b Backend }

// Count implements Counter.
func (u updateCounter) Count(ctx context.Context, prefix string, keys []string, caps []Budget, n int64, t *Tally) error {
	return u.b.Update(ctx, prefix, keys, func(now time.Time, es []Entry) error {
		return ApplyCount(time.UnixMilli(now.UnixMilli()), es, caps, n, t)
	})
}

// fixedOnly reports whether every budget of caps is a FixedWindow.
func fixedOnly(caps []Budget) bool {
	for _, c := range caps {
		if c.Algorithm != FixedWindow {
			return false
		}
	}
	return true
}

func checkCount(keys []string, caps []Budget, n int64) error {
	if err := checkKeys(keys); err != nil {
		return err
	}
	if len(keys) > MaxCountKeys || len(caps) != len(keys) {
		return fmt.Errorf("%w: %d keys and %d caps, want as many of each and at most %d", ErrInvalidCount, len(keys), len(caps), MaxCountKeys)
	}
	if n < 1 {
		return fmt.Errorf("%w: amount %d, want at least 1", ErrInvalidCount, n)
	}
	for i, c := range caps {
		if int64(c.Limit) < 1 || c.Window < time.Millisecond {
			return fmt.Errorf("%w: budget %d is %d per %v, want at least 1 per millisecond", ErrInvalidCount, i, c.Limit, c.Window)
		}
		if c.Algorithm != FixedWindow || c.Burst != 0 {
			if err := checkAlgorithm(c); err != nil {
				return fmt.Errorf("%w: budget %d: %w", ErrInvalidCount, i, err)
			}
		}
	}
	return nil
}

type countCall struct {
	keys [MaxCountKeys]string
	t    Tally
}

var countPool = sync.Pool{New: func() any { return new(countCall) }}

// ApplyCount is the step of the generic Count, as an apply of Update runs
// it. It reads the live counters in es into t, applies Charge, and writes
// the counts back. A backend that offers Counter but cannot count some
// values in one step runs ApplyCount through its own Update for them, so
// that both paths agree.
func ApplyCount(now time.Time, es []Entry, caps []Budget, n int64, t *Tally) error {
	*t = Tally{} // then field by field, which spares a copy through the stack
	t.Now = now
	nowMs := now.UnixMilli()
	var us [MaxCountKeys]units
	for i := range es {
		u, err := readUnits(nowMs, &es[i], caps[i])
		if err != nil {
			return err
		}
		us[i] = u
		t.Counts[i] = u.count
		if u.next != 0 {
			t.ExpiresAt[i] = time.UnixMilli(u.next)
		}
	}
	if !t.Charge(caps, n) {
		return nil // nothing changed: the entries are written back as read
	}
	for i := range es {
		e := &es[i]
		if caps[i].Algorithm != FixedWindow {
			us[i].add(e, n)
			continue
		}
		e.ExpiresAt = t.ExpiresAt[i]
		e.Value = value.AppendCount(e.Value[:0], t.Counts[i])
	}
	return nil
}

// Charge is the counting rule every Count follows, whatever each key's
// Algorithm. It takes t.Now and, for each of caps' keys, its units in use
// in Counts and when they next drop in ExpiresAt (the zero time for a key
// with none). It sets Limiting to the first key whose count plus n passes
// its Capacity, or -1. When no key does, it adds n to every count and sets
// Allowed. It sets the drop of each key that had none: caps[i].Window after
// Now, to the millisecond, or a token bucket's Interval after, rounded up.
// It reports Allowed. A key's units in use depend on its algorithm. They
// are a fixed window's count, the units a sliding window admitted in the
// last Window, or a token bucket's Burst less its tokens, rounded down.
func (t *Tally) Charge(caps []Budget, n int64) bool {
	t.Limiting, t.Allowed = -1, false
	for i := range caps {
		if !fits(t.Counts[i], caps[i], n) {
			t.Limiting = i
			return false
		}
	}
	t.Allowed = true
	for i := range caps {
		t.Counts[i] += n
		if t.ExpiresAt[i].IsZero() {
			t.ExpiresAt[i] = windowEnd(t.Now, caps[i])
		}
	}
	return true
}

// Charge is [Tally.Charge] for one key, on Unix milliseconds. It takes
// k.Now, the key's units in use, and when they next drop (0 when it has
// none). When the count plus n stays within b's Capacity, it adds n, and
// sets the drop as Tally.Charge does if there was none. It reports Allowed.
func (k *KeyTally) Charge(b Budget, n int64) bool {
	k.Allowed = fits(k.Count, b, n)
	if k.Allowed {
		k.Count += n
		if k.ExpiresAt == 0 {
			k.ExpiresAt = windowEnd(time.UnixMilli(k.Now), b).UnixMilli()
		}
	}
	return k.Allowed
}

// The two halves of the fixed-window rule, which Tally.Charge and
// KeyTally.Charge share.

// fits reports whether a counter at count has room for n more under b.
func fits(count int64, b Budget, n int64) bool {
	if b.Burst != 0 { // a token bucket of its own capacity
		return count <= int64(b.Burst)-n
	}
	return count <= int64(b.Limit)-n
}

// windowEnd is when a key of b that had no units, charged at now, next
// drops one: its window's end, to the millisecond (firstDrop).
func windowEnd(now time.Time, b Budget) time.Time {
	if b.Algorithm == TokenBucket {
		return time.UnixMilli(firstDrop(now.UnixMilli(), b))
	}
	return now.Add(b.Window).Truncate(time.Millisecond)
}

// ParseCount reads a counter's value: a JSON integer of at least zero, in
// the one form [value.AppendCount] writes (digits only, no leading zero).
func ParseCount(v []byte) (int64, error) {
	n, ok := value.CountOf(v)
	if !ok {
		return 0, fmt.Errorf("%w: %.40q", ErrNotCounter, v)
	}
	return n, nil
}

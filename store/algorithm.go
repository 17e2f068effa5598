package store

import (
	"fmt"
	"time"

	"github.com/gatecount/gatecount/store/value"
)

// Algorithm is how a budget counts. The zero value is [FixedWindow].
type Algorithm uint8

// The algorithms a budget may count by.
const (
	// FixedWindow allows Limit units in a window of length Window opened by
	// a key's first unit. At a window's edge a client may have Limit units
	// admitted just before it ends and Limit just after.
	FixedWindow Algorithm = iota
	// SlidingWindow allows at most Limit units in any span of length
	// Window. It keeps the time of each unit admitted in the last Window,
	// so Limit is at most [MaxSlidingLimit].
	SlidingWindow
	// TokenBucket refills Limit units per Window evenly, up to Burst
	// (Limit when 0): the generic cell rate algorithm (GCRA).
	TokenBucket
)

// MaxSlidingLimit is the highest Limit of a [SlidingWindow] budget. Its state
// is the time of every unit in the window, 14 bytes each as JSON, and must
// fit in [MaxValueSize].
const MaxSlidingLimit = 256

// String names the algorithm as configuration spells it: "fixed",
// "sliding" or "bucket".
func (a Algorithm) String() string {
	switch a {
	case FixedWindow:
		return "fixed"
	case SlidingWindow:
		return "sliding"
	case TokenBucket:
		return "bucket"
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// maxBucketSpan is the longest a token bucket may take to refill from
// empty, in microseconds (about 2.2 years). It keeps every time of a
// bucket's state within 2^53, which a Lua number holds exactly.
const maxBucketSpan = 1 << 46

// Capacity is the most units a key may hold under b at once: Burst for a
// [TokenBucket] that sets it, Limit otherwise.
func (b Budget) Capacity() int64 {
	if b.Algorithm == TokenBucket && b.Burst > 0 {
		return int64(b.Burst)
	}
	return int64(b.Limit)
}

// Interval is how long a [TokenBucket] budget takes to refill one unit,
// Window divided by Limit, rounded up to the microsecond. It is 0 for the
// other algorithms.
func (b Budget) Interval() time.Duration {
	if b.Algorithm != TokenBucket || b.Limit < 1 {
		return 0
	}
	return time.Duration(emission(b)) * time.Microsecond
}

// emission is b's Interval in microseconds, at least 1.
func emission(b Budget) int64 {
	w := b.Window.Microseconds()
	l := int64(b.Limit)
	return (w + l - 1) / l
}

// checkAlgorithm reports what of b's algorithm a store cannot count. That
// is an unknown algorithm, or a Burst outside a token bucket or below 0. It
// is also a sliding window past [MaxSlidingLimit], or a bucket that takes
// longer than maxBucketSpan to refill.
func checkAlgorithm(b Budget) error {
	switch {
	case b.Algorithm > TokenBucket:
		return fmt.Errorf("%v is not an algorithm", b.Algorithm)
	case b.Burst < 0 || b.Burst != 0 && b.Algorithm != TokenBucket:
		return fmt.Errorf("burst %d, want 0 (or at least 1 for a token bucket)", b.Burst)
	case b.Algorithm == SlidingWindow && b.Limit > MaxSlidingLimit:
		return fmt.Errorf("sliding window of limit %d, want at most %d (the times of every unit in the window are kept)", b.Limit, MaxSlidingLimit)
	case b.Algorithm == TokenBucket && b.Capacity() > maxBucketSpan/emission(b):
		return fmt.Errorf("token bucket of %d units takes more than %v to refill", b.Capacity(), time.Duration(maxBucketSpan)*time.Microsecond)
	}
	return nil
}

// firstDrop is when a key that had no units and was charged at nowMs (Unix
// milliseconds) next drops a unit. That is its window's end, or for a
// bucket the first unit's refill, rounded up to the millisecond.
func firstDrop(nowMs int64, b Budget) int64 {
	if b.Algorithm == TokenBucket {
		return nowMs + (emission(b)+999)/1000
	}
	return nowMs + b.Window.Milliseconds()
}

// A key's state under each algorithm, as its entry's value holds it:
//
//   - FixedWindow: the count, a JSON integer ([value.AppendCount]); the entry
//     expires at the window's end.
//   - SlidingWindow: the Unix millisecond of each unit admitted, ascending,
//     a JSON array of integers; the entry expires Window after the newest.
//     A unit is recorded at the store's time, or at the newest time held
//     when that is later (a clock stepped back).
//   - TokenBucket: {"tat":µs}, the theoretical arrival time in Unix
//     microseconds; the entry expires then (rounded up to the millisecond),
//     when the bucket is full again.

// units is one key's state under its budget, read from an entry at now.
type units struct {
	b     Budget
	nowMs int64
	count int64 // units in use
	// next is when count next drops (Unix ms), 0 when count is 0; for a
	// bucket held past its capacity (a block), when one more unit fits.
	next int64
	// SlidingWindow: the live part of the value, its times, without
	// brackets, and the newest of them.
	times  []byte
	newest int64
	// TokenBucket: max(TAT, now) in Unix microseconds.
	tat int64
}

// readUnits reads e, live or not, as b's state at nowMs.
func readUnits(nowMs int64, e *Entry, b Budget) (units, error) {
	u := units{b: b, nowMs: nowMs, tat: nowMs * 1000}
	if !e.Live() {
		return u, nil
	}
	switch b.Algorithm {
	case SlidingWindow:
		return u, u.readTimes(e.Value)
	case TokenBucket:
		tat, ok := value.BucketOf(e.Value)
		if !ok {
			return u, fmt.Errorf("%w: %.40q is not a token bucket", ErrNotCounter, e.Value)
		}
		u.tat = max(tat, u.tat)
		if d := u.tat - nowMs*1000; d > 0 {
			t := emission(b)
			u.count = (d + t - 1) / t
			u.next = ceilMs(u.tat - (min(u.count, u.b.Capacity())-1)*t)
		}
		return u, nil
	}
	c, err := ParseCount(e.Value)
	if err != nil {
		return u, err
	}
	u.count, u.next = c, e.ExpiresAt.UnixMilli()
	return u, nil
}

// readTimes reads a sliding window's value, keeping the times still in the
// window (after nowMs less Window).
func (u *units) readTimes(v []byte) error {
	if len(v) < 3 || v[0] != '[' || v[len(v)-1] != ']' {
		return fmt.Errorf("%w: %.40q is not a sliding window", ErrNotCounter, v)
	}
	since := u.nowMs - u.b.Window.Milliseconds()
	body := v[1 : len(v)-1]
	prev := int64(-1)
	for i := 0; i < len(body); {
		j := i
		for j < len(body) && body[j] != ',' {
			j++
		}
		t, ok := value.CountOf(body[i:j])
		if !ok || t < prev {
			return fmt.Errorf("%w: %.40q is not a sliding window", ErrNotCounter, v)
		}
		prev = t
		if t > since {
			if u.count == 0 {
				u.times, u.next = body[i:], t+u.b.Window.Milliseconds()
			}
			u.count++
			u.newest = t
		}
		if j == len(body)-1 {
			return fmt.Errorf("%w: %.40q is not a sliding window", ErrNotCounter, v)
		}
		i = j + 1
	}
	return nil
}

// ceilMs is Unix microseconds us rounded up to the millisecond.
func ceilMs(us int64) int64 { return (us + 999) / 1000 }

// add adds n units at now and writes the state into e, without checking
// room. Past a sliding window's Limit, the oldest times go. A key at its
// limit refuses until the newest Limit leave, whatever came before them.
func (u *units) add(e *Entry, n int64) {
	switch u.b.Algorithm {
	case SlidingWindow:
		lim := int64(u.b.Limit)
		fresh := min(n, lim)
		keep := min(u.count, lim-fresh)
		v := append(e.Value[:0:0], '[')
		v = appendNewest(v, u.times, u.count, keep)
		// Never before the newest: a store's clock that steps back keeps
		// the times ascending, and its units no shorter.
		at := max(u.nowMs, u.newest)
		for range fresh {
			if len(v) > 1 {
				v = append(v, ',')
			}
			v = value.AppendCount(v, at)
		}
		e.Value = append(v, ']')
		e.ExpiresAt = time.UnixMilli(at + u.b.Window.Milliseconds())
		u.count, u.next = keep+fresh, u.firstKept(v)
		u.times, u.newest = v[1:len(v)-1], at
	case TokenBucket:
		u.tat += n * emission(u.b)
		u.putBucket(e)
		t := emission(u.b)
		u.count = (u.tat - u.nowMs*1000 + t - 1) / t
		u.next = ceilMs(u.tat - (min(u.count, u.b.Capacity())-1)*t)
	default:
		if !e.Live() {
			e.ExpiresAt = time.UnixMilli(firstDrop(u.nowMs, u.b))
		}
		u.next = e.ExpiresAt.UnixMilli()
		u.count += n
		e.Value = value.AppendCount(e.Value[:0], u.count)
	}
}

// firstKept is the drop time of the oldest time in a sliding value v.
func (u *units) firstKept(v []byte) int64 {
	i := 1
	for i < len(v) && v[i] != ',' && v[i] != ']' {
		i++
	}
	t, _ := value.CountOf(v[1:i])
	return t + u.b.Window.Milliseconds()
}

// appendNewest appends the newest keep of the count times in body (a
// sliding value's live times, comma-separated, up to its closing bracket).
func appendNewest(dst, body []byte, count, keep int64) []byte {
	skip := count - keep
	i := 0
	for ; skip > 0 && i < len(body); i++ {
		if body[i] == ',' {
			skip--
		}
	}
	if keep <= 0 {
		return dst
	}
	end := len(body)
	if end > 0 && body[end-1] == ']' {
		end--
	}
	return append(dst, body[i:end]...)
}

// putBucket writes a bucket's state, TAT u.tat, into e.
func (u *units) putBucket(e *Entry) {
	e.Value = value.AppendBucket(e.Value[:0], u.tat)
	e.ExpiresAt = time.UnixMilli(ceilMs(u.tat))
}

// take gives back n units (a refund) and writes the state into e. A fixed
// count goes down by n, a sliding window drops its newest n times, and a
// bucket's TAT goes back n refills. A key left with none is deleted.
func (u *units) take(e *Entry, n int64) {
	n = min(n, u.count)
	switch u.b.Algorithm {
	case SlidingWindow:
		if u.count-n <= 0 {
			e.Value = nil
			return
		}
		i, seen := 0, int64(0)
		for ; i < len(u.times); i++ {
			if u.times[i] == ',' {
				if seen++; seen == u.count-n {
					break
				}
			}
		}
		v := append(append(e.Value[:0:0], '['), u.times[:i]...)
		e.Value = append(v, ']')
		// The entry lives Window after its newest time now left.
		j := i - 1
		for j >= 0 && u.times[j] != ',' {
			j--
		}
		t, _ := value.CountOf(u.times[j+1 : i])
		e.ExpiresAt = time.UnixMilli(t + u.b.Window.Milliseconds())
	case TokenBucket:
		u.tat -= n * emission(u.b)
		if u.tat <= u.nowMs*1000 {
			e.Value = nil
			return
		}
		u.putBucket(e)
	default:
		if u.count == 0 {
			return
		}
		e.Value = value.AppendCount(e.Value[:0], u.count-n)
	}
}

// Units reads e, an entry of a key counted under b, at now (the store's
// time, to the millisecond). It returns the units in use, and when that
// number next drops (when one more unit is admitted). The time is zero when
// none are in use. A value that is not b's state is an error matching
// [ErrNotCounter].
func (b Budget) Units(now time.Time, e Entry) (count int64, next time.Time, err error) {
	u, err := readUnits(now.UnixMilli(), &e, b)
	if err != nil || u.next == 0 {
		return 0, time.Time{}, err
	}
	return u.count, time.UnixMilli(u.next), nil
}

// AddUnits adds n units admitted at now to e, an entry of a key counted
// under b, with no check of room: units admitted elsewhere, which the
// store must count. A fixed window with no live counter opens one.
func (b Budget) AddUnits(now time.Time, e *Entry, n int64) error {
	u, err := readUnits(now.UnixMilli(), e, b)
	if err != nil {
		return err
	}
	if n > 0 {
		u.add(e, n)
	}
	return nil
}

// TakeUnits gives back n units of e, an entry of a key counted under b, at
// now: a refund. A key left with none has its entry deleted (a nil Value).
func (b Budget) TakeUnits(now time.Time, e *Entry, n int64) error {
	u, err := readUnits(now.UnixMilli(), e, b)
	if err != nil || !e.Live() || n <= 0 {
		return err
	}
	u.take(e, n)
	return nil
}

// ChargeBucket is [KeyTally.Charge] for a [TokenBucket] budget b, on the key's
// state itself: tat, its theoretical arrival time in Unix microseconds (0
// for a key with none). It is for a store that keeps buckets as numbers
// rather than as values ([value.AppendBucket]). It takes k.Now, sets the rest of
// k as Charge does, and returns the key's new TAT (tat when refused).
func (k *KeyTally) ChargeBucket(b Budget, n, tat int64) int64 {
	now := k.Now * 1000
	tat = max(tat, now)
	t := emission(b)
	count := (tat - now + t - 1) / t
	if k.Allowed = count <= b.Capacity()-n; k.Allowed {
		tat += n * t
		count += n
	}
	k.Count, k.ExpiresAt = count, 0
	if count > 0 {
		k.ExpiresAt = ceilMs(tat - (min(count, b.Capacity())-1)*t)
	}
	return tat
}

// Span is the longest a unit stays in use under b: Window, or for a
// [TokenBucket] the time it takes to refill from empty (Capacity times
// Interval). Units counted now have all dropped a Span later.
func (b Budget) Span() time.Duration {
	if b.Algorithm == TokenBucket {
		return time.Duration(b.Capacity()) * b.Interval()
	}
	return b.Window
}

// SpendUntil leaves e, an entry of a key counted under b, with no room
// until at least until: a block. A key already without room until later
// keeps its state.
func (b Budget) SpendUntil(now time.Time, e *Entry, until time.Time) error {
	u, err := readUnits(now.UnixMilli(), e, b)
	if err != nil {
		return err
	}
	switch b.Algorithm {
	case SlidingWindow:
		at := max(until.UnixMilli()-b.Window.Milliseconds(), u.newest)
		if u.count >= int64(b.Limit) && u.next >= until.UnixMilli() {
			return nil
		}
		v := append(e.Value[:0:0], '[')
		for i := range b.Limit {
			if i > 0 {
				v = append(v, ',')
			}
			v = value.AppendCount(v, at)
		}
		e.Value = append(v, ']')
		e.ExpiresAt = time.UnixMilli(at + b.Window.Milliseconds())
	case TokenBucket:
		u.tat = max(u.tat, until.UnixMicro()+(b.Capacity()-1)*emission(b))
		u.putBucket(e)
	default:
		if !e.Live() || e.ExpiresAt.Before(until) {
			e.ExpiresAt = until
		}
		e.Value = value.AppendCount(e.Value[:0], MaxLimit)
	}
	return nil
}

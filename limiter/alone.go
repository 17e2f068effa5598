package limiter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gatecount/gatecount/store"
)

// errNoShare is why an instance that has not yet counted the instances
// sharing its store admits nothing alone: it cannot tell its share.
var errNoShare = errors.New("limiter: this instance has not reached the shared store yet, so it has no share of any budget")

// known is what a limiter's process memory holds of a key: the count the
// store last told (seen), the attempts this instance admitted alone since
// (alone, not yet added to the store), and when the store was last asked
// about the key (asked, Unix milliseconds on memory's clock). The key's
// count is seen+alone.
type known struct {
	seen, alone, asked int64
}

// count is the key's count as this instance knows it.
func (k known) count() int64 { return k.seen + k.alone }

// knownOf reads what memory holds in e; a key with no live entry is the
// zero known.
func knownOf(e *store.Entry) (known, error) {
	if !e.Live() {
		return known{}, nil
	}
	v := e.Value
	if len(v) < 7 || v[0] != '[' || v[len(v)-1] != ']' {
		return known{}, fmt.Errorf("limiter: memory holds %q, not a known count", v)
	}
	var k known
	fields := [3]*int64{&k.seen, &k.alone, &k.asked}
	v = v[1 : len(v)-1]
	for i, f := range fields {
		end := len(v)
		if i < 2 {
			end = indexComma(v)
		}
		n, err := strconv.ParseInt(string(v[:max(end, 0)]), 10, 64)
		if end < 0 || err != nil {
			return known{}, fmt.Errorf("limiter: memory holds a malformed known count")
		}
		*f = n
		if i < 2 {
			v = v[end+1:]
		}
	}
	return k, nil
}

func indexComma(v []byte) int {
	for i, c := range v {
		if c == ',' {
			return i
		}
	}
	return -1
}

// put writes k into e, reusing its buffer.
func (k known) put(e *store.Entry) {
	v := append(e.Value[:0], '[')
	v = strconv.AppendInt(v, k.seen, 10)
	v = append(v, ',')
	v = strconv.AppendInt(v, k.alone, 10)
	v = append(v, ',')
	v = strconv.AppendInt(v, k.asked, 10)
	e.Value = append(v, ']')
}

// countAlone counts an attempt on keys in process memory, while the store
// cannot count them. Each key admits at most this instance's share (see
// store.Store.Share) of what was left of its budget when the store last
// told its count: the budget itself for a key this instance never saw, and
// nothing at all before this instance has reached a shared store. What it
// admits is added to the store once the store answers again (see flush).
// The tally's times are on memory's clock.
func (l *Limiter) countAlone(ctx context.Context, keys []string, caps []store.Budget) (store.Tally, error) {
	m := &memoCall{n: len(keys)}
	copy(m.keys[:], keys)
	copy(m.caps[:], caps)
	ks, cs, t := m.keys[:m.n], m.caps[:m.n], &m.t
	s := l.h.Store()
	if s.Members() == 0 {
		return store.Tally{}, errNoShare
	}
	err := l.local.Update(ctx, ks, func(now time.Time, es []store.Entry) error {
		*t = store.Tally{Now: now, Limiting: -1}
		var ks [MaxKeys]known
		for i := range es {
			k, err := knownOf(&es[i])
			if err != nil {
				return err
			}
			ks[i] = k
			t.Counts[i] = k.count()
			t.ExpiresAt[i] = es[i].ExpiresAt
			if !es[i].Live() { // a refusal's Retry-After: the window it would open
				t.ExpiresAt[i] = now.Add(cs[i].Window)
			}
			left := int64(cs[i].Limit) - k.seen
			if t.Limiting < 0 && k.alone+1 > s.Share(m.keys[i], left) {
				t.Limiting = i
			}
		}
		if t.Allowed = t.Limiting < 0; !t.Allowed {
			return nil
		}
		for i := range es {
			k := ks[i]
			k.alone++
			es[i].ExpiresAt = t.ExpiresAt[i]
			k.put(&es[i])
			t.Counts[i] = k.count()
		}
		return nil
	})
	if err != nil {
		return store.Tally{}, err
	}
	if t.Allowed {
		l.out.admitted(l, ks)
	}
	return *t, nil
}

// flushAlone adds to the store what this instance admitted alone of key,
// and returns whether the key has nothing left to add. It reports the
// store's error when the store could not take it.
func (l *Limiter) flushAlone(ctx context.Context, key string) (bool, error) {
	keys := []string{key}
	var k known
	var left time.Duration // of the key's window in memory
	err := l.local.Update(ctx, keys, func(now time.Time, es []store.Entry) (err error) {
		if k, err = knownOf(&es[0]); err == nil && es[0].Live() {
			left = es[0].ExpiresAt.Sub(now)
		}
		return err
	})
	if err != nil || k.alone == 0 || left <= 0 {
		return true, nil
	}
	var n int64 // the store's count once the key's alone attempts are in it
	err = l.h.Update(ctx, keys, func(now time.Time, es []store.Entry) error {
		e := &es[0]
		n = k.alone
		if e.Live() {
			c, err := store.ParseCount(e.Value)
			if err != nil {
				return err
			}
			n += c
		} else {
			e.ExpiresAt = now.Add(left)
		}
		e.Value = store.AppendCount(e.Value[:0], n)
		return nil
	})
	if err != nil {
		if errors.Is(err, store.ErrUnavailable) {
			return false, err
		}
		return true, err // not a count: nothing this limiter can add to
	}
	var rest int64
	l.local.Update(ctx, keys, func(now time.Time, es []store.Entry) error {
		cur, err := knownOf(&es[0])
		if err != nil || !es[0].Live() {
			return err
		}
		cur.alone = max(cur.alone-k.alone, 0)
		cur.seen, rest = n, cur.alone
		cur.put(&es[0])
		return nil
	})
	return rest == 0, nil
}

// Credit gives back, in one store update, the attempt d counted on the keys
// at the indexes refund (as Refund does: only in the window d counted in),
// and forgets the count of each key of clear (as Reset does). What this
// instance remembers of them changes at once. A credit the store cannot
// take now is kept and tried again in the background until it lands, or
// until the latest window of d has ended; Credit then returns nil. It
// returns an error for a decision that counted nothing to give back, or
// when too many credits already wait.
func (l *Limiter) Credit(ctx context.Context, d Decision, refund []int, clear ...string) error {
	if !d.Allowed || (d.Unavailable && !d.Local) || d.n == 0 {
		return ErrNotRefundable
	}
	c := credit{until: time.Now()}
	for _, i := range refund {
		if i < 0 || i >= int(d.n) {
			continue
		}
		key := d.keys[i]
		if d.inMemory>>i&1 == 1 { // counted alone: memory's to give back
			l.lower(ctx, key, false)
			continue
		}
		c.keys = append(c.keys, key)
		c.expires = append(c.expires, d.expires[i])
	}
	for _, key := range clear {
		c.keys = append(c.keys, key)
		c.expires = append(c.expires, 0)
	}
	for i := range d.n {
		if exp := time.UnixMilli(d.expires[i]); exp.After(c.until) {
			c.until = exp
		}
	}
	if len(c.keys) == 0 {
		return nil
	}
	if len(c.keys) > store.MaxKeys {
		return fmt.Errorf("%w: limiter %q: credit of %d keys, want at most %d", ErrInvalidKeys, l.name, len(c.keys), store.MaxKeys)
	}
	for i, key := range c.keys {
		if l.local != nil {
			l.lower(ctx, key, c.expires[i] == 0)
		}
	}
	err := l.land(ctx, &c)
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, store.ErrUnavailable):
		return fmt.Errorf("limiter %q: credit: %w", l.name, err)
	}
	return l.out.retry(l, c)
}

// credit is a Credit's store update: each key with a window end (Unix
// milliseconds) gives back one attempt in that window, each with 0 is
// cleared.
type credit struct {
	keys    []string
	expires []int64
	until   time.Time // after it, the credit is dropped
}

// land runs c in the store.
func (l *Limiter) land(ctx context.Context, c *credit) error {
	return l.h.Update(ctx, c.keys, func(_ time.Time, es []store.Entry) error {
		for i := range es {
			e := &es[i]
			switch {
			case c.expires[i] == 0:
				e.Value = nil
			case !e.Live() || e.ExpiresAt.UnixMilli() != c.expires[i]:
			default:
				n, err := store.ParseCount(e.Value)
				if err != nil {
					return err
				}
				if n > 0 {
					e.Value = store.AppendCount(e.Value[:0], n-1)
				}
			}
		}
		return nil
	})
}

// lower takes one attempt off what memory holds of key, or forgets it
// when clear: the attempts admitted alone first, then the store's count.
func (l *Limiter) lower(ctx context.Context, key string, clear bool) {
	l.local.Update(ctx, []string{key}, func(_ time.Time, es []store.Entry) error {
		e := &es[0]
		k, err := knownOf(e)
		switch {
		case err != nil || !e.Live():
			return err
		case clear:
			e.Value = nil
			return nil
		case k.alone > 0:
			k.alone--
		case k.seen > 0:
			k.seen--
		}
		k.asked = 0
		k.put(e)
		return nil
	})
}

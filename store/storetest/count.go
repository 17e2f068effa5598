package storetest

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gatecount/gatecount/store"
)

// countExactBudget: in each of 3 rounds, 100 Counts of one key with a cap
// of 30, started at once across First and Second, allow exactly 30, each
// seeing a count of its own. It catches a Count that is not atomic: one
// that reads the counter, lets go of it, and writes.
func countExactBudget(r *runner) error {
	const rounds = 3
	for round := range rounds {
		if err := r.exactBudget(round); err != nil {
			return err
		}
	}
	return nil
}

// exactBudget is one round of countExactBudget.
func (r *runner) exactBudget(round int) error {
	const capMax, calls = 30, 100
	k := r.key("budget-" + strconv.Itoa(round))
	caps := []store.Budget{{Limit: capMax, Window: time.Minute}}
	tallies := make([]store.Tally, calls)
	err := r.together(calls, 1, func(i, _ int, h *store.Handle) error {
		t, err := r.count(h, []string{k}, caps, 1)
		if err != nil {
			return r.failf("Count on %s under contention: %v", r.hname(h), err)
		}
		tallies[i] = t
		return nil
	})
	if err != nil {
		return err
	}
	seen := make(map[int64]bool)
	var exp time.Time
	for i, t := range tallies {
		if exp.IsZero() {
			exp = t.ExpiresAt[0]
		}
		if !t.ExpiresAt[0].Equal(exp) {
			return r.failf("concurrent Counts of one key in one window told different ends of it: %v and %v", ts(exp), ts(t.ExpiresAt[0]))
		}
		if !t.Allowed {
			if t.Limiting != 0 || t.Counts[0] != capMax {
				return r.failf("a refused Count (call %d) told Limiting %d and count %d, want 0 and %d", i, t.Limiting, t.Counts[0], capMax)
			}
			continue
		}
		if t.Limiting != -1 || t.Counts[0] < 1 || t.Counts[0] > capMax || seen[t.Counts[0]] {
			return r.failf("an allowed Count (call %d) told Limiting %d and count %d, which another allowed call also saw or which is out of 1..%d",
				i, t.Limiting, t.Counts[0], capMax)
		}
		seen[t.Counts[0]] = true
	}
	if len(seen) != capMax {
		return r.failf("round %d: %d concurrent Counts against a cap of %d, through First and Second: %d allowed, want exactly %d",
			round+1, calls, capMax, len(seen), capMax)
	}
	es, err := r.mustRead(r.p.First, k)
	if err != nil {
		return err
	}
	if n, err := store.ParseCount(es[0].Value); err != nil || n != capMax {
		return r.failf("the counter read back %s after the budget was spent, want %d", short(es[0].Value), capMax)
	}
	return nil
}

// countAllOrNothing: a Count charges every key or none, and says which key
// had no room. It catches a Count that charges the keys with room when
// another key has none, or starts counters for a refused Count.
func countAllOrNothing(r *runner) error {
	a, b, c := r.key("aon-a"), r.key("aon-b"), r.key("aon-c")
	minute := func(max int) store.Budget { return store.Budget{Limit: max, Window: time.Minute} }
	keys := []string{a, b, c}
	caps := []store.Budget{minute(10), minute(2), minute(10)}
	for i := range 2 {
		t, err := r.count(r.p.First, keys, caps, 1)
		if err != nil {
			return r.failf("Count %d of three keys: %v", i+1, err)
		}
		if !t.Allowed || t.Limiting != -1 || t.Counts != [store.MaxCountKeys]int64{int64(i + 1), int64(i + 1), int64(i + 1)} {
			return r.failf("Count %d of three keys with room: allowed %v, Limiting %d, counts %v; want allowed, -1, all %d",
				i+1, t.Allowed, t.Limiting, t.Counts[:3], i+1)
		}
	}
	t, err := r.count(r.p.Second, keys, caps, 1)
	if err != nil {
		return r.failf("Count of three keys, the second at its cap: %v", err)
	}
	if t.Allowed || t.Limiting != 1 || t.Counts != [store.MaxCountKeys]int64{2, 2, 2} {
		return r.failf("Count of three keys, the second at its cap: allowed %v, Limiting %d, counts %v; want refused, 1, [2 2 2]",
			t.Allowed, t.Limiting, t.Counts[:3])
	}
	es, err := r.mustRead(r.p.First, keys...)
	if err != nil {
		return err
	}
	for i, e := range es {
		if n, err := store.ParseCount(e.Value); err != nil || n != 2 {
			return r.failf("after a refused Count, key %d read %s, want 2: a key was charged though one had no room", i, short(e.Value))
		}
	}
	// As many keys as a Count may name: all or nothing, and the last
	// named when it alone has no room.
	wide, wideCaps := make([]string, store.MaxCountKeys), make([]store.Budget, store.MaxCountKeys)
	for i := range wide {
		wide[i], wideCaps[i] = r.key(fmt.Sprintf("aon-wide-%d", i)), minute(10)
	}
	wideCaps[len(wide)-1] = minute(1)
	for i, want := range []bool{true, false} {
		t, err := r.count(r.p.First, wide, wideCaps, 1)
		if err != nil {
			return r.failf("Count %d of MaxCountKeys (%d) keys: %v", i+1, len(wide), err)
		}
		if t.Allowed != want || (!want && t.Limiting != len(wide)-1) || t.Counts[0] != 1 || t.Counts[len(wide)-1] != 1 {
			return r.failf("Count %d of MaxCountKeys (%d) keys, the last with a cap of 1: allowed %v, Limiting %d, counts %v; want allowed %v, counts all 1",
				i+1, len(wide), t.Allowed, t.Limiting, t.Counts, want)
		}
	}
	if es, err := r.mustRead(r.p.First, wide...); err != nil {
		return err
	} else {
		for i, e := range es {
			if n, err := store.ParseCount(e.Value); err != nil || n != 1 {
				return r.failf("after a refused Count of MaxCountKeys keys, key %d read %s, want 1", i, short(e.Value))
			}
		}
	}
	more, moreCaps := append(wide, r.key("aon-wide-more")), append(wideCaps, minute(10))
	if _, err := r.count(r.p.First, more, moreCaps, 1); !errors.Is(err, store.ErrInvalidCount) {
		return r.failf("Count of MaxCountKeys+1 (%d) keys returned %v, want %v", len(more), err, store.ErrInvalidCount)
	}
	// The first key with no room is named.
	t, err = r.count(r.p.First, []string{c, b, a}, []store.Budget{minute(2), minute(2), minute(2)}, 1)
	if err != nil {
		return r.failf("Count of three keys, all at their caps: %v", err)
	}
	if t.Allowed || t.Limiting != 0 {
		return r.failf("Count of three keys all at their caps: allowed %v, Limiting %d, want refused, 0", t.Allowed, t.Limiting)
	}
	// An amount beyond a fresh key's cap starts nothing.
	d, e := r.key("aon-d"), r.key("aon-e")
	t, err = r.count(r.p.First, []string{e, d}, []store.Budget{minute(10), minute(4)}, 5)
	if err != nil {
		return r.failf("Count of 5 against a cap of 4: %v", err)
	}
	if t.Allowed || t.Limiting != 1 || t.Counts[0] != 0 || t.Counts[1] != 0 || !t.ExpiresAt[0].IsZero() || !t.ExpiresAt[1].IsZero() {
		return r.failf("Count of 5 against fresh keys, the second capped at 4: allowed %v, Limiting %d, counts %v, ends %v %v; want refused, 1, zero counts and times",
			t.Allowed, t.Limiting, t.Counts[:2], ts(t.ExpiresAt[0]), ts(t.ExpiresAt[1]))
	}
	es, err = r.mustRead(r.p.Second, e, d)
	if err != nil {
		return err
	}
	if es[0].Live() || es[1].Live() {
		return r.failf("a refused Count of fresh keys left counters: %s and %s", short(es[0].Value), short(es[1].Value))
	}
	return nil
}

// countValues: counters are kept as store.ParseCount values expiring a
// window after the store's time of their first count. Later counts do not
// move that expiry; the second count comes once the store's time has moved
// on. The Tally tells the store's time. It catches a Count that starts the
// window again on every count, so that a steady attacker's window never
// ends.
func countValues(r *runner) error {
	a, b := r.key("val-a"), r.key("val-b")
	keys := []string{a, b}
	caps := []store.Budget{{Limit: 5, Window: time.Minute}, {Limit: 5, Window: 90*time.Second + 7*time.Millisecond}}
	var first store.Tally
	for i, h := range []*store.Handle{r.p.First, r.p.Second} {
		before, err := r.now(h)
		if err != nil {
			return err
		}
		t, err := r.count(h, keys, caps, 2)
		if err != nil {
			return r.failf("Count on %s: %v", r.hname(h), err)
		}
		after, err := r.now(h)
		if err != nil {
			return err
		}
		if t.Now.Before(before) || t.Now.After(after) {
			return r.failf("Count on %s told the store's time as %v, but it read %v just before and %v just after",
				r.hname(h), ts(t.Now), ts(before), ts(after))
		}
		if i == 0 {
			first = t
			// The next count at a later millisecond of the store's time.
			if _, err := r.waitPast(r.p.Second, t.Now.Add(5*time.Millisecond)); err != nil {
				return err
			}
		}
		es, err := r.mustRead(h, keys...)
		if err != nil {
			return err
		}
		for j := range keys {
			want := first.Now.Add(caps[j].Window).Truncate(time.Millisecond)
			if !t.Allowed || t.Counts[j] != int64(2*(i+1)) || !t.ExpiresAt[j].Equal(want) {
				return r.failf("Count %d of 2 on %s, key %d: allowed %v, count %d ending %v; want allowed, %d ending %v (a window after the first count at %v)",
					i+1, r.hname(h), j, t.Allowed, t.Counts[j], ts(t.ExpiresAt[j]), 2*(i+1), ts(want), ts(first.Now))
			}
			n, err := store.ParseCount(es[j].Value)
			if err != nil || n != t.Counts[j] || !es[j].ExpiresAt.Equal(t.ExpiresAt[j]) {
				return r.failf("after Count %d on %s, key %d read back %s ending %v; want the count %d ending %v",
					i+1, r.hname(h), j, short(es[j].Value), ts(es[j].ExpiresAt), t.Counts[j], ts(t.ExpiresAt[j]))
			}
		}
	}
	return nil
}

// countWindow: once a counter's window has ended on the store's time, the
// next Count starts a new one. It catches a Count that keeps counting in a
// window that has ended.
func countWindow(r *runner) error {
	k := r.key("window")
	caps := []store.Budget{{Limit: 2, Window: shortTTL}}
	var first, t store.Tally
	for i := range 3 {
		var err error
		if t, err = r.count(r.p.First, []string{k}, caps, 1); err != nil {
			return r.failf("Count %d: %v", i+1, err)
		}
		if i == 0 {
			first = t
		}
	}
	// On a slow machine the window may have ended before the third Count:
	// only one within it must be refused.
	if t.Now.Before(first.ExpiresAt[0]) && (t.Allowed || t.Counts[0] != 2) {
		return r.failf("third Count against a cap of 2 in one window: allowed %v, count %d; want refused at 2", t.Allowed, t.Counts[0])
	}
	old := t.ExpiresAt[0]
	if old.IsZero() {
		return r.failf("a Count of a live counter told no end of its window")
	}
	if _, err := r.waitPast(r.p.Second, old); err != nil {
		return err
	}
	t, err := r.count(r.p.Second, []string{k}, caps, 1)
	if err != nil {
		return r.failf("Count after the window ended: %v", err)
	}
	want := t.Now.Add(shortTTL).Truncate(time.Millisecond)
	if !t.Allowed || t.Counts[0] != 1 || !t.ExpiresAt[0].Equal(want) {
		return r.failf("Count once the window ending %v had ended (store time %v): allowed %v, count %d ending %v; want allowed, 1, ending %v",
			ts(old), ts(t.Now), t.Allowed, t.Counts[0], ts(t.ExpiresAt[0]), ts(want))
	}
	return nil
}

// countMatchesGeneric: Count gives the results of the generic Count, done
// through Update, step for step; a store's own Counter, CountInline or
// CountOne (the steps on one key) must too. A value that is not a count is
// refused with ErrNotCounter and left as it was. It catches a store's own
// Count that differs from the generic one in what it allows, counts or
// tells.
func countMatchesGeneric(r *runner) error {
	path := "the generic Count"
	switch r.p.First.Store().Backend().(type) {
	case store.Inline:
		path = "the store's CountOne and CountInline (store.Inline)"
	case store.Counter:
		path = "the store's own Count (store.Counter)"
	}
	if err := countStepsMatch(r, path); err != nil {
		return err
	}
	return countRefusesNonCounts(r, path)
}

// countStepsMatch runs the steps of countMatchesGeneric on both handles.
func countStepsMatch(r *runner, path string) error {
	capOf := []store.Budget{{Limit: 3, Window: time.Minute}, {Limit: 5, Window: 2 * time.Minute}}
	steps := []struct {
		keys []int
		n    int64
	}{
		{[]int{0}, 1},
		{[]int{0, 1}, 2},
		{[]int{1, 0}, 1},
		{[]int{1}, 3},
		{[]int{1}, 1},
		{[]int{0, 1}, 1},
		{[]int{1, 0}, 6},
	}
	names := func(set string, idx []int) ([]string, []store.Budget) {
		var ks []string
		var cs []store.Budget
		for _, i := range idx {
			ks = append(ks, r.key(fmt.Sprintf("gen-%s-%d", set, i)))
			cs = append(cs, capOf[i])
		}
		return ks, cs
	}
	// start[set][key] is the store's time of the key's first count.
	var start [2][2]time.Time
	for s, step := range steps {
		for _, h := range r.handles() {
			set := r.hname(h)
			ks, cs := names("got-"+set, step.keys)
			got, err := r.count(h, ks, cs, step.n)
			if err != nil {
				return r.failf("step %d, Count on %s: %v", s+1, set, err)
			}
			ks, cs = names("want-"+set, step.keys)
			want, err := r.genericCount(h, ks, cs, step.n)
			if err != nil {
				return r.failf("step %d, the generic Count through Update on %s: %v", s+1, set, err)
			}
			if got.Allowed != want.Allowed || got.Limiting != want.Limiting || got.Counts != want.Counts {
				return r.failf("step %d on %s: %s gave allowed %v, Limiting %d, counts %v; the generic Count gave %v, %d, %v",
					s+1, set, path, got.Allowed, got.Limiting, got.Counts[:len(ks)], want.Allowed, want.Limiting, want.Counts[:len(ks)])
			}
			hi := 0
			if h != r.p.First {
				hi = 1
			}
			for j, i := range step.keys {
				if got.ExpiresAt[j].IsZero() != want.ExpiresAt[j].IsZero() {
					return r.failf("step %d on %s, key %d: %s told its window ends %v; the generic Count, %v",
						s+1, set, i, path, ts(got.ExpiresAt[j]), ts(want.ExpiresAt[j]))
				}
				if got.ExpiresAt[j].IsZero() {
					continue
				}
				if start[hi][i].IsZero() {
					start[hi][i] = got.Now
				}
				if w := start[hi][i].Add(capOf[i].Window).Truncate(time.Millisecond); !got.ExpiresAt[j].Equal(w) {
					return r.failf("step %d on %s, key %d: %s told its window ends %v, want %v, a window after its first count",
						s+1, set, i, path, ts(got.ExpiresAt[j]), ts(w))
				}
			}
		}
	}
	return nil
}

// countRefusesNonCounts checks that a Count of a value that is not a count
// is refused with ErrNotCounter and leaves the value as it was.
func countRefusesNonCounts(r *runner, path string) error {
	for _, v := range []string{`{"x":1}`, `-1`, `"7"`} {
		k := r.key("gen-notcount")
		if _, _, err := r.put(r.p.First, v, longTTL, k); err != nil {
			return err
		}
		c := store.Budget{Limit: 10, Window: time.Minute}
		// On one key and on two (CountOne and CountInline on a store in
		// process memory), the second new.
		other := r.key("gen-notcount-other")
		for _, keys := range [][]string{{k}, {k, other}} {
			_, err := r.count(r.p.First, keys, []store.Budget{c, c}[:len(keys)], 1)
			if !errors.Is(err, store.ErrNotCounter) {
				return r.failf("%s of %d keys, the first holding %s, returned %v, want %v", path, len(keys), v, err, store.ErrNotCounter)
			}
		}
		es, err := r.mustRead(r.p.First, k, other)
		if err != nil {
			return err
		}
		if !sameValue(es[0].Value, []byte(v)) {
			return r.failf("%s of a key holding %s, refused, left %s", path, v, short(es[0].Value))
		}
		if es[1].Live() {
			return r.failf("%s of two keys, the first holding %s, refused, counted the second", path, v)
		}
		if err := r.del(r.p.First, k); err != nil {
			return err
		}
	}
	return nil
}

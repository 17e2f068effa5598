package storetest

import (
	"fmt"
	"time"

	"github.com/gatecount/gatecount/store"
)

// The budgets of the algorithm cases, one of each algorithm, whose windows
// outlast a case.
var (
	slidingBudget = store.Budget{Limit: 30, Window: longTTL, Algorithm: store.SlidingWindow}
	// a unit refilled each hour, and 30 at once
	bucketBudget = store.Budget{Limit: 1, Window: longTTL, Burst: 30, Algorithm: store.TokenBucket}
)

// algorithmExactBudget is for a sliding window and a token bucket; a fixed
// window is count-exact-budget's. 200 Counts of one key, started at once
// across First and Second, allow exactly the 30 the budget holds. Each sees
// a count of its own, and the value read back holds 30 units. It catches a
// Count of a sliding window or a token bucket that is not atomic.
func algorithmExactBudget(r *runner) error {
	const calls = 200
	for _, b := range []store.Budget{slidingBudget, bucketBudget} {
		k := r.key("alg-budget-" + b.Algorithm.String())
		caps := []store.Budget{b}
		allowed := make([]int64, calls)
		err := r.together(calls, 1, func(i, _ int, h *store.Handle) error {
			t, err := r.count(h, []string{k}, caps, 1)
			if err != nil {
				return r.failf("Count of a %v budget on %s under contention: %v", b.Algorithm, r.hname(h), err)
			}
			if t.Allowed {
				allowed[i] = t.Counts[0]
			}
			return nil
		})
		if err != nil {
			return err
		}
		seen := map[int64]bool{}
		for _, c := range allowed {
			if c == 0 {
				continue
			}
			if seen[c] || c > b.Capacity() {
				return r.failf("%v budget of %d: two allowed Counts saw the count %d, or it is past the budget", b.Algorithm, b.Capacity(), c)
			}
			seen[c] = true
		}
		if int64(len(seen)) != b.Capacity() {
			return r.failf("%d concurrent Counts of a %v budget of %d, through First and Second: %d allowed, want exactly %d",
				calls, b.Algorithm, b.Capacity(), len(seen), b.Capacity())
		}
		es, err := r.mustRead(r.p.First, k)
		if err != nil {
			return err
		}
		now, err := r.now(r.p.First)
		if err != nil {
			return err
		}
		if c, _, err := b.Units(now, es[0]); err != nil || c != b.Capacity() {
			return r.failf("the %v budget read back %s (%d units, %v) once spent, want %d units", b.Algorithm, short(es[0].Value), c, err, b.Capacity())
		}
	}
	return nil
}

// algorithmMatchesGeneric: Count gives the results of the generic Count
// (store.ApplyCount through Update), step for step. It does so on keys of
// every algorithm, alone and mixed in one Count. It keeps each key's value
// in its algorithm's form: the units and next drop a Tally tells are those
// its value reads as (Budget.Units). It catches a store's own Count of a
// sliding window or token bucket that differs from the rule.
func algorithmMatchesGeneric(r *runner) error {
	capOf := []store.Budget{
		{Limit: 3, Window: time.Minute, Algorithm: store.SlidingWindow},
		{Limit: 5, Window: 2 * time.Minute, Algorithm: store.TokenBucket},
		{Limit: 4, Window: time.Minute},
		{Limit: 2, Window: time.Hour, Burst: 4, Algorithm: store.TokenBucket},
	}
	steps := []struct {
		keys []int
		n    int64
	}{
		{[]int{0}, 1},
		{[]int{1}, 2},
		{[]int{0, 1, 2, 3}, 1},
		{[]int{3, 0}, 1},
		{[]int{1, 3}, 2},
		{[]int{0}, 1},
		{[]int{2, 1, 0}, 1},
		{[]int{3}, 1},
		{[]int{1}, 1},
		{[]int{1, 2}, 6},
	}
	names := func(set string, idx []int) ([]string, []store.Budget) {
		var ks []string
		var cs []store.Budget
		for _, i := range idx {
			ks = append(ks, r.key(fmt.Sprintf("alg-gen-%s-%d", set, i)))
			cs = append(cs, capOf[i])
		}
		return ks, cs
	}
	for s, step := range steps {
		for _, h := range r.handles() {
			set := r.hname(h)
			ks, cs := names("got-"+set, step.keys)
			got, err := r.count(h, ks, cs, step.n)
			if err != nil {
				return r.failf("step %d, Count on %s: %v", s+1, set, err)
			}
			wks, wcs := names("want-"+set, step.keys)
			var want store.Tally
			if err := r.update(h, wks, func(now time.Time, es []store.Entry) error {
				return store.ApplyCount(now, es, wcs, step.n, &want)
			}); err != nil {
				return r.failf("step %d, the generic Count through Update on %s: %v", s+1, set, err)
			}
			if got.Allowed != want.Allowed || got.Limiting != want.Limiting || got.Counts != want.Counts {
				return r.failf("step %d on %s: Count gave allowed %v, Limiting %d, counts %v; the generic Count gave %v, %d, %v",
					s+1, set, got.Allowed, got.Limiting, got.Counts[:len(ks)], want.Allowed, want.Limiting, want.Counts[:len(ks)])
			}
			es, err := r.mustRead(h, ks...)
			if err != nil {
				return err
			}
			for j := range ks {
				// Both ran within moments of each other (seconds, on a
				// loaded machine): when one more unit is admitted is as
				// far from each one's time.
				if got.ExpiresAt[j].IsZero() != want.ExpiresAt[j].IsZero() ||
					!got.ExpiresAt[j].IsZero() && absDur(got.ExpiresAt[j].Sub(got.Now)-want.ExpiresAt[j].Sub(want.Now)) > 5*time.Second {
					return r.failf("step %d on %s, key %d (%v): Count told one more unit at %v (store time %v); the generic Count, %v (%v)",
						s+1, set, step.keys[j], cs[j].Algorithm, ts(got.ExpiresAt[j]), ts(got.Now), ts(want.ExpiresAt[j]), ts(want.Now))
				}
				c, next, err := cs[j].Units(got.Now, es[j])
				if err != nil || c != got.Counts[j] || !next.Equal(got.ExpiresAt[j]) {
					return r.failf("step %d on %s, key %d (%v): the value read back, %s, holds %d units dropping at %v (%v); the Count told %d at %v",
						s+1, set, step.keys[j], cs[j].Algorithm, short(es[j].Value), c, ts(next), err, got.Counts[j], ts(got.ExpiresAt[j]))
				}
			}
		}
	}
	return nil
}

// algorithmWindowEdge: across the edge of a window on the store's clock, a
// sliding window admits again only the units that left it, and a token
// bucket only the tokens refilled. A sliding window of 3 per second takes 2
// units, then 1 half a second later. Once the first 2 have left, it takes 2
// and refuses a third. A bucket of 2 per second, spent, takes 1 at its next
// token and refuses a second. It catches a store that counts them as fixed
// windows, or whose entry ends when the next unit drops.
func algorithmWindowEdge(r *runner) error {
	const w = time.Second
	sliding := []store.Budget{{Limit: 3, Window: w, Algorithm: store.SlidingWindow}}
	k := []string{r.key("alg-edge-sliding")}
	first, err := r.count(r.p.First, k, sliding, 2)
	if err != nil || !first.Allowed {
		return r.failf("first 2 units of a sliding window of 3: allowed %v, %v", first.Allowed, err)
	}
	if _, err := r.waitPast(r.p.Second, first.Now.Add(w/2)); err != nil {
		return err
	}
	second, err := r.count(r.p.Second, k, sliding, 1)
	if err != nil || !second.Allowed {
		return r.failf("a third unit of a sliding window of 3: allowed %v, %v", second.Allowed, err)
	}
	// On a slow machine the first units may have left before the third
	// came: only a third within their window must tell when they leave.
	if second.Now.Before(first.Now.Add(w)) && !second.ExpiresAt[0].Equal(first.Now.Add(w)) {
		return r.failf("a sliding window told one more unit at %v, want %v, when its first units leave", ts(second.ExpiresAt[0]), ts(first.Now.Add(w)))
	}
	if _, err := r.waitPast(r.p.First, first.Now.Add(w)); err != nil {
		return err
	}
	for i, want := range []bool{true, false} {
		n := int64(2 - i)
		t, err := r.count(r.p.First, k, sliding, n)
		if err != nil {
			return r.failf("sliding window past its first units: %v", err)
		}
		if t.Now.Before(second.Now.Add(w)) && (t.Allowed != want || t.Counts[0] != 3) {
			return r.failf("sliding window of 3, 2 units left of the 3 (store time %v, the third admitted at %v): a Count of %d allowed %v with %d in use; want %v, 3",
				ts(t.Now), ts(second.Now), n, t.Allowed, t.Counts[0], want)
		}
	}

	bucket := []store.Budget{{Limit: 2, Window: w, Algorithm: store.TokenBucket}}
	k = []string{r.key("alg-edge-bucket")}
	spent, err := r.count(r.p.Second, k, bucket, 2)
	if err != nil || !spent.Allowed || spent.Counts[0] != 2 {
		return r.failf("a bucket of 2, its 2 units: allowed %v, %d in use, %v", spent.Allowed, spent.Counts[0], err)
	}
	if want := spent.Now.Add(w / 2); !spent.ExpiresAt[0].Equal(want) {
		return r.failf("a spent bucket of 2 per %v told its next token at %v, want %v", w, ts(spent.ExpiresAt[0]), ts(want))
	}
	if _, err := r.waitPast(r.p.First, spent.ExpiresAt[0]); err != nil {
		return err
	}
	for i, want := range []bool{true, false} {
		t, err := r.count(r.p.First, k, bucket, 1)
		if err != nil {
			return r.failf("bucket at its next token: %v", err)
		}
		if t.Now.Before(spent.Now.Add(w)) && t.Allowed != want {
			return r.failf("a bucket of 2 per %v spent at %v, at %v: Count %d allowed %v; want %v (one token refilled)",
				w, ts(spent.Now), ts(t.Now), i+1, t.Allowed, want)
		}
	}
	return nil
}

// algorithmPacing: a client counts a unit every 20 ms for 1.5 s, across
// several windows, on both handles. A sliding window never admits more than
// Limit in any span of Window. A token bucket never admits more than Burst
// plus the refill in any span. Both are judged on the store's times of the
// admissions, and each admits some. It catches a store that lets a sliding
// window's units go early, or refills a bucket too fast.
func algorithmPacing(r *runner) error {
	sliding := store.Budget{Limit: 4, Window: 500 * time.Millisecond, Algorithm: store.SlidingWindow}
	bucket := store.Budget{Limit: 2, Window: 400 * time.Millisecond, Burst: 3, Algorithm: store.TokenBucket}
	ks := []string{r.key("alg-pace-sliding"), r.key("alg-pace-bucket")}
	var admitted [2][]time.Time
	end := time.Now().Add(1500 * time.Millisecond)
	for i := 0; time.Now().Before(end); i++ {
		h := r.p.First
		if i%2 == 1 {
			h = r.p.Second
		}
		for j, b := range []store.Budget{sliding, bucket} {
			t, err := r.count(h, ks[j:j+1], []store.Budget{b}, 1)
			if err != nil {
				return r.failf("paced Count of a %v budget on %s: %v", b.Algorithm, r.hname(h), err)
			}
			if t.Allowed {
				admitted[j] = append(admitted[j], t.Now)
			}
		}
		if err := r.pause(20 * time.Millisecond); err != nil {
			return err
		}
	}
	for j, b := range []store.Budget{sliding, bucket} {
		if len(admitted[j]) < int(b.Capacity()) {
			return r.failf("a client pacing a %v budget for 1.5 s had %d admitted, want at least %d", b.Algorithm, len(admitted[j]), b.Capacity())
		}
	}
	at := admitted[0]
	for i := range at {
		in := 0
		for _, u := range at[:i+1] {
			if at[i].Sub(u) < sliding.Window {
				in++
			}
		}
		if in > sliding.Limit {
			return r.failf("a sliding window of %v admitted %d units in the %v up to %v, want at most %d", sliding, in, sliding.Window, ts(at[i]), sliding.Limit)
		}
	}
	at, t := admitted[1], bucket.Interval()
	for i := range at {
		for j := i; j < len(at); j++ {
			if time.Duration(j-i+1)*t > at[j].Sub(at[i])+time.Duration(bucket.Capacity())*t {
				return r.failf("a token bucket of %v admitted %d units from %v to %v, want at most %d plus one each %v",
					bucket, j-i+1, ts(at[i]), ts(at[j]), bucket.Capacity(), t)
			}
		}
	}
	return nil
}

// absDur is |d|.
func absDur(d time.Duration) time.Duration { return max(d, -d) }

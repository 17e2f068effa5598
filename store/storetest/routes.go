package storetest

import (
	"fmt"
	"strconv"
	"time"

	"github.com/gatecount/gatecount/store"
)

// A countRoute is one way a Count reaches a store. It may be a Handle
// method, which the guard sends down the backend's CountOne or CountInline
// (store.Inline), its Count (store.Counter), or ApplyCount through its
// Update. It may be a call of the backend's own Counter.Count, or
// ApplyCount through Update.
type countRoute struct {
	name  string
	keys  int // how many keys its Counts name
	count func(r *runner, h *store.Handle, keys []string, caps []store.Budget, n int64) (store.Tally, error)
}

// countRoutes returns the routes of a Count into the store of p.
func countRoutes(p Pair) []countRoute {
	routes := []countRoute{
		{"Handle.CountKey", 1, (*runner).countKey},
		{"Handle.Count of one key", 1, (*runner).count},
		{"Handle.Count of two keys", 2, (*runner).count},
		{"Handle.CountInto of three keys", 3, (*runner).countInto},
		{"store.ApplyCount through Update, one key", 1, (*runner).genericCount},
		{"store.ApplyCount through Update, two keys", 2, (*runner).genericCount},
	}
	if _, ok := p.First.Store().Backend().(store.Counter); ok {
		routes = append(routes,
			countRoute{"the backend's Counter.Count, one key", 1, (*runner).backendCount},
			countRoute{"the backend's Counter.Count, two keys", 2, (*runner).backendCount})
	}
	return routes
}

// countInto is h.CountInto, retried while the guard answers overloaded.
func (r *runner) countInto(h *store.Handle, keys []string, caps []store.Budget, n int64) (store.Tally, error) {
	var t store.Tally
	for i := 0; ; i++ {
		err := h.CountInto(r.ctx, keys, caps, n, &t)
		if !r.overloaded(err, i) {
			return t, err
		}
	}
}

// countKey is h.CountKey, retried while the guard answers overloaded, with
// its KeyTally told as a Tally.
func (r *runner) countKey(h *store.Handle, keys []string, caps []store.Budget, n int64) (store.Tally, error) {
	for i := 0; ; i++ {
		k, err := h.CountKey(r.ctx, keys[0], caps[0], n)
		if r.overloaded(err, i) {
			continue
		}
		t := store.Tally{Allowed: k.Allowed, Now: time.UnixMilli(k.Now), Limiting: -1}
		t.Counts[0] = k.Count
		if k.ExpiresAt != 0 {
			t.ExpiresAt[0] = time.UnixMilli(k.ExpiresAt)
		}
		if !k.Allowed {
			t.Limiting = 0
		}
		return t, err
	}
}

// backendCount calls h's backend's own Counter.Count, under h's prefix,
// past the guard: on a backend in process memory (store.Inline) the guard
// never calls it.
func (r *runner) backendCount(h *store.Handle, keys []string, caps []store.Budget, n int64) (store.Tally, error) {
	c, ok := h.Store().Backend().(store.Counter)
	if !ok {
		return store.Tally{}, r.failf("the backend of %s offers no store.Counter, but First's does", r.hname(h))
	}
	var t store.Tally
	err := c.Count(r.ctx, h.Prefix(), keys, caps, n, &t)
	return t, err
}

// genericCount is the generic Count: store.ApplyCount run through h's
// Update, as the guard runs it for a backend that offers no Counter.
func (r *runner) genericCount(h *store.Handle, keys []string, caps []store.Budget, n int64) (store.Tally, error) {
	var t store.Tally
	err := r.update(h, keys, func(now time.Time, es []store.Entry) error {
		return store.ApplyCount(time.UnixMilli(now.UnixMilli()), es, caps, n, &t)
	})
	return t, err
}

// counterModel is what the generic rule says a key's counter holds: its
// count and the end of its window (the zero time for none).
type counterModel struct {
	count int64
	end   time.Time
}

// want returns what the generic rule (store.Tally.Charge) says a Count of
// n against caps, told the store's time now, finds and leaves, given
// models of its keys.
func want(models []counterModel, caps []store.Budget, n int64, now time.Time) store.Tally {
	t := store.Tally{Now: now}
	for i, m := range models {
		if m.end.After(now) {
			t.Counts[i], t.ExpiresAt[i] = m.count, m.end
		}
	}
	t.Charge(caps, n)
	return t
}

// routeCaps are the budgets of the keys of a route, in order: windows short
// enough for the case to see each end, and of different lengths, so that
// keys of one Count start new windows at different times.
var routeCaps = []store.Budget{
	{Limit: 4, Window: shortTTL},
	{Limit: 6, Window: 2 * shortTTL},
	{Limit: 5, Window: shortTTL + 50*time.Millisecond},
}

// routeAmounts are the amounts of the Counts of the first phase of
// countRoutesCase, a pause of a few milliseconds of the store's time
// coming after the first.
var routeAmounts = []int64{1, 1, 2, 3, 1, 1, 2, 1}

// countRoutesCase: every route a Count can take into the store gives the
// results of the generic rule (store.Tally.Charge on the counters as
// ApplyCount reads them), window ends included. The routes are
// Handle.CountKey, Count and CountInto on one key and several (for a
// backend in process memory, its CountOne and CountInline), the backend's
// own Counter.Count called directly, and store.ApplyCount through Update.
// Each route counts keys of its own, through First and Second in turn,
// against a model of what the rule leaves. It spends their budgets, counts
// once through store.ApplyCount (which reads what the route wrote), then
// counts every few milliseconds until every window has ended and a new one
// has begun. Every Tally's Allowed, Limiting, counts and window ends must
// be the model's. It catches a route of its own that differs from the
// generic rule. That may be a CountOne that starts a window again before it
// ends, or moves its end. It may be a Counter.Count that no caller but the
// suite reaches, and that counts wrong.
func countRoutesCase(r *runner) error {
	routes := countRoutes(r.p)
	keys := make([][]string, len(routes))
	models := make([][]counterModel, len(routes))
	for i, rt := range routes {
		for j := range rt.keys {
			keys[i] = append(keys[i], r.key(fmt.Sprintf("route-%d-%d", i, j)))
		}
		models[i] = make([]counterModel, rt.keys)
	}
	step := 0
	countAll := func(n int64, generic bool) error {
		step++
		h := r.p.First
		if step%2 == 0 {
			h = r.p.Second
		}
		for i, rt := range routes {
			name, count := rt.name, rt.count
			if generic {
				name, count = "store.ApplyCount through Update, after "+rt.name, (*runner).genericCount
			}
			caps := routeCaps[:rt.keys]
			got, err := count(r, h, keys[i], caps, n)
			if err != nil {
				return r.failf("step %d, %s of %d on %s: %v", step, name, n, r.hname(h), err)
			}
			w := want(models[i], caps, n, got.Now)
			k := rt.keys
			if got.Now.IsZero() || got.Allowed != w.Allowed || got.Limiting != w.Limiting ||
				got.Counts != w.Counts || !sameTimes(got.ExpiresAt[:k], w.ExpiresAt[:k]) {
				return r.failf("step %d, %s of %d on %s at store time %v, the counters %s: allowed %v, Limiting %d, counts %v, ends %s; the generic rule gives %v, %d, %v, %s",
					step, name, n, r.hname(h), ts(got.Now), describe(models[i], got.Now),
					got.Allowed, got.Limiting, got.Counts[:k], times(got.ExpiresAt[:k]),
					w.Allowed, w.Limiting, w.Counts[:k], times(w.ExpiresAt[:k]))
			}
			for j := range models[i] {
				models[i][j] = counterModel{w.Counts[j], w.ExpiresAt[j]}
			}
		}
		return nil
	}
	// Spend the budgets, the second Count at a later millisecond than the
	// first, so that a Count that moves a window's end shows.
	for i, n := range routeAmounts {
		if err := countAll(n, false); err != nil {
			return err
		}
		if i == 0 {
			now, err := r.now(r.p.First)
			if err != nil {
				return err
			}
			if _, err := r.waitPast(r.p.Second, now.Add(5*time.Millisecond)); err != nil {
				return err
			}
		}
	}
	if err := countAll(1, true); err != nil {
		return err
	}
	// Count every few milliseconds until every key of every route has
	// begun a new window, and once more.
	first := make([][]time.Time, len(routes))
	for i := range routes {
		for _, m := range models[i] {
			first[i] = append(first[i], m.end)
		}
	}
	limit := time.Now().Add(maxWait + clockSlack)
	for {
		ended := true
		for i := range routes {
			for j, m := range models[i] {
				if !m.end.After(first[i][j]) {
					ended = false
				}
			}
		}
		if err := countAll(1, false); err != nil || ended {
			return err
		}
		if time.Now().After(limit) {
			return r.failf("the routes' counters did not all begin a second window within %v", maxWait+clockSlack)
		}
		if err := r.pause(nearPoll); err != nil {
			return err
		}
	}
}

// sameTimes reports whether a and b hold the same instants.
func sameTimes(a, b []time.Time) bool {
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

// times formats times for a message.
func times(ts0 []time.Time) string {
	s := "["
	for i, t := range ts0 {
		if i > 0 {
			s += " "
		}
		s += ts(t)
	}
	return s + "]"
}

// describe says what counters the model holds at now, for a message.
func describe(models []counterModel, now time.Time) string {
	s := ""
	for i, m := range models {
		if i > 0 {
			s += ", "
		}
		if m.end.After(now) {
			s += strconv.FormatInt(m.count, 10) + " ending " + ts(m.end)
		} else {
			s += "none"
		}
	}
	return s
}

// contentionWorkers and contentionCalls are how many goroutines the
// count-contention case starts and how many calls each makes.
const (
	contentionWorkers = 8
	contentionCalls   = 40
)

// countContention: Counts of one key lose no count. They take the route the
// guard takes for a one-key limit (Handle.CountKey), interleaved with
// generic Counts (store.ApplyCount through Update) whose apply yields. All
// start at once through First and Second, with a cap none reaches. Each
// call sees a count of its own, and the counter ends at the number of
// calls. The updates hold the key while they yield, so that calls queue for
// it and a lock the store lets go of is handed straight to one of them. It
// catches a Count that is not atomic on a store with no round trip to widen
// the race (one that reads the counter, lets go of its lock and writes),
// which count-exact-budget sees only now and then.
func countContention(r *runner) error {
	k := r.key("contention")
	caps := []store.Budget{{Limit: store.MaxLimit, Window: longTTL}}
	seen := make([][]int64, contentionWorkers)
	err := r.together(contentionWorkers, contentionCalls, func(w, i int, h *store.Handle) error {
		var t store.Tally
		var err error
		if w%4 < 2 {
			t, err = r.countKey(h, []string{k}, caps, 1)
		} else {
			err = r.update(h, []string{k}, func(now time.Time, es []store.Entry) error {
				yield(i)
				return store.ApplyCount(time.UnixMilli(now.UnixMilli()), es, caps, 1, &t)
			})
		}
		if err != nil {
			return r.failf("Count %d of goroutine %d on %s under contention: %v", i+1, w, r.hname(h), err)
		}
		if !t.Allowed {
			return r.failf("Count %d of goroutine %d on %s against a cap of %d was refused at count %d", i+1, w, r.hname(h), store.MaxLimit, t.Counts[0])
		}
		seen[w] = append(seen[w], t.Counts[0])
		return nil
	})
	if err != nil {
		return err
	}
	const calls = contentionWorkers * contentionCalls
	told := make(map[int64]bool, calls)
	for _, s := range seen {
		for _, c := range s {
			if c < 1 || c > calls || told[c] {
				return r.failf("%d Counts of one key at once, half through Handle.CountKey and half through Update: two were told count %d, or it is out of 1..%d: a count was lost",
					calls, c, calls)
			}
			told[c] = true
		}
	}
	es, err := r.mustRead(r.p.First, k)
	if err != nil {
		return err
	}
	if n, err := store.ParseCount(es[0].Value); err != nil || n != calls {
		return r.failf("after %d Counts of one key at once, half through Handle.CountKey and half through Update, the counter read %s, want %d: a count was lost",
			calls, short(es[0].Value), calls)
	}
	return nil
}

package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatecount/gatecount/store"
)

// Cases is the contract, one clause a case. Run runs them all; a store's
// tests may also run them one by one.
var Cases = []Case{
	newCase("round-trip", roundTrip),
	newCase("shared-visibility", sharedVisibility),
	newCase("nil-deletes", nilDeletes),
	newCase("expired-not-seen", expiredNotSeen),
	newCase("expiry-not-early", expiryNotEarly),
	newCase("expiry-not-late", expiryNotLate),
	newCase("no-lost-update", noLostUpdate),
	newCase("multi-key-atomic", multiKeyAtomic),
	newCase("apply-error", applyError),
	newCase("apply-retried-once", applyRetriedOnce),
	newCase("value-limits", valueLimits),
	newCase("invalid-keys", invalidKeys),
	newCase("sweep", sweep),
	newCase("prefix-isolation", prefixIsolation),
	newCase("bound", bound),
	newCase("count-exact-budget", countExactBudget),
	newCase("count-all-or-nothing", countAllOrNothing),
	newCase("count-values", countValues),
	newCase("count-window", countWindow),
	newCase("count-matches-generic", countMatchesGeneric),
}

// roundTrip: values of every JSON shape written through First read back,
// with their expiry to the millisecond, through Second, and the other way.
func roundTrip(r *runner) error {
	if !r.p.First.Shared() {
		return r.notApplicable("the store is not shared, so First and Second need not see each other's entries")
	}
	values := []string{
		`0`, `17`, `-3`, `9223372036854775807`, `"text"`, `true`, `null`,
		`{"count":3,"first":1700000000000,"ids":["a","b"]}`, `[1,2.5,"x",{"y":null}]`,
		`"` + strings.Repeat("x", store.MaxValueSize-2) + `"`,
	}
	for _, dir := range [][2]*store.Handle{{r.p.First, r.p.Second}, {r.p.Second, r.p.First}} {
		w, rd := dir[0], dir[1]
		for i, v := range values {
			k := r.key(fmt.Sprintf("rt-%s-%d", r.hname(w), i))
			_, exp, err := r.put(w, v, longTTL, k)
			if err != nil {
				return err
			}
			es, err := r.mustRead(rd, k)
			if err != nil {
				return err
			}
			if !sameValue(es[0].Value, []byte(v)) || !es[0].ExpiresAt.Equal(exp) {
				return r.failf("wrote %s expiring %v through %s; Read on %s gave %s expiring %v",
					short([]byte(v)), ts(exp), r.hname(w), r.hname(rd), short(es[0].Value), ts(es[0].ExpiresAt))
			}
			o, err := r.observe(rd, k)
			if err != nil {
				return err
			}
			if !sameValue(o.entries[0].Value, []byte(v)) || !o.entries[0].ExpiresAt.Equal(exp) {
				return r.failf("wrote %s expiring %v through %s; apply on %s was given %s expiring %v",
					short([]byte(v)), ts(exp), r.hname(w), r.hname(rd), short(o.entries[0].Value), ts(o.entries[0].ExpiresAt))
			}
		}
	}
	return nil
}

// sharedVisibility: a shared store shows each instance's writes and
// deletes to the other at once.
func sharedVisibility(r *runner) error {
	if r.p.First.Shared() != r.p.Second.Shared() || r.p.First.Shared() != r.p.Other.Shared() {
		return r.failf("handles disagree on Shared: First %v, Second %v, Other %v",
			r.p.First.Shared(), r.p.Second.Shared(), r.p.Other.Shared())
	}
	if !r.p.First.Shared() {
		return r.notApplicable("the store is not shared")
	}
	k := r.key("vis")
	for i, w := range []*store.Handle{r.p.First, r.p.Second, r.p.First} {
		rd := r.p.Second
		if w == r.p.Second {
			rd = r.p.First
		}
		v := strconv.Itoa(i + 1)
		if err := r.update(w, []string{k}, func(now time.Time, es []store.Entry) error {
			if i > 0 && string(es[0].Value) != strconv.Itoa(i) {
				return fmt.Errorf("apply on %s was given %s, want %d written by the other handle", r.hname(w), short(es[0].Value), i)
			}
			es[0] = store.Entry{Value: []byte(v), ExpiresAt: now.Add(longTTL)}
			return nil
		}); err != nil {
			return r.failf("Update %d on %s: %v", i, r.hname(w), err)
		}
		es, err := r.mustRead(rd, k)
		if err != nil {
			return err
		}
		if string(es[0].Value) != v {
			return r.failf("wrote %s through %s; Read on %s gave %s", v, r.hname(w), r.hname(rd), short(es[0].Value))
		}
	}
	if err := r.update(r.p.Second, []string{k}, func(_ time.Time, es []store.Entry) error {
		es[0].Value = nil
		return nil
	}); err != nil {
		return r.failf("deleting Update on Second: %v", err)
	}
	es, err := r.mustRead(r.p.First, k)
	if err != nil {
		return err
	}
	if es[0].Live() {
		return r.failf("deleted a key through Second; Read on First still gave %s", short(es[0].Value))
	}
	return nil
}

// nilDeletes: leaving a nil Value in apply deletes the key, for every
// handle and for one key of several.
func nilDeletes(r *runner) error {
	a, b := r.key("del-a"), r.key("del-b")
	if _, _, err := r.put(r.p.First, `{"n":1}`, longTTL, a, b); err != nil {
		return err
	}
	if err := r.update(r.p.Second, []string{a, b}, func(_ time.Time, es []store.Entry) error {
		if !es[0].Live() || !es[1].Live() {
			return fmt.Errorf("apply on Second was not given the entries First wrote")
		}
		es[0].Value = nil // ExpiresAt left as it was: Value alone decides
		return nil
	}); err != nil {
		return r.failf("Update on Second deleting one of two keys: %v", err)
	}
	for _, h := range []*store.Handle{r.p.First, r.p.Second} {
		es, err := r.mustRead(h, a, b)
		if err != nil {
			return err
		}
		if es[0].Live() || !es[0].ExpiresAt.IsZero() {
			return r.failf("after apply left a nil Value, Read on %s gave %s expiring %v, want the zero Entry",
				r.hname(h), short(es[0].Value), ts(es[0].ExpiresAt))
		}
		if !es[1].Live() {
			return r.failf("deleting one key of an Update also removed the other, on %s", r.hname(h))
		}
		o, err := r.observe(h, a)
		if err != nil {
			return err
		}
		if o.entries[0].Live() || !o.entries[0].ExpiresAt.IsZero() {
			return r.failf("after a delete, apply on %s was given %s expiring %v, want the zero Entry",
				r.hname(h), short(o.entries[0].Value), ts(o.entries[0].ExpiresAt))
		}
	}
	return nil
}

// expiredNotSeen: once the store's time reaches an entry's ExpiresAt, the
// entry is neither read nor given to apply, on either handle.
func expiredNotSeen(r *runner) error {
	for _, h := range []*store.Handle{r.p.First, r.p.Second} {
		k := r.key("exp-" + r.hname(h))
		_, exp, err := r.put(h, `1`, shortTTL, k)
		if err != nil {
			return err
		}
		now, err := r.waitPast(h, exp)
		if err != nil {
			return err
		}
		es, err := r.mustRead(h, k)
		if err != nil {
			return err
		}
		if es[0].Live() {
			return r.failf("entry expiring at %v was still read on %s once the store's time there was %v",
				ts(exp), r.hname(h), ts(now))
		}
		o, err := r.observe(h, k)
		if err != nil {
			return err
		}
		if o.entries[0].Live() {
			return r.failf("entry expiring at %v was given to apply on %s with the store's time at %v",
				ts(exp), r.hname(h), ts(o.now))
		}
	}
	return nil
}

// expiryNotEarly: an entry written to expire liveTTL after the store's time
// is live at once on both handles. A store judging expiry on a clock ahead
// of the one it tells apply, or a handle whose clock runs ahead, fails it.
func expiryNotEarly(r *runner) error {
	const attempts = 3
	var last error
	for i := range attempts {
		k := r.key("early-" + strconv.Itoa(i))
		start := time.Now()
		wrote, exp, err := r.put(r.p.First, `1`, liveTTL, k)
		if err != nil {
			return err
		}
		last = nil
		for _, h := range []*store.Handle{r.p.First, r.p.Second} {
			es, err := r.mustRead(h, k)
			if err != nil {
				return err
			}
			o, err := r.observe(h, k)
			if err != nil {
				return err
			}
			if es[0].Live() && o.entries[0].Live() {
				continue
			}
			if o.now.Before(exp) {
				how := "Read"
				if !o.entries[0].Live() {
					how = "apply"
				}
				return r.failf("entry expiring at %v (written at store time %v) was not live to %s on %s, yet the store's time there was %v: expiry is judged on another clock",
					ts(exp), ts(wrote), how, r.hname(h), ts(o.now))
			}
			if ahead := o.now.Sub(wrote) - time.Since(start); ahead > skewTolerance {
				return r.failf("the store's time on %s (%v) is %v ahead of First's (%v) beyond the time that passed: its clock is skewed, and an entry written through First to live %v was already expired there",
					r.hname(h), ts(o.now), ahead.Round(time.Millisecond), ts(wrote), liveTTL)
			}
			// The machine was slow enough for the entry to expire: try again.
			last = r.failf("entry expiring %v after it was written was expired on %s before it could be read, %d times", liveTTL, r.hname(h), attempts)
			break
		}
		if last == nil {
			return nil
		}
	}
	return last
}

// expiryNotLate: an entry whose ExpiresAt has passed on the store's time, as
// First sees it, is gone on Second too, and the other way; the handles'
// views of the store's time agree.
func expiryNotLate(r *runner) error {
	for _, dir := range [][2]*store.Handle{{r.p.First, r.p.Second}, {r.p.Second, r.p.First}} {
		w, other := dir[0], dir[1]
		k := r.key("late-" + r.hname(w))
		_, exp, err := r.put(w, `1`, shortTTL, k)
		if err != nil {
			return err
		}
		wNow, err := r.waitPast(w, exp)
		if err != nil {
			return err
		}
		o, err := r.observe(other, k)
		if err != nil {
			return err
		}
		if o.entries[0].Live() {
			if !o.now.Before(exp) {
				return r.failf("entry expiring at %v was given to apply on %s with the store's time there at %v",
					ts(exp), r.hname(other), ts(o.now))
			}
			if behind := wNow.Sub(o.now); behind > skewTolerance {
				return r.failf("the store's time on %s (%v) is %v behind what %s read just before (%v): its clock is skewed, and an entry expired on %s is still live there",
					r.hname(other), ts(o.now), behind.Round(time.Millisecond), r.hname(w), ts(wNow), r.hname(w))
			}
			if _, err := r.waitPast(other, exp); err != nil {
				return err
			}
		}
		es, err := r.mustRead(other, k)
		if err != nil {
			return err
		}
		if es[0].Live() {
			return r.failf("entry expiring at %v, written through %s, was still read on %s after the store's time passed it",
				ts(exp), r.hname(w), r.hname(other))
		}
	}
	return nil
}

// incr is an apply that adds one to each key's JSON integer, starting it
// when there is none.
func incr(now time.Time, es []store.Entry) error {
	for i := range es {
		e := &es[i]
		var n int64
		if e.Live() {
			var err error
			if n, err = intOf(*e); err != nil {
				return err
			}
		} else {
			e.ExpiresAt = now.Add(longTTL)
		}
		e.Value = strconv.AppendInt(e.Value[:0], n+1, 10)
	}
	return nil
}

// firstErr keeps the first error of concurrent workers.
type firstErr struct {
	once sync.Once
	err  error
	set  atomic.Bool
}

func (f *firstErr) keep(err error) {
	if err == nil {
		return
	}
	f.once.Do(func() { f.err = err; f.set.Store(true) })
}

func (f *firstErr) failed() bool { return f.set.Load() }

// hammer runs workers goroutines, alternately on First and Second, each
// calling step with its number each times, and returns the first failure;
// after one, the others stop at their next step.
func (r *runner) hammer(workers, each int, step func(w int, h *store.Handle) error) error {
	var wg sync.WaitGroup
	var fe firstErr
	for w := range workers {
		h := r.p.First
		if w%2 == 1 {
			h = r.p.Second
		}
		wg.Go(func() {
			for range each {
				if fe.failed() {
					return
				}
				if err := step(w, h); err != nil {
					fe.keep(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return fe.err
}

// counter reads k's integer counter through First; when names the moment
// in a failure.
func (r *runner) counter(k, when string) (int64, error) {
	es, err := r.mustRead(r.p.First, k)
	if err != nil {
		return 0, err
	}
	n, err := intOf(es[0])
	if err != nil {
		return 0, r.failf("counter %s: %v", when, err)
	}
	return n, nil
}

// noLostUpdate: 64 goroutines, half on First and half on Second, each add
// one to a counter 20 times through apply; the total is exact.
func noLostUpdate(r *runner) error {
	const workers, each = 64, 20
	k := r.key("lost")
	err := r.hammer(workers, each, func(_ int, h *store.Handle) error {
		if err := r.update(h, []string{k}, incr); err != nil {
			return r.failf("Update on %s adding one under contention: %v", r.hname(h), err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	n, err := r.counter(k, "after contention")
	if err != nil {
		return err
	}
	if n < workers*each {
		return r.failf("%d goroutines added one %d times each, through First and Second: total is %d, want %d (%d updates lost)",
			workers, each, n, workers*each, workers*each-n)
	}
	if n > workers*each {
		return r.failf("%d goroutines added one %d times each, through First and Second: total is %d, want %d (%d counted more than once)",
			workers, each, n, workers*each, n-workers*each)
	}
	return nil
}

// multiKeyAtomic: concurrent two-key updates move a unit from one key to
// the other while readers, through Read and through applies that only
// observe, check that the sum never changes.
func multiKeyAtomic(r *runner) error {
	const (
		total   = 100
		movers  = 8
		moves   = 60
		readers = 4
	)
	a, b := r.key("atom-a"), r.key("atom-b")
	if err := r.update(r.p.First, []string{a, b}, func(now time.Time, es []store.Entry) error {
		for i := range es {
			es[i] = store.Entry{Value: []byte(strconv.Itoa(total / 2)), ExpiresAt: now.Add(longTTL)}
		}
		return nil
	}); err != nil {
		return r.failf("Update writing two keys: %v", err)
	}
	sum := func(es []store.Entry, how string, h *store.Handle) error {
		x, err := intOf(es[0])
		if err != nil {
			return r.failf("%s on %s, first key: %v", how, r.hname(h), err)
		}
		y, err := intOf(es[1])
		if err != nil {
			return r.failf("%s on %s, second key: %v", how, r.hname(h), err)
		}
		if x+y != total {
			return r.failf("%s on %s saw %d + %d = %d mid-way through a two-key update, want %d: the update is not atomic",
				how, r.hname(h), x, y, x+y, total)
		}
		return nil
	}
	var fe firstErr
	var done atomic.Bool
	var movesWG, readersWG sync.WaitGroup
	for m := range movers {
		h := r.p.First
		if m%2 == 1 {
			h = r.p.Second
		}
		keys := []string{a, b}
		if m%4 >= 2 {
			keys = []string{b, a} // both orders, as callers do
		}
		movesWG.Go(func() {
			for i := range moves {
				if fe.failed() {
					return
				}
				var bad error
				err := r.update(h, keys, func(_ time.Time, es []store.Entry) error {
					bad = sum(es, "apply of a move", h)
					if bad != nil {
						return bad
					}
					from, to := 0, 1
					if (i+m)%2 == 1 {
						from, to = 1, 0
					}
					x, _ := intOf(es[from])
					y, _ := intOf(es[to])
					if x > 0 {
						x, y = x-1, y+1
					}
					es[from].Value = strconv.AppendInt(es[from].Value[:0], x, 10)
					es[to].Value = strconv.AppendInt(es[to].Value[:0], y, 10)
					return nil
				})
				if bad != nil {
					fe.keep(bad)
					return
				}
				if err != nil {
					fe.keep(r.failf("Update on %s moving a unit: %v", r.hname(h), err))
					return
				}
			}
		})
	}
	for i := range readers {
		h := r.p.First
		if i%2 == 1 {
			h = r.p.Second
		}
		readersWG.Go(func() {
			for !done.Load() && !fe.failed() {
				if i < readers/2 {
					es, err := r.mustRead(h, a, b)
					if err == nil {
						err = sum(es, "Read", h)
					}
					fe.keep(err)
					continue
				}
				var bad error
				if err := r.update(h, []string{b, a}, func(_ time.Time, es []store.Entry) error {
					bad = sum([]store.Entry{es[1], es[0]}, "apply that only observes", h)
					return bad
				}); err != nil {
					if bad == nil {
						bad = r.failf("observing Update on %s: %v", r.hname(h), err)
					}
					fe.keep(bad)
				}
			}
		})
	}
	movesWG.Wait()
	done.Store(true)
	readersWG.Wait()
	if fe.err != nil {
		return fe.err
	}
	es, err := r.mustRead(r.p.First, a, b)
	if err != nil {
		return err
	}
	return sum(es, "Read after the moves", r.p.First)
}

// errApply is the error of an apply that fails on purpose.
var errApply = errors.New("storetest: apply fails on purpose")

// applyError: an apply's error writes nothing, on any key, and Update
// returns that very error, not as an unavailable store.
func applyError(r *runner) error {
	held, fresh := r.key("aerr-held"), r.key("aerr-fresh")
	if _, _, err := r.put(r.p.First, `1`, longTTL, held); err != nil {
		return err
	}
	for _, h := range []*store.Handle{r.p.First, r.p.Second} {
		own := fmt.Errorf("%w (through %s)", errApply, r.hname(h))
		err := r.update(h, []string{held, fresh}, func(now time.Time, es []store.Entry) error {
			es[0] = store.Entry{Value: []byte(`2`), ExpiresAt: now.Add(longTTL)}
			es[1] = store.Entry{Value: []byte(`2`), ExpiresAt: now.Add(longTTL)}
			return own
		})
		if !errors.Is(err, own) {
			return r.failf("apply returned %q; Update on %s returned %v, want that error", own, r.hname(h), err)
		}
		if errors.Is(err, store.ErrUnavailable) {
			return r.failf("apply's own error came back from Update on %s as an unavailable store: %v", r.hname(h), err)
		}
		es, err := r.mustRead(h, held, fresh)
		if err != nil {
			return err
		}
		if string(es[0].Value) != `1` || es[1].Live() {
			return r.failf("apply changed two keys then failed; Read on %s gave %s and %s, want 1 and no entry: something was written",
				r.hname(h), short(es[0].Value), short(es[1].Value))
		}
	}
	return nil
}

// applyRetriedOnce: however often a store calls apply for one Update,
// exactly one run counts, and each run is given what is stored, not what an
// earlier run left.
func applyRetriedOnce(r *runner) error {
	const workers, each = 8, 10
	k := r.key("retry")
	var calls atomic.Int64
	err := r.hammer(workers, each, func(_ int, h *store.Handle) error {
		if err := r.update(h, []string{k}, func(now time.Time, es []store.Entry) error {
			calls.Add(1)
			return incr(now, es)
		}); err != nil {
			return r.failf("Update on %s adding one: %v", r.hname(h), err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	n, err := r.counter(k, fmt.Sprintf("after %d updates", workers*each))
	if err != nil {
		return err
	}
	if c := calls.Load(); n != workers*each || c < workers*each {
		return r.failf("%d Updates each adding one, with apply run %d times: total is %d, want %d",
			workers*each, c, n, workers*each)
	}
	return nil
}

// valueLimits: a value of MaxValueSize bytes is kept; one byte more is
// refused with ErrValueTooLarge, a value that is not JSON with
// ErrInvalidValue, and neither writes anything, on any key of the Update.
func valueLimits(r *runner) error {
	ok, held, fresh := r.key("lim-ok"), r.key("lim-held"), r.key("lim-fresh")
	max := `"` + strings.Repeat("v", store.MaxValueSize-2) + `"`
	if _, _, err := r.put(r.p.First, max, longTTL, ok); err != nil {
		return r.failf("a value of exactly %d bytes: %v", store.MaxValueSize, err)
	}
	es, err := r.mustRead(r.p.Second, ok)
	if err != nil {
		return err
	}
	if len(es[0].Value) != store.MaxValueSize {
		return r.failf("wrote a value of %d bytes; Read on Second gave %d bytes", store.MaxValueSize, len(es[0].Value))
	}
	if _, _, err := r.put(r.p.First, `1`, longTTL, held); err != nil {
		return err
	}
	bad := []struct {
		what  string
		value string
		want  error
	}{
		{"one byte over the limit", `"` + strings.Repeat("v", store.MaxValueSize-1) + `"`, store.ErrValueTooLarge},
		{"far over the limit", `"` + strings.Repeat("v", 4*store.MaxValueSize) + `"`, store.ErrValueTooLarge},
		{"not JSON", `{"open":`, store.ErrInvalidValue},
		{"two JSON values", `1 2`, store.ErrInvalidValue},
		{"empty", ``, store.ErrInvalidValue},
	}
	for _, tc := range bad {
		for _, h := range []*store.Handle{r.p.First, r.p.Second} {
			err := r.update(h, []string{fresh, held}, func(now time.Time, es []store.Entry) error {
				es[0] = store.Entry{Value: []byte(`"fine"`), ExpiresAt: now.Add(longTTL)}
				es[1] = store.Entry{Value: []byte(tc.value), ExpiresAt: now.Add(longTTL)}
				return nil
			})
			if !errors.Is(err, tc.want) {
				return r.failf("apply left a value %s (%d bytes) on %s: Update returned %v, want %v",
					tc.what, len(tc.value), r.hname(h), err, tc.want)
			}
			es, err := r.mustRead(h, fresh, held)
			if err != nil {
				return err
			}
			if es[0].Live() || string(es[1].Value) != `1` {
				return r.failf("a refused value %s was not all-or-nothing on %s: Read gave %s and %s, want no entry and 1",
					tc.what, r.hname(h), short(es[0].Value), short(es[1].Value))
			}
		}
	}
	return nil
}

// invalidKeys: calls naming no key, an empty key, a key too long, the same
// key twice or too many keys are refused with ErrInvalidKey, as is a Count
// naming any of them; out-of-range counts with ErrInvalidCount.
func invalidKeys(r *runner) error {
	k := r.key("ik")
	many := make([]string, store.MaxKeys+1)
	for i := range many {
		many[i] = r.key("ik-" + strconv.Itoa(i))
	}
	long := r.key(strings.Repeat("l", store.MaxKeyLen))
	cases := []struct {
		what string
		keys []string
	}{
		{"no keys", nil},
		{"an empty key", []string{""}},
		{"an empty key after a good one", []string{k, ""}},
		{"a key of MaxKeyLen+1 bytes", []string{long[:store.MaxKeyLen+1]}},
		{"the same key twice", []string{k, r.key("ik2"), k}},
		{"MaxKeys+1 keys", many},
	}
	for _, tc := range cases {
		called := false
		err := r.p.First.Update(r.ctx, tc.keys, func(time.Time, []store.Entry) error { called = true; return nil })
		if !errors.Is(err, store.ErrInvalidKey) || called {
			return r.failf("Update naming %s returned %v (apply called: %v), want %v and no call",
				tc.what, err, called, store.ErrInvalidKey)
		}
		if _, err := r.p.First.Read(r.ctx, tc.keys); !errors.Is(err, store.ErrInvalidKey) {
			return r.failf("Read naming %s returned %v, want %v", tc.what, err, store.ErrInvalidKey)
		}
		if len(tc.keys) <= store.MaxCountKeys {
			caps := make([]store.Cap, len(tc.keys))
			for i := range caps {
				caps[i] = store.Cap{Max: 5, Window: time.Minute}
			}
			if _, err := r.p.First.Count(r.ctx, tc.keys, caps, 1); !errors.Is(err, store.ErrInvalidKey) {
				return r.failf("Count naming %s returned %v, want %v", tc.what, err, store.ErrInvalidKey)
			}
		}
	}
	// The longest key is fine.
	if _, _, err := r.put(r.p.First, `1`, longTTL, long[:store.MaxKeyLen]); err != nil {
		return r.failf("a key of exactly MaxKeyLen bytes: %v", err)
	}
	minute := store.Cap{Max: 5, Window: time.Minute}
	counts := []struct {
		what string
		keys []string
		caps []store.Cap
		n    int64
	}{
		{"fewer caps than keys", []string{k, r.key("c2")}, []store.Cap{minute}, 1},
		{"an amount of 0", []string{k}, []store.Cap{minute}, 0},
		{"a cap of 0", []string{k}, []store.Cap{{Max: 0, Window: time.Minute}}, 1},
		{"a window under a millisecond", []string{k}, []store.Cap{{Max: 5, Window: time.Microsecond}}, 1},
	}
	for _, tc := range counts {
		if _, err := r.p.First.Count(r.ctx, tc.keys, tc.caps, tc.n); !errors.Is(err, store.ErrInvalidCount) {
			return r.failf("Count with %s returned %v, want %v", tc.what, err, store.ErrInvalidCount)
		}
	}
	return nil
}

// sweep: Sweep removes expired entries, under every prefix, reports at least
// as many as the case left expired, and keeps every live one.
func sweep(r *runner) error {
	const short, long = 5, 5
	// Another process may sweep the same store at the same moment and take
	// some of this case's expired entries first: a short count is only a
	// violation when it happens every time.
	const attempts = 3
	var last error
	for a := range attempts {
		var shortKeys, longKeys [2][]string
		for i := range short {
			shortKeys[0] = append(shortKeys[0], r.key(fmt.Sprintf("sw%d-short-%d", a, i)))
			shortKeys[1] = append(shortKeys[1], r.key(fmt.Sprintf("sw%d-oshort-%d", a, i)))
		}
		for i := range long {
			longKeys[0] = append(longKeys[0], r.key(fmt.Sprintf("sw%d-long-%d", a, i)))
			longKeys[1] = append(longKeys[1], r.key(fmt.Sprintf("sw%d-olong-%d", a, i)))
		}
		var exp time.Time
		for j, h := range []*store.Handle{r.p.First, r.p.Other} {
			_, e, err := r.put(h, `1`, shortTTL, shortKeys[j]...)
			if err != nil {
				return err
			}
			exp = e
			if _, _, err := r.put(h, `1`, longTTL, longKeys[j]...); err != nil {
				return err
			}
		}
		if _, err := r.waitPast(r.p.First, exp); err != nil {
			return err
		}
		n, err := r.p.First.Store().Sweep(r.ctx)
		if err != nil {
			return r.failf("Sweep: %v", err)
		}
		for j, h := range []*store.Handle{r.p.First, r.p.Other} {
			es, err := r.mustRead(h, longKeys[j]...)
			if err != nil {
				return err
			}
			for i, e := range es {
				if !e.Live() {
					return r.failf("Sweep removed a live entry (key %d of %d expiring in an hour, on %s)", i, long, r.hname(h))
				}
			}
			es, err = r.mustRead(h, shortKeys[j]...)
			if err != nil {
				return err
			}
			for i, e := range es {
				if e.Live() {
					return r.failf("an expired entry (key %d on %s) was read after Sweep", i, r.hname(h))
				}
			}
		}
		if n >= 2*short {
			return nil
		}
		last = r.failf("wrote %d entries that expired (under First's and Other's prefixes); Sweep reported %d removed, want at least %d",
			2*short, n, 2*short)
	}
	return last
}

// prefixIsolation: First and Other never see each other's keys.
func prefixIsolation(r *runner) error {
	if r.p.First.Prefix() == r.p.Other.Prefix() {
		return r.failf("Pair.Other has First's prefix %q; it needs another", r.p.First.Prefix())
	}
	k, only := r.key("iso"), r.key("iso-only")
	if _, _, err := r.put(r.p.First, `"first"`, longTTL, k, only); err != nil {
		return err
	}
	if _, _, err := r.put(r.p.Other, `"other"`, longTTL, k); err != nil {
		return err
	}
	check := func(h *store.Handle, want string) error {
		es, err := r.mustRead(h, k, only)
		if err != nil {
			return err
		}
		if string(es[0].Value) != want {
			return r.failf("Read of one key on %s gave %s, want %s: prefixes are not kept apart", r.hname(h), short(es[0].Value), want)
		}
		if h == r.p.Other && es[1].Live() {
			return r.failf("a key written only through First was read on Other")
		}
		return nil
	}
	if err := check(r.p.First, `"first"`); err != nil {
		return err
	}
	if err := check(r.p.Other, `"other"`); err != nil {
		return err
	}
	if err := r.update(r.p.Other, []string{k}, func(_ time.Time, es []store.Entry) error {
		es[0].Value = nil
		return nil
	}); err != nil {
		return r.failf("deleting Update on Other: %v", err)
	}
	if err := check(r.p.First, `"first"`); err != nil {
		return err
	}
	c := r.key("iso-count")
	caps := []store.Cap{{Max: 1, Window: time.Minute}}
	if _, err := r.count(r.p.First, []string{c}, caps, 1); err != nil {
		return r.failf("Count on First: %v", err)
	}
	t, err := r.count(r.p.Other, []string{c}, caps, 1)
	if err != nil {
		return r.failf("Count on Other: %v", err)
	}
	if !t.Allowed || t.Counts[0] != 1 {
		return r.failf("a key counted to its cap through First was at %d on Other (allowed: %v), want a count of its own", t.Counts[0], t.Allowed)
	}
	return nil
}

// bound: a store of max live entries refuses a new key with ReasonFull and
// writes nothing, keeps counting keys it holds, frees room on a delete and,
// once an entry has expired, for a new key.
func bound(r *runner) error {
	if r.p.NewBounded == nil {
		return r.notApplicable("Pair.NewBounded is not set")
	}
	const max = 8
	h, err := r.p.NewBounded(max)
	if err != nil {
		return r.failf("NewBounded(%d): %v", max, err)
	}
	defer h.Store().Close()
	full := func(what string, keys ...string) error {
		before, err := r.mustRead(h, keys...)
		if err != nil {
			return err
		}
		err = r.update(h, keys, incr)
		if !errors.Is(err, store.ErrUnavailable) || store.ReasonOf(err) != store.ReasonFull {
			return r.failf("%s in a store bound to %d live entries: Update returned %v, want unavailable (%v)", what, max, err, store.ReasonFull)
		}
		after, err := r.mustRead(h, keys...)
		if err != nil {
			return err
		}
		for i := range after {
			if !bytes.Equal(before[i].Value, after[i].Value) {
				return r.failf("%s was refused as full, yet key %d went from %s to %s", what, i, short(before[i].Value), short(after[i].Value))
			}
		}
		return nil
	}
	held := make([]string, max)
	for i := range held {
		held[i] = r.key("bound-" + strconv.Itoa(i))
	}
	if _, _, err := r.put(h, `0`, longTTL, held...); err != nil {
		return r.failf("filling a store bound to %d entries: %v", max, err)
	}
	if err := full("a new key", r.key("bound-new-1")); err != nil {
		return err
	}
	if err := full("an Update of a held key and a new one", held[0], r.key("bound-new-2")); err != nil {
		return err
	}
	for i, k := range held {
		if err := r.update(h, []string{k}, incr); err != nil {
			return r.failf("a held key (%d of %d) in a full store: Update returned %v, want it counted", i, max, err)
		}
	}
	es, err := r.mustRead(h, held...)
	if err != nil {
		return err
	}
	for i, e := range es {
		if n, err := intOf(e); err != nil || n != 1 {
			return r.failf("held key %d of a full store read %s after one count, want 1: a live entry was lost", i, short(e.Value))
		}
	}
	del := func(k string) error {
		if err := r.update(h, []string{k}, func(_ time.Time, es []store.Entry) error {
			es[0].Value = nil
			return nil
		}); err != nil {
			return r.failf("deleting a held key in a full store: %v", err)
		}
		return nil
	}
	// A delete frees room.
	if err := del(held[0]); err != nil {
		return err
	}
	if err := r.update(h, []string{r.key("bound-after-delete")}, incr); err != nil {
		return r.failf("a new key after a delete freed room: %v", err)
	}
	if err := full("a new key after the freed room was taken", r.key("bound-new-3")); err != nil {
		return err
	}
	// An entry that expires frees room: once it has, the full store
	// removes it to make room for a new key.
	if err := del(held[1]); err != nil {
		return err
	}
	_, exp, err := r.put(h, `0`, shortTTL, r.key("bound-short"))
	if err != nil {
		return r.failf("adding a short-lived entry in the room a delete freed: %v", err)
	}
	if _, err := r.waitPast(h, exp); err != nil {
		return err
	}
	if err := r.update(h, []string{r.key("bound-after-expiry")}, incr); err != nil {
		return r.failf("a new key once an entry had expired in a full store: %v, want the expired entry removed to make room", err)
	}
	if err := full("a new key once the expired entry's room was taken", r.key("bound-new-4")); err != nil {
		return err
	}
	es, err = r.mustRead(h, append(held[2:], r.key("bound-after-delete"), r.key("bound-after-expiry"))...)
	if err != nil {
		return err
	}
	for i, e := range es {
		if !e.Live() {
			return r.failf("live entry %d of %d was gone after the store made room: a live entry was evicted", i+1, len(es))
		}
	}
	return nil
}

package storetest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gatecount/gatecount/store"
)

// Cases is the contract, one clause a case. Run runs them all; a store's
// tests may also run them one by one. Each case's doc says what it checks
// and which bugs of a store it catches.
var Cases = []Case{
	newCase("round-trip", roundTrip),
	newCase("visibility", visibility),
	newCase("values-owned", valuesOwned),
	newCase("nil-deletes", nilDeletes),
	newCase("expired-not-seen", expiredNotSeen),
	newCase("expiry-not-early", expiryNotEarly),
	newCase("expiry-not-late", expiryNotLate),
	newCase("rewrite-after-expiry", rewriteAfterExpiry),
	newCase("no-lost-update", noLostUpdate),
	newCase("multi-key-atomic", multiKeyAtomic),
	newCase("read-snapshot", readSnapshot),
	newCase("lock-order", lockOrder),
	newCase("apply-error", applyError),
	newCase("apply-retried-once", applyRetriedOnce),
	newCase("value-limits", valueLimits),
	newCase("invalid-keys", invalidKeys),
	newCase("prefix-isolation", prefixIsolation),
	newCase("nested-prefixes", nestedPrefixes),
	newCase("sweep", sweep),
	newCase("sweep-exact", sweepExact),
	newCase("bound", bound),
	newCase("bound-count", boundCount),
	newCase("bound-handles", boundHandles),
	newCase("bound-rewrite", boundRewrite),
	newCase("close", closeCase),
	newCase("count-exact-budget", countExactBudget),
	newCase("count-all-or-nothing", countAllOrNothing),
	newCase("count-values", countValues),
	newCase("count-window", countWindow),
	newCase("count-matches-generic", countMatchesGeneric),
	newCase("rewrite-live-expiry", rewriteLiveExpiry),
	newCase("expiry-at-boundary", expiryAtBoundary),
	newCase("count-routes", countRoutesCase),
	newCase("count-contention", countContention),
	newCase("prompt-deadline", promptDeadlineCase),
	newCase("sizer", sizerCase),
	newCase("secrets", secretsCase),
	newCase("backing", backingCase),
	newCase("algorithm-exact-budget", algorithmExactBudget),
	newCase("algorithm-matches-generic", algorithmMatchesGeneric),
	newCase("algorithm-window-edge", algorithmWindowEdge),
	newCase("algorithm-pacing", algorithmPacing),
}

// directions returns the (writer, reader) pairs of a case that checks what
// one instance sees of another's writes. They are each handle with itself
// and, for a shared store, First with Second both ways.
func (r *runner) directions() [][2]*store.Handle {
	f, s := r.p.First, r.p.Second
	if f == s {
		return [][2]*store.Handle{{f, f}}
	}
	return [][2]*store.Handle{{f, s}, {s, f}, {f, f}, {s, s}}
}

// roundTrip: values of every JSON shape written through a handle read back,
// with their expiry to the millisecond, through Read and to apply. They do
// on the same handle and, for a shared store, on the other instance's, both
// ways. It catches a store that changes what it keeps. Such a store
// re-encodes JSON (losing an integer's digits or a number's form), on one
// instance as on two, or rounds an expiry.
func roundTrip(r *runner) error {
	values := []string{
		`0`, `17`, `-3`, `9223372036854775807`, `"text"`, `true`, `null`,
		`{"count":3,"first":1700000000000,"ids":["a","b"]}`, `[1,2.5,"x",{"y":null}]`,
		`{"id":9007199254740993,"f":[0.1,1e-7]}`,
		`"` + strings.Repeat("x", store.MaxValueSize-2) + `"`,
	}
	for d, dir := range r.directions() {
		w, rd := dir[0], dir[1]
		for i, v := range values {
			k := r.key(fmt.Sprintf("rt-%d-%d", d, i))
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

// visibility: what one handle writes or deletes is seen at once through the
// other, in every order. It takes each writer and reader: each handle with
// itself, and First with Second both ways for a shared store. The reader
// looks before the first write, and after each of two writes, a delete and
// a write again. It looks once through Read alone and once through apply
// alone, since an Update may well drop what an instance cached. It catches
// a store that caches what it read, per instance, for a moment.
func visibility(r *runner) error {
	if r.p.First.Shared() != r.p.Second.Shared() || r.p.First.Shared() != r.p.Other.Shared() {
		return r.failf("handles disagree on Shared: First %v, Second %v, Other %v",
			r.p.First.Shared(), r.p.Second.Shared(), r.p.Other.Shared())
	}
	for d, dir := range r.directions() {
		w, rd := dir[0], dir[1]
		for _, how := range []string{"Read", "apply"} {
			k := r.key(fmt.Sprintf("vis-%d-%s", d, how))
			look := func(want, after string) error {
				var got []byte
				if how == "Read" {
					es, err := r.mustRead(rd, k)
					if err != nil {
						return err
					}
					got = es[0].Value
				} else {
					o, err := r.observe(rd, k)
					if err != nil {
						return err
					}
					got = o.entries[0].Value
				}
				if string(got) != want {
					return r.failf("after %s through %s, %s on %s gave %s, want %s: it saw an older state",
						after, r.hname(w), how, r.hname(rd), short(got), short([]byte(want)))
				}
				return nil
			}
			if err := look("", "nothing written"); err != nil {
				return err
			}
			for i, v := range []string{`1`, `2`, ``, `3`} {
				what := "writing " + v
				if v == "" {
					if err := r.del(w, k); err != nil {
						return err
					}
					what = "a delete"
				} else if _, _, err := r.put(w, v, longTTL, k); err != nil {
					return err
				}
				if err := look(v, fmt.Sprintf("step %d, %s", i+1, what)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// scribble overwrites b in place, as a caller that reuses its buffers
// would.
func scribble(b []byte) {
	for i := range b {
		b[i] = '#'
	}
}

// valuesOwned: the values Read returns are the caller's to keep and change,
// each its own. So are the value bytes apply is given. Apply may change
// them in place without changing what is stored, unless it leaves them to
// be written. A value apply left is the store's own copy once Update
// returns. It catches a Read whose values alias the store's storage (or one
// another's), an apply handed the store's own bytes, and a store that keeps
// the caller's buffer.
func valuesOwned(r *runner) error {
	const v = `{"owned":"abcdefghij"}`
	k := r.key("own")
	buf := []byte(v)
	if err := r.update(r.p.First, []string{k}, func(now time.Time, es []store.Entry) error {
		es[0] = store.Entry{Value: buf, ExpiresAt: now.Add(longTTL)}
		return nil
	}); err != nil {
		return r.failf("Update on First writing a value: %v", err)
	}
	scribble(buf)
	check := func(after string) error {
		for _, h := range r.handles() {
			es, err := r.mustRead(h, k)
			if err != nil {
				return err
			}
			if string(es[0].Value) != v {
				return r.failf("after %s, Read on %s gave %s, want %s: the store's value was changed through bytes that were not its own",
					after, r.hname(h), short(es[0].Value), v)
			}
		}
		return nil
	}
	if err := check("the caller changed the buffer apply had left for First to write"); err != nil {
		return err
	}
	for _, h := range r.handles() {
		a, err := r.mustRead(h, k)
		if err != nil {
			return err
		}
		b, err := r.mustRead(h, k)
		if err != nil {
			return err
		}
		scribble(a[0].Value)
		if string(b[0].Value) != v {
			return r.failf("changing the value one Read on %s returned changed the value another Read had returned, to %s: they share bytes",
				r.hname(h), short(b[0].Value))
		}
		if err := check("the caller changed the bytes a Read on " + r.hname(h) + " returned"); err != nil {
			return err
		}
		err = r.update(h, []string{k}, func(_ time.Time, es []store.Entry) error {
			scribble(es[0].Value)
			return errApply
		})
		if !errors.Is(err, errApply) {
			return r.failf("apply on %s returned %q; Update returned %v, want that error", r.hname(h), errApply, err)
		}
		if err := check("an apply on " + r.hname(h) + " changed the bytes it was given in place, then failed"); err != nil {
			return err
		}
	}
	return nil
}

// nilDeletes: leaving a nil Value in apply deletes the key, for every
// handle and for one key of several. It catches a store that keeps a key
// apply deleted, or deletes the other keys of the Update with it.
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

// errApply is the error of an apply that fails on purpose.
var errApply = errors.New("storetest: apply fails on purpose")

// applyError: an apply's error writes nothing, on any key, and Update
// returns that very error, not as an unavailable store. It catches a store
// that writes what a failed apply left.
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

// valueLimits: a value of MaxValueSize bytes is kept. One byte more is
// refused with ErrInvalidValue, and a value that is not JSON with
// ErrInvalidValue. Neither writes anything, on any key of the Update. It
// catches a store that writes some keys of an Update the guard refused.
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
		{"one byte over the limit", `"` + strings.Repeat("v", store.MaxValueSize-1) + `"`, store.ErrInvalidValue},
		{"far over the limit", `"` + strings.Repeat("v", 4*store.MaxValueSize) + `"`, store.ErrInvalidValue},
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
// key twice or too many keys are refused with ErrInvalidKey. So is a Count
// naming any of them. Out-of-range counts are refused with ErrInvalidCount.
// It catches a store that refuses the longest key the contract allows.
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
			caps := make([]store.Budget, len(tc.keys))
			for i := range caps {
				caps[i] = store.Budget{Limit: 5, Window: time.Minute}
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
	minute := store.Budget{Limit: 5, Window: time.Minute}
	counts := []struct {
		what string
		keys []string
		caps []store.Budget
		n    int64
	}{
		{"fewer caps than keys", []string{k, r.key("c2")}, []store.Budget{minute}, 1},
		{"an amount of 0", []string{k}, []store.Budget{minute}, 0},
		{"a cap of 0", []string{k}, []store.Budget{{Limit: 0, Window: time.Minute}}, 1},
		{"a window under a millisecond", []string{k}, []store.Budget{{Limit: 5, Window: time.Microsecond}}, 1},
	}
	for _, tc := range counts {
		if _, err := r.p.First.Count(r.ctx, tc.keys, tc.caps, tc.n); !errors.Is(err, store.ErrInvalidCount) {
			return r.failf("Count with %s returned %v, want %v", tc.what, err, store.ErrInvalidCount)
		}
	}
	return nil
}

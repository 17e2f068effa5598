package storetest

import (
	"bytes"
	"errors"
	"strconv"

	"github.com/gatecount/gatecount/store"
)

// bound: a store of max live entries refuses a new key with ReasonFull and
// writes nothing. It keeps counting keys it holds. It frees room on a
// delete and, once an entry has expired, for a new key. It catches a store
// that evicts a live entry to make room, one that ignores its bound, and
// one that never reuses the room of an expired entry.
func bound(r *runner) error {
	const max = 8
	h, err := r.bounded(max)
	if err != nil {
		return err
	}
	defer h.Store().Close()
	held := r.keys(h, "bound", max)
	if err := boundHolds(r, h, held); err != nil {
		return err
	}
	return boundFreesRoom(r, h, held)
}

// boundHolds fills h, bound to len(held) entries, with held, and checks
// that a new key is refused while every held key keeps counting.
func boundHolds(r *runner, h *store.Handle, held []string) error {
	max := len(held)
	full := func(what string, keys ...string) error { return r.full(h, max, what, false, keys...) }
	if _, _, err := r.put(h, `0`, longTTL, held...); err != nil {
		return r.failf("filling a store bound to %d entries: %v", max, err)
	}
	if err := full("a new key", r.keyOn(h, "bound-new-1")); err != nil {
		return err
	}
	if err := full("an Update of a held key and a new one", held[0], r.keyOn(h, "bound-new-2")); err != nil {
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
	return nil
}

// boundFreesRoom checks that a delete, then an expiry, in the full store h
// frees room for one new key each, and that no live entry is evicted.
func boundFreesRoom(r *runner, h *store.Handle, held []string) error {
	max := len(held)
	full := func(what string, keys ...string) error { return r.full(h, max, what, false, keys...) }
	// A delete frees room.
	if err := r.del(h, held[0]); err != nil {
		return err
	}
	if err := r.update(h, []string{r.keyOn(h, "bound-after-delete")}, incr); err != nil {
		return r.failf("a new key after a delete freed room: %v", err)
	}
	if err := full("a new key after the freed room was taken", r.keyOn(h, "bound-new-3")); err != nil {
		return err
	}
	// An entry that expires frees room: once it has, the full store
	// removes it to make room for a new key.
	if err := r.del(h, held[1]); err != nil {
		return err
	}
	_, exp, err := r.put(h, `0`, shortTTL, r.keyOn(h, "bound-short"))
	if err != nil {
		return r.failf("adding a short-lived entry in the room a delete freed: %v", err)
	}
	if _, err := r.waitPast(h, exp); err != nil {
		return err
	}
	if err := r.update(h, []string{r.keyOn(h, "bound-after-expiry")}, incr); err != nil {
		return r.failf("a new key once an entry had expired in a full store: %v, want the expired entry removed to make room", err)
	}
	if err := full("a new key once the expired entry's room was taken", r.keyOn(h, "bound-new-4")); err != nil {
		return err
	}
	es, err := r.mustRead(h, append(held[2:], r.keyOn(h, "bound-after-delete"), r.keyOn(h, "bound-after-expiry"))...)
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

// full checks that an Update of keys through h (a Count, when count is
// set) in a store bound to max entries is refused as full and changes
// nothing.
func (r *runner) full(h *store.Handle, max int, what string, count bool, keys ...string) error {
	before, err := r.mustRead(h, keys...)
	if err != nil {
		return err
	}
	call := "Update"
	if count {
		call = "Count"
		caps := make([]store.Budget, len(keys))
		for i := range caps {
			caps[i] = store.Budget{Limit: 100, Window: longTTL}
		}
		_, err = r.count(h, keys, caps, 1)
	} else {
		err = r.update(h, keys, incr)
	}
	if !errors.Is(err, store.ErrUnavailable) || store.ReasonOf(err) != store.ReasonFull {
		return r.failf("%s in a store bound to %d live entries: %s on %s returned %v, want unavailable (%v)", what, max, call, h.Prefix(), err, store.ReasonFull)
	}
	after, err := r.mustRead(h, keys...)
	if err != nil {
		return err
	}
	for i := range after {
		if !bytes.Equal(before[i].Value, after[i].Value) {
			return r.failf("%s was refused as full by %s, yet key %d went from %s to %s", what, call, i, short(before[i].Value), short(after[i].Value))
		}
	}
	return nil
}

// countEach counts keys through h, at most store.MaxCountKeys in a Count,
// and checks that each is allowed.
func (r *runner) countEach(h *store.Handle, what string, keys ...string) error {
	for len(keys) > 0 {
		n := min(len(keys), store.MaxCountKeys)
		caps := make([]store.Budget, n)
		for i := range caps {
			caps[i] = store.Budget{Limit: 100, Window: longTTL}
		}
		t, err := r.count(h, keys[:n], caps, 1)
		if err != nil || !t.Allowed {
			return r.failf("%s: Count of %d keys on %s: allowed %v, %v", what, n, h.Prefix(), t.Allowed, err)
		}
		keys = keys[n:]
	}
	return nil
}

// keys returns n keys of the run on h, named label-0 on.
func (r *runner) keys(h *store.Handle, label string, n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = r.keyOn(h, label+"-"+strconv.Itoa(i))
	}
	return ks
}

// boundCount: the bound holds for Count as for Update. A store of 8 live
// entries filled by Counts refuses a new key's Count as full and charges
// nothing, even with a held key beside it. Every key it holds keeps
// counting. It catches a store's own Count (store.Counter) that adds keys
// without asking the bound.
func boundCount(r *runner) error {
	const max = 8
	h, err := r.bounded(max)
	if err != nil {
		return err
	}
	defer h.Store().Close()
	held := r.keys(h, "bc-held", max)
	if err := r.countEach(h, "filling a store bound to 8 entries", held...); err != nil {
		return err
	}
	if err := r.full(h, max, "a new key's Count", true, r.keyOn(h, "bc-new")); err != nil {
		return err
	}
	if err := r.full(h, max, "a Count of a held key and a new one", true, held[0], r.keyOn(h, "bc-new-2")); err != nil {
		return err
	}
	if err := r.countEach(h, "the held keys of a full store", held...); err != nil {
		return err
	}
	es, err := r.mustRead(h, held...)
	if err != nil {
		return err
	}
	for i, e := range es {
		if n, err := store.ParseCount(e.Value); err != nil || n != 2 {
			return r.failf("held key %d of a full store read %s after two Counts, want 2", i, short(e.Value))
		}
	}
	return nil
}

// boundHandles: one bound covers every handle of a store. A store of 8 live
// entries is filled half through one handle and half through another (one
// by Update, one by Count). It refuses a new key through either, by Update
// and by Count. The case opens the second handle itself. It catches a bound
// kept per prefix rather than per store.
func boundHandles(r *runner) error {
	const max = 8
	h, err := r.bounded(max)
	if err != nil {
		return err
	}
	defer h.Store().Close()
	h2, err := r.handle(h.Store(), "bh")
	if err != nil {
		return err
	}
	if _, _, err := r.put(h, `1`, longTTL, r.keys(h, "bh-a", max/2)...); err != nil {
		return err
	}
	if err := r.countEach(h2, "filling the second half of the store through another handle", r.keys(h2, "bh-b", max/2)...); err != nil {
		return err
	}
	for _, hh := range []*store.Handle{h, h2} {
		for _, count := range []bool{false, true} {
			if err := r.full(hh, max, "a new key, with the store's two handles holding 4 entries each,", count, r.keyOn(h, "bh-new")); err != nil {
				return err
			}
		}
	}
	return nil
}

// boundRewrite: keys written again once their entries have expired take no
// more room than they held. In a store of 8 live entries, 4 keys expire,
// are written again and deleted, leaving the store empty. It then has room
// for 8 new keys, on Update and on Count alike (each on a store of its
// own). It catches a store whose count of live entries leaks when an
// expired key is rewritten. Such a store counts the rewrite as a new entry
// without taking off the expired one it replaced, and ends up full for
// ever.
func boundRewrite(r *runner) error {
	const max = 8
	hu, err := r.bounded(max)
	if err != nil {
		return err
	}
	defer hu.Store().Close()
	hc, err := r.bounded(max)
	if err != nil {
		return err
	}
	defer hc.Store().Close()
	// Each store names its own keys: a spread handle's calls take keys of
	// one of its parts (Pair.Key).
	oldU, oldC := r.keys(hu, "br-old", max/2), r.keys(hc, "br-old", max/2)
	_, exp, err := r.put(hu, `1`, shortTTL, oldU...)
	if err != nil {
		return err
	}
	caps := make([]store.Budget, len(oldC))
	for i := range caps {
		caps[i] = store.Budget{Limit: 100, Window: shortTTL}
	}
	t, err := r.count(hc, oldC, caps, 1)
	if err != nil || !t.Allowed {
		return r.failf("Count of %d keys in an empty store: allowed %v, %v", len(oldC), t.Allowed, err)
	}
	if t.ExpiresAt[0].After(exp) {
		exp = t.ExpiresAt[0]
	}
	if _, err := r.waitPast(hu, exp); err != nil {
		return err
	}
	if _, _, err := r.put(hu, `2`, longTTL, oldU...); err != nil {
		return r.failf("writing again %d keys whose entries had expired: %v", len(oldU), err)
	}
	if err := r.countEach(hc, "counting again keys whose counters had expired", oldC...); err != nil {
		return err
	}
	if err := r.del(hu, oldU...); err != nil {
		return err
	}
	if err := r.del(hc, oldC...); err != nil {
		return err
	}
	if _, _, err := r.put(hu, `1`, longTTL, r.keys(hu, "br-new", max)...); err != nil {
		return r.failf("%d new keys in a store bound to %d, emptied after %d of its keys expired and were written again: %v; want room for them all (the count of live entries leaked on the rewrites)",
			max, max, len(oldU), err)
	}
	if err := r.countEach(hc, "new keys in a store bound to 8, emptied after 4 of its counters expired and were counted again (the count of live entries leaked on the rewrites?)", r.keys(hc, "br-new", max)...); err != nil {
		return err
	}
	return nil
}

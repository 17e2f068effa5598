package storetest

import (
	"strconv"
	"time"

	"github.com/gatecount/gatecount/store"
)

// expiredNotSeen: once the store's time reaches an entry's ExpiresAt, the
// entry is neither read nor given to apply, on either handle. It catches a
// store that ignores expiry, or judges it on a clock behind the one it
// tells apply.
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

// expiryNotEarly: an entry is live until the store's time reaches its
// ExpiresAt, to the millisecond, on both handles. Written to expire liveTTL
// after the store's time, it is live at once. As its expiry nears, the case
// looks at it every few milliseconds. It looks through apply, which is told
// the store's time, and through Read, checked against the time an apply
// tells just after. The entry is live at every look before ExpiresAt. It
// catches a store that judges expiry on a clock ahead of the one it tells
// apply, and a handle whose clock runs ahead. It catches entries that
// expire early, by a minute or by 100 ms: by more than the few milliseconds
// between looks.
func expiryNotEarly(r *runner) error {
	if err := r.liveAtOnce(); err != nil {
		return err
	}
	for _, h := range r.handles() {
		if err := r.liveUntilExpiry(h); err != nil {
			return err
		}
	}
	return nil
}

// liveUntilExpiry writes entries through First that expire shortTTL later
// and looks at each through h every nearPoll until the store's time passes
// its expiry, failing at the first look that finds one gone early. A look
// that finds it gone only at its expiry shows nothing when the look before
// was more than nearGap earlier (the machine stalled): the case then tries
// another entry, up to nearAttempts in all.
func (r *runner) liveUntilExpiry(h *store.Handle) error {
	for i := range nearAttempts {
		shown, err := r.liveUntil(h, r.key("near-"+r.hname(h)+"-"+strconv.Itoa(i)))
		if err != nil || shown {
			return err
		}
	}
	return nil // a machine too slow to look close to an expiry shows nothing
}

// liveUntil is one try of liveUntilExpiry, on key k. It reports whether a
// look came within nearGap of the expiry.
func (r *runner) liveUntil(h *store.Handle, k string) (bool, error) {
	_, exp, err := r.put(r.p.First, `1`, shortTTL, k)
	if err != nil {
		return false, err
	}
	limit := time.Now().Add(shortTTL + clockSlack)
	var lastLive time.Time // the store's time at the last look that found it live
	for {
		o, err := r.observe(h, k)
		if err != nil {
			return false, err
		}
		if !o.entries[0].Live() {
			if o.now.Before(exp) {
				return true, r.failf("entry expiring at %v was not given to apply on %s with the store's time there at %v, %v before its expiry: it expired early",
					ts(exp), r.hname(h), ts(o.now), exp.Sub(o.now))
			}
			return exp.Sub(lastLive) <= nearGap, nil
		}
		lastLive = o.now
		es, err := r.mustRead(h, k)
		if err != nil {
			return false, err
		}
		if !es[0].Live() {
			after, err := r.observe(h, k)
			if err != nil {
				return false, err
			}
			if after.now.Before(exp) {
				return true, r.failf("entry expiring at %v was not read on %s, though the store's time there was %v just after, %v before its expiry: it expired early",
					ts(exp), r.hname(h), ts(after.now), exp.Sub(after.now))
			}
			return exp.Sub(lastLive) <= nearGap, nil
		}
		if time.Now().After(limit) {
			return false, r.failf("the store's time on %s reads %v, and did not reach %v within %v more", r.hname(h), ts(o.now), ts(exp), clockSlack)
		}
		if err := r.pause(nearPoll); err != nil {
			return false, err
		}
	}
}

// liveAtOnce checks that an entry written to expire liveTTL after the
// store's time is live at once on both handles, trying again when the
// machine was too slow for that to be shown.
func (r *runner) liveAtOnce() error {
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
// views of the store's time agree. It catches a handle whose clock runs
// behind the store's.
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

// rewriteAfterExpiry: a key written again once its entry has expired takes
// the new entry's expiry. A counter counted again once its window has ended
// starts a new window, and counts from zero up to its cap in it. That holds
// on the generic path (Count done through Update) and on the store's own
// Count, through either handle. It catches a store that keeps the old row's
// expiry when it writes over an expired row. Every entry it rewrites is
// born expired, so after the first window every count is allowed and the
// limit never applies again.
func rewriteAfterExpiry(r *runner) error {
	const capMax = 3
	k, gk, nk := r.key("rw"), r.key("rw-generic"), r.key("rw-native")
	window := []store.Budget{{Limit: capMax, Window: shortTTL}}
	_, exp, err := r.put(r.p.First, `1`, shortTTL, k)
	if err != nil {
		return err
	}
	g, err := r.genericCount(r.p.First, []string{gk}, window, 1)
	if err != nil {
		return r.failf("the generic Count through Update on First: %v", err)
	}
	n, err := r.count(r.p.First, []string{nk}, window, 1)
	if err != nil {
		return r.failf("Count on First: %v", err)
	}
	for _, t := range []time.Time{g.ExpiresAt[0], n.ExpiresAt[0]} {
		if t.After(exp) {
			exp = t
		}
	}
	if _, err := r.waitPast(r.p.Second, exp); err != nil {
		return err
	}
	if err := rewriteTakesNewExpiry(r, k); err != nil {
		return err
	}
	return countsInNewWindow(r, gk, nk, capMax)
}

// rewriteTakesNewExpiry writes k, whose entry has expired, again through
// Second, and checks that both handles read the new entry's expiry.
func rewriteTakesNewExpiry(r *runner, k string) error {
	_, exp2, err := r.put(r.p.Second, `2`, longTTL, k)
	if err != nil {
		return err
	}
	for _, h := range r.handles() {
		es, err := r.mustRead(h, k)
		if err != nil {
			return err
		}
		o, err := r.observe(h, k)
		if err != nil {
			return err
		}
		for _, e := range []store.Entry{es[0], o.entries[0]} {
			if string(e.Value) != `2` || !e.ExpiresAt.Equal(exp2) {
				return r.failf("a key written again once its entry had expired, to expire at %v, gave %s expiring %v on %s: the rewrite did not take the new expiry",
					ts(exp2), short(e.Value), ts(e.ExpiresAt), r.hname(h))
			}
		}
	}
	return nil
}

// countsInNewWindow counts gk (on the generic path) and nk (on the store's
// own Count), whose windows have ended, to their cap and once past it, in
// turn through both handles, and checks that each starts a new window.
func countsInNewWindow(r *runner, gk, nk string, capMax int) error {
	hour := []store.Budget{{Limit: capMax, Window: longTTL}}
	paths := []struct {
		name  string
		key   string
		count func(h *store.Handle, keys []string, caps []store.Budget, n int64) (store.Tally, error)
	}{
		{"the generic Count through Update", gk, r.genericCount},
		{"Count", nk, r.count},
	}
	for _, p := range paths {
		var start time.Time
		for i := range capMax + 1 {
			h := r.p.Second
			if i%2 == 1 {
				h = r.p.First
			}
			t, err := p.count(h, []string{p.key}, hour, 1)
			if err != nil {
				return r.failf("%s %d on %s after the first window ended: %v", p.name, i+1, r.hname(h), err)
			}
			if i == 0 {
				start = t.Now
			}
			end := start.Add(longTTL).Truncate(time.Millisecond)
			if i < capMax && (!t.Allowed || t.Counts[0] != int64(i+1) || !t.ExpiresAt[0].Equal(end)) {
				return r.failf("%s %d of a counter whose first window had ended, on %s: allowed %v, count %d ending %v; want allowed, %d ending %v (the new window)",
					p.name, i+1, r.hname(h), t.Allowed, t.Counts[0], ts(t.ExpiresAt[0]), i+1, ts(end))
			}
			if i == capMax && (t.Allowed || t.Counts[0] != int64(capMax)) {
				return r.failf("%s %d of a counter capped at %d in its second window, on %s: allowed %v at count %d; want refused at %d: the limit no longer applies",
					p.name, i+1, capMax, r.hname(h), t.Allowed, t.Counts[0], capMax)
			}
		}
		es, err := r.mustRead(r.p.First, p.key)
		if err != nil {
			return err
		}
		if c, err := store.ParseCount(es[0].Value); err != nil || c != int64(capMax) {
			return r.failf("after %s to the cap in a second window, the counter read %s expiring %v, want %d",
				p.name, short(es[0].Value), ts(es[0].ExpiresAt), capMax)
		}
	}
	return nil
}

package storetest

import (
	"fmt"
	"strconv"
	"time"

	"github.com/gatecount/gatecount/store"
)

// rewriteLiveExpiry: a live entry written again takes the new entry's
// expiry, later or earlier than its old one, on both handles. The entry is
// written to expire shortTTL after the store's time, then again through
// Second to expire longTTL after it. It reads the later expiry, and is
// still live once the store's time has passed the first. Written again
// through First to expire shortTTL after the store's time, it reads that
// earlier expiry. It is gone once the store's time has passed it. It
// catches a store that keeps a live row's expiry when it writes over the
// row (a Redis SET with KEEPTTL, an UPDATE that sets the value alone). A
// block a limiter writes over its counter would then end when the counter's
// window does.
func rewriteLiveExpiry(r *runner) error {
	k := r.key("live-rw")
	_, first, err := r.put(r.p.First, `1`, shortTTL, k)
	if err != nil {
		return err
	}
	_, later, err := r.put(r.p.Second, `2`, longTTL, k)
	if err != nil {
		return err
	}
	if err := r.holds(k, `2`, later, "written again through Second, while live, to expire later"); err != nil {
		return err
	}
	if _, err := r.waitPast(r.p.First, first); err != nil {
		return err
	}
	if err := r.holds(k, `2`, later, "once the store's time had passed "+ts(first)+", its expiry before it was written again to expire later"); err != nil {
		return err
	}
	_, earlier, err := r.put(r.p.First, `3`, shortTTL, k)
	if err != nil {
		return err
	}
	if err := r.holds(k, `3`, earlier, "written again through First, while live, to expire earlier"); err != nil {
		return err
	}
	for _, h := range r.handles() {
		now, err := r.waitPast(h, earlier)
		if err != nil {
			return err
		}
		es, err := r.mustRead(h, k)
		if err != nil {
			return err
		}
		if es[0].Live() {
			return r.failf("a live entry written again to expire earlier, at %v, was still read on %s at store time %v, expiring %v: the rewrite did not take the earlier expiry",
				ts(earlier), r.hname(h), ts(now), ts(es[0].ExpiresAt))
		}
	}
	return nil
}

// holds checks that k holds value expiring at exp, through Read and apply
// on both handles.
func (r *runner) holds(k, value string, exp time.Time, after string) error {
	for _, h := range r.handles() {
		es, err := r.mustRead(h, k)
		if err != nil {
			return err
		}
		o, err := r.observe(h, k)
		if err != nil {
			return err
		}
		for i, e := range []store.Entry{es[0], o.entries[0]} {
			how := [...]string{"Read", "apply"}[i]
			if string(e.Value) != value || !e.ExpiresAt.Equal(exp) {
				return r.failf("an entry %s, to hold %s expiring %v, gave %s expiring %v to %s on %s: a live entry written again keeps its old expiry",
					after, value, ts(exp), short(e.Value), ts(e.ExpiresAt), how, r.hname(h))
			}
		}
	}
	return nil
}

// boundaryKeys is how many entries expiryAtBoundary writes, each expiring
// a millisecond after the one before: as many as one call may name.
const boundaryKeys = store.MaxKeys

// expiryAtBoundary: an entry is gone exactly at its ExpiresAt, on the
// store's clock: at a store time equal to it, to the millisecond, it is
// neither given to apply nor read. The case writes entries expiring one
// millisecond apart. As their expiries pass, it looks at all of them every
// few milliseconds on each handle. It looks through apply, which is told
// the store's time, and through Read, checked against the time an apply
// told just before. Whichever millisecond a look lands on, one of the
// entries expires exactly then. It catches a store that keeps an entry live
// at its ExpiresAt (>= for >, or a millisecond rounded up). expiry-not-late
// sees that only when one of its looks lands on that millisecond.
func expiryAtBoundary(r *runner) error {
	for _, h := range r.handles() {
		shown := false
		for i := 0; i < nearAttempts && !shown; i++ {
			var err error
			if shown, err = r.goneAtExpiry(h, i); err != nil {
				return err
			}
		}
	}
	return nil // a machine too slow to look within the entries' span shows nothing
}

// goneAtExpiry is one try of expiryAtBoundary through h. It reports
// whether a look landed within the span of the entries' expiries.
func (r *runner) goneAtExpiry(h *store.Handle, try int) (bool, error) {
	keys := make([]string, boundaryKeys)
	for i := range keys {
		keys[i] = r.key(fmt.Sprintf("edge-%s-%d-%d", r.hname(h), try, i))
	}
	var base time.Time
	err := r.update(r.p.First, keys, func(now time.Time, es []store.Entry) error {
		base = now.Add(shortTTL).Truncate(time.Millisecond)
		for i := range es {
			es[i] = store.Entry{Value: []byte(strconv.Itoa(i)), ExpiresAt: base.Add(time.Duration(i) * time.Millisecond)}
		}
		return nil
	})
	if err != nil {
		return false, r.failf("Update on First writing %d keys: %v", len(keys), err)
	}
	last := base.Add((boundaryKeys - 1) * time.Millisecond)
	limit := time.Now().Add(shortTTL + clockSlack)
	shown := false
	for {
		o, err := r.observe(h, keys...)
		if err != nil {
			return false, err
		}
		for i, e := range o.entries {
			exp := base.Add(time.Duration(i) * time.Millisecond)
			if e.Live() && !exp.After(o.now) {
				return true, r.failf("entry expiring at %v was given to apply on %s with the store's time there at %v: it was live at or after its ExpiresAt",
					ts(exp), r.hname(h), o.now.UTC().Format("15:04:05.000000"))
			}
		}
		if !o.now.Before(base) && o.now.Before(last) {
			shown = true
		}
		es, err := r.mustRead(h, keys...)
		if err != nil {
			return false, err
		}
		for i, e := range es {
			exp := base.Add(time.Duration(i) * time.Millisecond)
			if e.Live() && !exp.After(o.now) {
				return true, r.failf("entry expiring at %v was read on %s though the store's time there was %v just before: it was live at or after its ExpiresAt",
					ts(exp), r.hname(h), o.now.UTC().Format("15:04:05.000000"))
			}
		}
		if o.now.After(last) {
			return shown, nil
		}
		if time.Now().After(limit) {
			return false, r.failf("the store's time on %s reads %v, and did not reach %v within %v more", r.hname(h), ts(o.now), ts(last), clockSlack)
		}
		if err := r.pause(nearPoll); err != nil {
			return false, err
		}
	}
}

package limiter

import (
	"context"
	"errors"
	"time"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/value"
)

// countHeld decides an attempt that a full store had no room for. The keys
// the store holds are still counted there, in one update, and a key among
// them that is spent refuses the attempt as it would any day. Only the keys
// the store has no room for fall to the policy. Under Deny the attempt is
// refused. Otherwise they are counted in process memory, and when memory
// refuses them the store's keys are given back. When memory has no room
// for them either, the attempt is refused as counted alone (see noRoom). A
// full store is not down, and its answer is not an outage's.
func (l *Limiter) countHeld(ctx context.Context, keys []string, caps []store.Budget, n int64, cause error, d *Decision) error {
	m := &memoCall{n: len(keys)} // what the apply holds, off the caller's stack
	copy(m.keys[:], keys)
	copy(m.caps[:], caps)
	ks, cs, t := m.keys[:m.n], m.caps[:m.n], &m.t
	var fresh uint8 // bit i: keys[i] has no entry in the store
	l.unseen(ctx, m)
	err := l.h.Update(ctx, ks, func(now time.Time, es []store.Entry) error {
		var err error
		if fresh, err = readCounts(now, es, cs, n, t); err != nil {
			return err
		}
		for i := range es {
			if t.Limiting < 0 && fresh>>i&1 == 0 && t.Counts[i]+m.kept(i, &es[i])+n > cs[i].Capacity() {
				t.Limiting, t.Allowed = i, false // room is kept for attempts not in the store yet
			}
		}
		if t.Limiting >= 0 || l.policy == Deny && fresh != 0 {
			return nil // nothing changes
		}
		for i := range es {
			if !es[i].Live() {
				continue
			}
			if cs[i].Algorithm == store.FixedWindow {
				t.Counts[i] += n
				es[i].Value = value.AppendCount(es[i].Value[:0], t.Counts[i])
				continue
			}
			if err := cs[i].AddUnits(now, &es[i], n); err != nil {
				return err
			}
			if t.Counts[i], t.ExpiresAt[i], err = cs[i].Units(now, es[i]); err != nil {
				return err
			}
		}
		return nil
	})
	switch {
	case err != nil && store.ReasonOf(err) == store.ReasonFull:
		err := l.countLocal(ctx, keys, caps, n, cause, d) // no key is held after all
		switch {
		case err == nil:
		case outOfRoom(err):
			l.refuseNoRoom(keys, caps, cause, err, d)
		default:
			l.refuse(errors.Join(cause, err), caps, d)
		}
		return nil
	case err != nil && errors.Is(err, store.ErrUnavailable):
		return l.degraded(ctx, keys, caps, n, err, d)
	case err != nil:
		return err
	case t.Limiting >= 0: // a held key is spent: the store's own refusal
		decide(t, keys, caps, false, d)
		if l.memo {
			l.remember(ctx, keys, caps, n, t, nil)
		}
		return nil
	case fresh == 0: // every key was held by the time of the update
		decide(t, keys, caps, false, d)
		if l.memo {
			l.remember(ctx, keys, caps, n, t, nil)
		}
		return nil
	case l.policy == Deny:
		l.refuse(cause, caps, d)
		return nil
	}
	l.full.Do(func() {
		l.log.Warn("store full: keys it holds are counted there, new keys in process memory", "kind", KindStoreFull, "err", cause)
	})
	return l.countFresh(ctx, keys, caps, n, cause, t, fresh, d)
}

// unseen sets the room m's attempt keeps in each key for attempts admitted
// that the store may not count yet (see memoCall.kept): what the others
// owe (see owe), and what this instance admitted alone and has not sent,
// or sent without an answer. An attempt counted in the store keeps room
// for them, as countSending does.
func (l *Limiter) unseen(ctx context.Context, m *memoCall) {
	l.owe(m, m.keys[:m.n], m.caps[:m.n], m.cost)
	if !l.memo {
		return
	}
	es, err := l.local.Read(ctx, m.keys[:m.n])
	if err != nil {
		return
	}
	for i := range es {
		if k, err := knownOf(&es[i]); err == nil {
			m.hold[i] += k.unsent() + k.flying
		}
	}
}

// countFresh counts in process memory the keys marked in fresh, which the
// store had no room for, after the store counted the others into t, at
// cost n.
func (l *Limiter) countFresh(ctx context.Context, keys []string, caps []store.Budget, cost int64, cause error, t *store.Tally, fresh uint8, d *Decision) error {
	var sub [MaxKeys]string
	var subCaps [MaxKeys]store.Budget
	var at [MaxKeys]int
	n := 0
	for i := range keys {
		if fresh>>i&1 == 1 {
			sub[n], subCaps[n], at[n] = keys[i], caps[i], i
			n++
		}
	}
	lt, err := l.countAlone(ctx, sub[:n:n], subCaps[:n:n], cost)
	if outOfRoom(err) {
		lt, err = l.noRoom(t.Now, subCaps[:n:n], err), nil
	}
	if err != nil || !lt.Allowed {
		l.giveBackHeld(ctx, keys, caps, t, fresh, cost)
	}
	if err != nil {
		l.refuse(errors.Join(cause, err), caps, d)
		return nil
	}
	skew := t.Now.Sub(lt.Now) // the store's clock less this process's
	t.Allowed = lt.Allowed
	if !lt.Allowed {
		t.Limiting = at[lt.Limiting]
		for i := range keys { // as they were: nothing was counted
			if fresh>>i&1 == 0 && t.ExpiresAt[i] != (time.Time{}) {
				t.Counts[i] -= cost
			}
		}
	}
	if l.memo {
		// Memory learns the held keys' counts, and what the store admitted
		// for this instance, as from any answer: counting alone later
		// starts from them (t has no window for the fresh keys yet).
		l.remember(ctx, keys, caps, cost, t, nil)
	}
	for j := range n {
		t.Counts[at[j]] = lt.Counts[j]
		if !lt.ExpiresAt[j].IsZero() {
			t.ExpiresAt[at[j]] = lt.ExpiresAt[j].Add(skew)
		}
	}
	decide(t, keys, caps, true, d)
	for j := range n { // in memory's own clock, for a Refund
		d.expires[at[j]] = lt.ExpiresAt[j].UnixMilli()
	}
	d.inMemory = fresh
	d.Unavailable, d.Cause = true, cause
	return nil
}

// giveBackHeld takes back the count, cost, the store made of the held keys
// of t (those not in fresh), in the windows it made them in.
func (l *Limiter) giveBackHeld(ctx context.Context, keys []string, caps []store.Budget, t *store.Tally, fresh uint8, cost int64) {
	var held [MaxKeys]string
	var exp [MaxKeys]int64
	var cs [MaxKeys]store.Budget
	n := 0
	for i := range keys {
		if fresh>>i&1 == 0 {
			held[n], exp[n], cs[n] = keys[i], t.ExpiresAt[i].UnixMilli(), caps[i]
			n++
		}
	}
	if n == 0 {
		return
	}
	if err := l.land(ctx, &credit{keys: held[:n], expires: exp[:n], n: cost, caps: cs[:n]}); err != nil {
		l.log.Warn("store full: giving back a refused attempt's count failed", "kind", KindStoreFull, "err", err)
	}
}

// outOfRoom reports whether counting alone failed with err for want of room:
// memory full, or no share of any budget yet (errNoShare).
func outOfRoom(err error) bool {
	return store.ReasonOf(err) == store.ReasonFull || errors.Is(err, errNoShare)
}

// refuseNoRoom decides an attempt on keys that the store could not count
// (cause) and process memory had no room for (err): see noRoom.
func (l *Limiter) refuseNoRoom(keys []string, caps []store.Budget, cause, err error, d *Decision) {
	t := l.noRoom(time.Now(), caps, err)
	decide(&t, keys, caps, true, d)
	d.Unavailable, d.Cause = true, cause
}

// noRoom is the tally, at now, of an attempt on keys with budgets caps that
// neither the store (full, or out of reach) nor process memory (full, or
// with no share yet: err) has room to count. Nothing can count the attempt,
// so nothing admits it.
// It is refused as counted alone, as a key with no share left is (429,
// never 503), by the key whose window is shortest. Its Retry-After is the
// window it would open. Admitting it uncounted would give any key the
// store does not hold, an account under attack among them, a budget
// without end. Answering 503 would fail every bystander of a flood that
// filled memory.
func (l *Limiter) noRoom(now time.Time, caps []store.Budget, err error) store.Tally {
	l.memoFull.Do(func() {
		l.log.Warn("limiter memory full: new keys neither the store nor memory has room for are refused", "kind", KindMemoryFull, "err", err)
	})
	t := store.Tally{Now: now, Limiting: 0}
	for i := range caps {
		t.ExpiresAt[i] = now.Add(caps[i].Window)
		if caps[i].Window < caps[t.Limiting].Window {
			t.Limiting = i
		}
	}
	return t
}

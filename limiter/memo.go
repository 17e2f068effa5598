package limiter

import (
	"context"
	"time"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
	"github.com/gatecount/gatecount/store/value"
)

// A limiter keeps, in process memory, what it last learnt of each key from
// a store that does I/O: the key's count and the end of its window. It serves two
// ends:
//
//   - A key that memory shows spent is refused without a store call, until
//     its window ends (recall). Nothing is ever admitted from memory: a
//     count in memory is at most the store's, so memory can only refuse
//     what the store would.
//   - When the store cannot answer, counting in memory goes on from the
//     last known counts, not from zero (see Limiter.degraded).
//
// The memory is an in-process memory store, bounded by
// Options.LocalMaxEntries, with room beyond kept for attempts vouched for
// (see Vouch and reserveOf). Counts of keys the store admitted are
// remembered only while it is less than three quarters full, so that a
// flood of fresh keys cannot crowd out the refusals, which save the most.
// A key dropped with a count is marked forgotten. A limiter under
// Deny never counts in memory: it remembers an admitted count only when it
// leaves the key without room for another attempt, and passes memory over
// for keys it does not hold (see unheld).

// memoRoom is the share of the local store that counts of admitted keys
// may fill, in quarters.
const memoRoom = 3

// newLocal makes the limiter's in-memory store, bounded by max entries, on
// the clock now (nil: the process clock).
func newLocal(prefix string, max int, o store.Options, now func() time.Time) (*store.Handle, *memory.Backend, error) {
	o = o.WithDefaults()
	b := memory.NewBackend(memory.Options{MaxEntries: max, Store: o, Now: now})
	s := store.New(b, o)
	h, err := s.Handle(prefix)
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	return h, b, nil
}

// AskAgain is how long a key that memory shows spent is refused from memory
// alone. After it, the next attempt on the key asks the store again: one
// attempt per key and instance, while the others are still refused from
// memory. A Reset, a refund or a Credit made through any instance so takes
// effect on every instance within about AskAgain. A flood of refused
// attempts costs at most one store call per key per AskAgain.
const AskAgain = time.Second

// recall fills d and reports true when memory shows a key of the attempt
// without room for its cost n, and the store need not be asked. That is
// when the store was asked about the key within AskAgain, or memory holds
// attempts admitted alone that the store has not yet seen. When the only
// such keys were asked about earlier, this attempt claims asking again:
// memory records it as asked now. When it reports false, it returns the
// attempts admitted alone that it claimed (see claim), to be added to the
// store with the attempt's count, or nil.
func (l *Limiter) recall(ctx context.Context, keys []string, caps []store.Budget, n int64, d *Decision) (bool, *memoCall) {
	m := &memoCall{n: len(keys), cost: n}
	copy(m.keys[:], keys)
	copy(m.caps[:], caps)
	ks, cs, t := m.keys[:m.n], m.caps[:m.n], &m.t
	err := l.updateMemory(ctx, ks, func(now time.Time, es []store.Entry) error {
		*t = store.Tally{Now: now, Limiting: -1}
		m.send, m.hold, m.sending, m.flew, m.asks = [MaxKeys]int64{}, [MaxKeys]int64{}, false, false, 0
		nowMs := now.UnixMilli()
		var stale uint8 // bit i: key i is spent, and was asked about too long ago
		var kn [MaxKeys]known
		for i := range es {
			if !es[i].Live() {
				continue
			}
			k, err := knownOf(&es[i])
			if err != nil {
				return err
			}
			kn[i] = k
			t.Counts[i], t.ExpiresAt[i] = k.count(), es[i].ExpiresAt
			if k.next != 0 { // a unit drops before memory forgets the key
				t.ExpiresAt[i] = time.UnixMilli(k.next)
			}
			switch {
			case k.count()+n <= cs[i].Capacity():
				// Room for this cost: a key memory refuses a larger one
				// still admits it.
			case k.next != 0 && nowMs >= k.next && k.unsent() == 0:
				// A unit has dropped since the store told the count: the
				// store may admit it.
				stale |= 1 << i
			case k.unsent() > 0 || nowMs-k.asked < AskAgain.Milliseconds():
				// Attempts admitted alone are not in the store yet: its
				// count would not be the whole count.
				if t.Limiting < 0 {
					t.Limiting = i
				}
			default:
				stale |= 1 << i
			}
		}
		t.Allowed = t.Limiting < 0
		if !t.Allowed {
			return nil
		}
		m.flew = l.policy != Deny // only counting alone needs to know
		m.asks = stale
		for i := range es {
			changed := stale>>i&1 == 1 || m.flew
			if m.flew {
				kn[i].flying += n
				if !es[i].Live() {
					es[i].ExpiresAt = now.Add(cs[i].Window)
				}
			}
			if stale>>i&1 == 1 {
				kn[i].asked = nowMs
			}
			if kn[i].unsent() > 0 {
				// The store does not hold what another call is sending,
				// nor what this one claims: the attempts sent before it and
				// not yet answered were counted on to fit, so room is kept
				// for them too.
				m.hold[i], m.sending = kn[i].sending+kn[i].flying, true
				if m.flew {
					m.hold[i] -= n // this call's own
				}
			}
			if kn[i].alone > 0 {
				m.send[i] = kn[i].claim()
				m.sending, changed = true, true
			}
			if changed {
				kn[i].put(&es[i])
			}
		}
		return nil
	})
	if err != nil {
		return false, nil // memory is full: nothing was claimed or marked
	}
	if t.Limiting < 0 {
		l.owe(m, ks, cs, n)
		if m.sending || m.flew {
			return false, m
		}
		return false, nil
	}
	decide(t, keys, caps, false, d)
	d.Remembered = true
	return true, nil
}

// owe adds to m.hold and m.young, for each of keys, the room kept for what
// other instances owe the store (see store.Store.Reserved). When m is nil,
// it makes one for an attempt of cost n on keys with caps, if anything is
// owed. It returns m.
func (l *Limiter) owe(m *memoCall, keys []string, caps []store.Budget, n int64) *memoCall {
	s := l.h.Store()
	for i := range keys {
		all, young, since := s.Reserved(keys[i], caps[i].Capacity())
		if all <= 0 && young <= 0 {
			continue
		}
		if m == nil {
			m = &memoCall{n: len(keys), cost: n}
			copy(m.keys[:], keys)
			copy(m.caps[:], caps)
		}
		m.hold[i] += all
		m.young[i] += young
		m.since = since
		m.sending = true
	}
	return m
}

// newEntry reports whether the store's entry e of a key with budget b is
// new from since (the store's clock): none, or one whose window began at
// since or later. An instance that holds attempts of keys the store had no
// room for can hold them of such a key only (see store.Store.Reserved).
// Only a fixed window tells when it began: any other entry is taken as
// new.
func newEntry(e *store.Entry, b store.Budget, since time.Time) bool {
	return !e.Live() || b.Algorithm != store.FixedWindow || !e.ExpiresAt.Add(-b.Window).Before(since)
}

// kept is the room an attempt counted in the store keeps free in entry e
// of key i (see memoCall.hold).
func (m *memoCall) kept(i int, e *store.Entry) int64 {
	if m.young[i] > 0 && newEntry(e, m.caps[i], m.since) {
		return m.hold[i] + m.young[i]
	}
	return m.hold[i]
}

// unheld reports whether memory holds none of keys, for a limiter whose
// memory serves only to refuse: under Deny, it never counts in memory.
// Memory then has nothing to refuse, claim or mark for an attempt on keys,
// and recall is passed over. The store's answer is remembered only when it
// leaves a key without room (see roomLeft).
func (l *Limiter) unheld(keys []string) bool {
	return l.policy == Deny && !l.localB.Holds(l.local.Prefix(), keys)
}

// roomLeft reports whether the tally t of an attempt of cost n admitted it
// and left every key room for another such attempt. Memory, which only
// refuses, has nothing to learn from it.
func roomLeft(t *store.Tally, caps []store.Budget, n int64) bool {
	if !t.Allowed {
		return false
	}
	for i := range caps {
		if t.Counts[i]+n > caps[i].Capacity() {
			return false
		}
	}
	return true
}

// landed records that the store answered the call m marked as sent (see
// memoCall.flew) without a count to remember: it failed.
func (l *Limiter) landed(ctx context.Context, m *memoCall) {
	if m == nil || !m.flew {
		return
	}
	m.flew = false
	l.local.Update(ctx, m.keys[:m.n], func(now time.Time, es []store.Entry) error {
		for i := range es {
			k, err := knownOf(&es[i])
			if err != nil || !es[i].Live() {
				continue
			}
			k.flying = max(k.flying-m.cost, 0)
			if k.empty() {
				es[i].Value = nil
			} else {
				k.put(&es[i])
			}
		}
		return nil
	})
}

// unclaim gives back to memory the attempts admitted alone of keys that a
// call claimed, send[i] of keys[i], when the store did not take them: the
// outbox sends them again later.
func (l *Limiter) unclaim(ctx context.Context, keys []string, send []int64) {
	if back := l.restore(ctx, keys, send); len(back) > 0 {
		l.out.admitted(l, back)
	}
}

// restore gives back to memory what unclaim does, and returns the keys
// that had any.
func (l *Limiter) restore(ctx context.Context, keys []string, send []int64) (back []string) {
	l.local.Update(ctx, keys, func(now time.Time, es []store.Entry) error {
		back = back[:0] // an apply may run again
		for i := range es {
			if send[i] == 0 || !es[i].Live() {
				continue
			}
			k, err := knownOf(&es[i])
			if err != nil {
				return err
			}
			k.alone += send[i]
			k.sending = max(k.sending-send[i], 0)
			k.put(&es[i])
			back = append(back, keys[i])
		}
		return nil
	})
	return back
}

// countSending counts the attempt m describes in the store, in one update
// that first adds the attempts admitted alone that m claimed. A key's count
// then holds every attempt this instance admitted. The attempt is admitted
// only with room for it on top, and for those that another call is adding
// (m.hold).
func (l *Limiter) countSending(ctx context.Context, m *memoCall, d *Decision) error {
	ks, cs, t := m.keys[:m.n], m.caps[:m.n], &m.t
	if !fixedOnly(cs) {
		return l.countSendingUnits(ctx, m, d)
	}
	err := l.h.Update(ctx, ks, func(now time.Time, es []store.Entry) error {
		*t = store.Tally{Now: now, Limiting: -1}
		live := [MaxKeys]bool{}
		for i := range es {
			e := &es[i]
			live[i] = e.Live()
			if live[i] {
				c, err := store.ParseCount(e.Value)
				if err != nil {
					return err
				}
				t.Counts[i], t.ExpiresAt[i] = c, e.ExpiresAt
			} else if m.send[i] > 0 { // a whole window: see store.Store.Reserved
				t.ExpiresAt[i] = now.Add(cs[i].Window)
			}
			t.Counts[i] += m.send[i]
			// what another call is adding may not be in the store yet:
			// room is kept for it
			if t.Limiting < 0 && t.Counts[i]+m.kept(i, e)+m.cost > int64(cs[i].Limit) {
				t.Limiting = i
			}
		}
		t.Allowed = t.Limiting < 0
		for i := range es {
			if t.Allowed {
				t.Counts[i] += m.cost
				if !live[i] && m.send[i] == 0 {
					t.ExpiresAt[i] = now.Add(cs[i].Window)
				}
			}
			if t.Counts[i] > 0 {
				es[i].Value, es[i].ExpiresAt = value.AppendCount(es[i].Value[:0], t.Counts[i]), t.ExpiresAt[i]
			}
		}
		return nil
	})
	return l.sent(ctx, m, d, err)
}

// countSendingUnits is countSending for budgets not all fixed windows. The
// attempts admitted alone that m claimed are added to each key's units
// (Budget.AddUnits). Then the attempt is charged, with room kept for
// m.hold.
func (l *Limiter) countSendingUnits(ctx context.Context, m *memoCall, d *Decision) error {
	ks, cs, t := m.keys[:m.n], m.caps[:m.n], &m.t
	err := l.h.Update(ctx, ks, func(now time.Time, es []store.Entry) error {
		*t = store.Tally{Now: now, Limiting: -1}
		for i := range es {
			e := &es[i]
			keep := m.kept(i, e) // as the entry was before this call
			if m.send[i] > 0 {
				if err := cs[i].AddUnits(now, e, m.send[i]); err != nil {
					return err
				}
			}
			c, _, err := cs[i].Units(now, *e)
			if err != nil {
				return err
			}
			if t.Limiting < 0 && c+keep+m.cost > cs[i].Capacity() {
				t.Limiting = i
			}
		}
		t.Allowed = t.Limiting < 0
		for i := range es {
			if t.Allowed {
				if err := cs[i].AddUnits(now, &es[i], m.cost); err != nil {
					return err
				}
			}
			c, next, err := cs[i].Units(now, es[i])
			if err != nil {
				return err
			}
			t.Counts[i], t.ExpiresAt[i] = c, next
		}
		return nil
	})
	return l.sent(ctx, m, d, err)
}

// sent finishes a countSending that the store answered with err: the
// claims of m go back when it failed; otherwise d is decided on m's tally
// and memory takes the store's counts.
func (l *Limiter) sent(ctx context.Context, m *memoCall, d *Decision, err error) error {
	if err != nil {
		l.unclaim(ctx, m.keys[:m.n], m.send[:m.n])
		l.landed(ctx, m)
		return err
	}
	decide(&m.t, m.keys[:m.n], m.caps[:m.n], false, d)
	l.settle(ctx, m)
	return nil
}

// settle records in memory the store's counts of a countSending, t, which
// hold the attempts admitted alone that m sent.
func (l *Limiter) settle(ctx context.Context, m *memoCall) {
	t := &m.t
	l.updateMemory(ctx, m.keys[:m.n], func(now time.Time, es []store.Entry) error {
		for i := range es {
			if t.ExpiresAt[i].IsZero() {
				unfly(&es[i], m.flown())
				continue
			}
			k, err := knownOf(&es[i])
			if err != nil || !es[i].Live() {
				k = known{}
			}
			k.flying = max(k.flying-m.flown(), 0)
			k.see(t.Counts[i], t.ExpiresAt[i].UnixMilli(), m.asks>>i&1 == 1)
			if t.Allowed {
				k.mine += m.cost
			}
			k.sending = max(k.sending-m.send[i], 0)
			k.asked = now.UnixMilli()
			exp := now.Add(t.ExpiresAt[i].Sub(t.Now))
			if c := m.caps[i]; c.Algorithm != store.FixedWindow {
				k.next, exp = exp.UnixMilli(), now.Add(c.Span())
			}
			if !es[i].Live() || exp.After(es[i].ExpiresAt) {
				es[i].ExpiresAt = exp
			}
			k.put(&es[i])
		}
		return nil
	})
}

// remember records what a store's tally t said of keys: each key's count,
// asked about now, with its window as the store has it. Attempts this
// instance admitted alone and has not yet added to the store still count,
// until the later of the two windows ends. When sent is the call that got
// t, memory no longer counts it as unanswered (see memoCall.flew). n is
// the attempt's cost, which t admitted or not.
func (l *Limiter) remember(ctx context.Context, keys []string, caps []store.Budget, n int64, tally *store.Tally, sent *memoCall) {
	m := &memoCall{n: len(keys), t: *tally}
	copy(m.keys[:], keys)
	copy(m.caps[:], caps)
	var flew int64
	var asks uint8
	if sent != nil {
		flew, asks = sent.flown(), sent.asks
	}
	ks, cs, t := m.keys[:m.n], m.caps[:m.n], &m.t
	// An attempt vouched for keeps its counts in the room kept for it: an
	// owner's keys forgotten under a flood would refuse him while the
	// store is down (see forgotten).
	roomy := vouched(ctx) || l.localB.Entries() < l.room/4*memoRoom
	// What memory cannot hold is asked of the store again.
	l.updateMemory(ctx, ks, func(now time.Time, es []store.Entry) error {
		for i := range es {
			unfly(&es[i], flew)
			if t.ExpiresAt[i].IsZero() {
				continue
			}
			exp, next := now.Add(t.ExpiresAt[i].Sub(t.Now)), int64(0)
			if cs[i].Algorithm != store.FixedWindow {
				// Counting alone never refills: memory keeps the count
				// until every unit it holds has dropped.
				next, exp = exp.UnixMilli(), now.Add(cs[i].Span())
			}
			if !es[i].Live() && !roomy && t.Counts[i] < cs[i].Capacity() {
				if t.Counts[i] > 0 {
					l.forgot.add(ks[i], exp)
				}
				continue
			}
			setKnown(&es[i], now, t.Counts[i], t.ExpiresAt[i].UnixMilli(), asks>>i&1 == 1, admitted(t, n), exp)
			if next != 0 {
				setNext(&es[i], next)
			}
		}
		return nil
	})
}

// readCounts fills t from the live counters in es, as of now, without
// changing them. It fills each key's count and window end, and the first
// key without room for n more attempts under its budget in caps. It returns
// the keys with no live counter, bit i for es[i].
func readCounts(now time.Time, es []store.Entry, caps []store.Budget, n int64, t *store.Tally) (fresh uint8, err error) {
	*t = store.Tally{Now: now, Limiting: -1}
	for i := range es {
		if !es[i].Live() {
			fresh |= 1 << i
			continue
		}
		c, next, err := caps[i].Units(now, es[i])
		if err != nil {
			return fresh, err
		}
		if caps[i].Algorithm == store.FixedWindow {
			next = es[i].ExpiresAt
		}
		t.Counts[i], t.ExpiresAt[i] = c, next
		if t.Limiting < 0 && c+n > caps[i].Capacity() {
			t.Limiting = i
		}
	}
	t.Allowed = t.Limiting < 0
	return fresh, nil
}

// memoCall holds what an apply needs, off the caller's stack: an apply
// escapes, and with it everything it holds.
type memoCall struct {
	n    int
	cost int64 // the attempt's, counted on each key
	keys [MaxKeys]string
	caps [MaxKeys]store.Budget
	t    store.Tally
	// send holds, for each key, the attempts admitted alone that this call
	// claimed to add to the store. hold holds those that another call or
	// another instance may still add, which the store does not hold yet.
	// young holds more of them, kept only in an entry new since since
	// (see newEntry). sending is set when any key has any.
	send, hold, young [MaxKeys]int64
	since             time.Time
	sending           bool
	// flew is set when memory counts this call's cost among the attempts
	// sent to the store and not answered (known.flying), until landed or
	// remember.
	flew bool
	// asks has bit i set when this call asks the store again about key i,
	// memory having shown it spent for AskAgain. Its answer is taken as it
	// is (see known.see).
	asks uint8
}

// flown is what m counts among the attempts sent and not answered: its
// cost when it flew, else 0.
func (m *memoCall) flown() int64 {
	if !m.flew {
		return 0
	}
	return m.cost
}

// updateMemory runs apply on memory's entries for keys. When memory has no
// room for a key apply would add, it runs apply again, leaving such keys
// out. The keys memory holds are so still read and written: an attempt with
// one new key must still see, and settle, what memory holds of its others.
// An attempt not vouched for (see Vouch) adds no key past the room kept for
// those that are. It logs, once a minute, that memory is full.
func (l *Limiter) updateMemory(ctx context.Context, keys []string, apply store.ApplyFunc) error {
	strangers := !vouched(ctx)
	var claimed int64
	full := l.local.Update(ctx, keys, func(now time.Time, es []store.Entry) error {
		if !strangers {
			return apply(now, es)
		}
		var ok bool
		if claimed, ok = l.claimRoom(es); ok {
			return apply(now, es)
		}
		return l.applyHeld(keys, es, now, apply)
	})
	l.adding.Add(-claimed)
	if store.ReasonOf(full) != store.ReasonFull {
		return full
	}
	l.memoFull.Do(func() {
		l.log.Warn("limiter memory full: new keys are asked of the store", "kind", KindMemoryFull, "err", full)
	})
	return l.local.Update(ctx, keys, func(now time.Time, es []store.Entry) error {
		return l.applyHeld(keys, es, now, apply)
	})
}

// claimRoom claims room in memory, within its bound for calls not vouched
// for, for the entries of es it does not hold yet, and reports whether
// there was. The caller gives back what it claimed (l.adding) once its
// update has ended. Counting an attempt's own new keys, and those other
// calls are adding, keeps a flood of attempts of several new keys from
// taking the room kept for attempts vouched for.
func (l *Limiter) claimRoom(es []store.Entry) (claimed int64, ok bool) {
	for i := range es {
		if !es[i].Live() {
			claimed++
		}
	}
	if claimed == 0 {
		return 0, true
	}
	if int64(l.localB.Entries())+l.adding.Add(claimed) > int64(l.room) {
		l.adding.Add(-claimed)
		return 0, false
	}
	return claimed, true
}

// applyHeld runs apply on es, the entries of keys, and then leaves out
// every key memory did not hold. A key left out with a count is recorded
// as forgotten.
func (l *Limiter) applyHeld(keys []string, es []store.Entry, now time.Time, apply store.ApplyFunc) error {
	var held [store.MaxKeys]bool
	for i := range es {
		held[i] = es[i].Live()
	}
	if err := apply(now, es); err != nil {
		return err
	}
	for i := range es {
		if held[i] || es[i].Value == nil {
			continue
		}
		if k, err := knownOf(&es[i]); err == nil && (k.seen > 0 || k.given > 0) {
			l.forgot.add(keys[i], es[i].ExpiresAt)
		}
		es[i].Value = nil
	}
	return nil
}

// unfly takes flew unanswered attempts off what memory holds in e, and
// drops e when nothing else is left of it.
func unfly(e *store.Entry, flew int64) {
	if flew == 0 || !e.Live() {
		return
	}
	k, err := knownOf(e)
	if err != nil {
		return
	}
	k.flying = max(k.flying-flew, 0)
	if k.empty() {
		e.Value = nil
		return
	}
	k.put(e)
}

// setKnown writes a store's count n of a key into what memory holds of it
// in e, as asked about now (see known.see for fresh). The window ends at
// win, in Unix milliseconds on the store's clock, and at exp on memory's.
// Attempts admitted alone and not yet in the store are kept, and so is the
// window they were counted in while it ends later. admitted tells that the
// store admitted for this instance with that count: the attempt's cost, or
// 0.
func setKnown(e *store.Entry, now time.Time, n, win int64, fresh bool, admitted int64, exp time.Time) {
	k, err := knownOf(e)
	if err != nil || !e.Live() {
		k = known{}
	}
	if k.unsent() == 0 && !exp.After(now) {
		e.Value = nil
		return
	}
	k.see(n, win, fresh)
	if win == k.win {
		k.mine += admitted
	}
	k.asked = now.UnixMilli()
	if k.unsent() == 0 || !e.Live() || exp.After(e.ExpiresAt) {
		e.ExpiresAt = exp
	}
	k.put(e)
}

// admitted is what the tally t of an attempt of cost n admitted: n, or 0.
func admitted(t *store.Tally, n int64) int64 {
	if t.Allowed {
		return n
	}
	return 0
}

// reserveOf is the room kept in a memory of n entries for the new keys of
// attempts vouched for (see Vouch): an eighth, and at least 16 entries.
func reserveOf(n int) int {
	return max(n/8, 16)
}

package limiter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gatecount/gatecount/internal/overload"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/value"
)

// errNoShare is why an instance that has not yet counted the instances
// sharing its store admits nothing alone: it cannot tell its share. Such an
// attempt is refused as counted alone (see noRoom).
var errNoShare = errors.New("limiter: this instance has not counted the instances sharing its store yet, so it has no share of any budget")

// known is what a limiter's process memory holds of a key. seen is the
// count the store last told. alone counts the attempts this instance
// admitted alone since, not yet added to the store; sending counts those on
// their way to it. flying counts the attempts it sent to the store that are
// not answered yet. asked is when the store was last asked about the key
// (Unix milliseconds on memory's clock). win is the end of the store's
// window that seen counts in (Unix milliseconds on the store's clock).
//
// given counts every attempt this instance admitted alone in the key's
// window in memory, sent or not, less those given back. Its share is of
// the budget less what others were seen to admit, so sending what it
// admitted never earns it a second share. mine counts the attempts the store admitted for this
// instance in the window ending at win.
//
// next is when the store said a unit of the key next drops (Unix
// milliseconds, memory's clock), for a budget that is not a fixed window; 0
// otherwise. The memory of such a key is kept for the budget's Span, so
// that counting alone never refills.
//
// alg, limit and burst are the budget of the attempts admitted alone, when
// it is not a fixed window (alg 0). The outbox adds them to the store under
// it. windowMs is that budget's window, whatever its algorithm: an entry
// the outbox makes for them opens a whole window.
type known struct {
	seen, alone, asked, sending, flying, win, given, mine, next int64
	alg, limit, windowMs, burst                                 int64
}

// budget is the budget k records of its attempts admitted alone, and
// whether it records one.
func (k known) budget() (store.Budget, bool) {
	if k.alg == 0 {
		return store.Budget{}, false
	}
	return store.Budget{Limit: int(k.limit), Window: time.Duration(k.windowMs) * time.Millisecond,
		Burst: int(k.burst), Algorithm: store.Algorithm(k.alg)}, true
}

// setBudget records b in k: its window, and the rest when it is not a
// fixed window.
func (k *known) setBudget(b store.Budget) {
	k.windowMs = b.Window.Milliseconds()
	if b.Algorithm != store.FixedWindow {
		k.alg, k.limit, k.burst = int64(b.Algorithm), int64(b.Limit), int64(b.Burst)
	}
}

// see records the store's count c of the key in its window ending at win
// (Unix milliseconds, the store's clock). Within one window a count only
// grows but for refunds and resets, and answers reach memory in any order,
// so the higher is kept. A later window replaces an earlier one, and an
// answer of an earlier window is passed over. An answer to asking again
// (fresh) is taken as it is, so that a refund or reset made through another
// instance is seen.
func (k *known) see(c, win int64, fresh bool) {
	switch {
	case fresh || win > k.win:
		if win != k.win {
			k.mine = 0
		}
		k.seen, k.win = c, win
	case win == k.win:
		k.seen = max(k.seen, c)
	}
}

// empty reports whether k holds nothing but the time it was asked.
func (k known) empty() bool { return k.seen == 0 && k.unsent() == 0 && k.flying == 0 }

// count is the key's count as this instance knows it.
func (k known) count() int64 { return k.seen + k.alone + k.sending }

// unsent is what this instance admitted alone that the store has not
// confirmed.
func (k known) unsent() int64 { return k.alone + k.sending }

// claim moves the attempts admitted alone of k to sending, and returns
// how many: they go to the store with a call, which settles them (sent,
// or unclaim).
func (k *known) claim() int64 {
	n := k.alone
	k.alone, k.sending = 0, k.sending+n
	return n
}

// sent records that the store took n attempts of sending, and counted c in
// its window ending at win.
func (k *known) sent(n, c, win int64) {
	k.see(c, win, false)
	k.sending = max(k.sending-n, 0)
}

// knownOf reads what memory holds in e; a key with no live entry is the
// zero known.
func knownOf(e *store.Entry) (known, error) {
	if !e.Live() {
		return known{}, nil
	}
	v := e.Value
	if len(v) < 17 || v[0] != '[' || v[len(v)-1] != ']' {
		return known{}, fmt.Errorf("limiter: memory holds %q, not a known count", v)
	}
	var k known
	fields := k.fields()
	v = v[1 : len(v)-1]
	for i, f := range fields {
		end := len(v)
		if i < len(fields)-1 {
			end = indexComma(v)
		}
		n, ok := value.CountOf(v[:max(end, 0)])
		if end < 0 || !ok {
			return known{}, fmt.Errorf("limiter: memory holds a malformed known count")
		}
		*f = n
		if i < len(fields)-1 {
			v = v[end+1:]
		}
	}
	return k, nil
}

func indexComma(v []byte) int {
	for i, c := range v {
		if c == ',' {
			return i
		}
	}
	return -1
}

// put writes k into e, reusing its buffer.
func (k known) put(e *store.Entry) {
	v, sep := e.Value[:0], byte('[')
	for _, f := range k.fields() {
		v = append(v, sep)
		v = strconv.AppendInt(v, *f, 10)
		sep = ','
	}
	e.Value = append(v, ']')
}

// fields are k's numbers in the order memory keeps them.
func (k *known) fields() [13]*int64 {
	return [13]*int64{&k.seen, &k.alone, &k.asked, &k.sending, &k.flying, &k.win, &k.given, &k.mine, &k.next,
		&k.alg, &k.limit, &k.windowMs, &k.burst}
}

// setNext records in memory's entry e when a unit of the key next drops.
func setNext(e *store.Entry, next int64) {
	if k, err := knownOf(e); err == nil && e.Live() {
		k.next = next
		k.put(e)
	}
}

// countAlone counts an attempt of cost n on keys in process memory, while
// the store cannot count them. Each key admits at most this instance's
// share (see store.Store.Share) of what was left of its budget when the
// store last told its count. For a key this instance never saw, that is the
// budget itself. A key whose count memory had no room to keep admits
// nothing (see forgotten). Before this instance has counted the instances
// sharing its store, no key admits anything. Nor does a key admit more,
// with what the store admitted for this instance in the window, than its
// share of the whole budget. The others' views of what was left may be as
// old as its own. The two bounds keep the fleet within the budget while no
// instance admitted through the store more than its share after another
// last saw the key (store/DESIGN.md, "What stale views can still pass").
// The attempts this instance has sent to the store and not yet heard back
// of count as admitted. What it admits is added to the store once the
// store answers again (see flushAlone). The tally's times are on memory's
// clock.
func (l *Limiter) countAlone(ctx context.Context, keys []string, caps []store.Budget, n int64) (store.Tally, error) {
	m := &memoCall{n: len(keys), cost: n}
	copy(m.keys[:], keys)
	copy(m.caps[:], caps)
	ks, cs, t := m.keys[:m.n], m.caps[:m.n], &m.t
	s := l.h.Store()
	if s.Members() == 0 {
		return store.Tally{}, errNoShare
	}
	strangers := !vouched(ctx)
	var claimed int64
	err := l.local.Update(ctx, ks, func(now time.Time, es []store.Entry) error {
		*t = store.Tally{Now: now, Limiting: -1}
		if strangers {
			var ok bool
			if claimed, ok = l.claimRoom(es); !ok {
				return store.ErrFull // the rest is kept for attempts vouched for
			}
		}
		var ks [MaxKeys]known
		for i := range es {
			k, err := knownOf(&es[i])
			if err != nil {
				return err
			}
			ks[i] = k
			t.Counts[i] = k.count()
			t.ExpiresAt[i] = es[i].ExpiresAt
			if !es[i].Live() { // a refusal's Retry-After: the window it would open
				t.ExpiresAt[i] = now.Add(cs[i].Window)
			}
			// What others were seen to admit: the store's count less what
			// this instance sent of its own admitted alone.
			others := k.seen - (k.given - k.unsent())
			left := cs[i].Capacity() - max(others, 0)
			spent := max(k.given, k.unsent()) + k.flying + m.cost
			switch {
			case t.Limiting >= 0:
			case !es[i].Live() && l.forgot.has(m.keys[i], now), // not a key it never saw
				spent > s.Share(m.keys[i], left), spent+k.mine > s.Share(m.keys[i], cs[i].Capacity()):
				t.Limiting = i
			}
		}
		if t.Allowed = t.Limiting < 0; !t.Allowed {
			return nil
		}
		for i := range es {
			k := ks[i]
			k.alone += m.cost
			k.given += m.cost
			k.setBudget(cs[i])
			es[i].ExpiresAt = t.ExpiresAt[i]
			k.put(&es[i])
			t.Counts[i] = k.count()
		}
		return nil
	})
	l.adding.Add(-claimed)
	if err != nil {
		return store.Tally{}, err
	}
	if t.Allowed {
		l.out.admitted(l, ks)
	}
	return *t, nil
}

// flushAlone adds to the store, in one update, what this instance
// admitted alone of keys (at most store.MaxKeys of them), and returns those
// that have nothing left to add. It returns the store's error when the
// store could not take them. A full store still takes the keys it holds.
// Those it has no room for are returned as parked: their attempts stay
// in memory (see outbox.parked). With heldOnly, no key is created, and so
// none needs room. Once in the store, a key's memory is dropped when memory is three
// quarters full, as remember would not keep it.
func (l *Limiter) flushAlone(ctx context.Context, keys []string, heldOnly bool) (done, parked []string, err error) {
	m := &struct {
		send [store.MaxKeys]int64
		left [store.MaxKeys]time.Duration
		win  [store.MaxKeys]time.Duration // the budget's window, for a new entry
		caps [store.MaxKeys]store.Budget  // of keys not counted by fixed windows
	}{}
	var busy [store.MaxKeys]bool
	err = l.local.Update(ctx, keys, func(now time.Time, es []store.Entry) error {
		for i := range es {
			k, err := knownOf(&es[i])
			if err != nil {
				return err
			}
			if es[i].Live() && k.alone > 0 {
				m.caps[i], _ = k.budget()
				m.send[i], m.left[i] = k.claim(), es[i].ExpiresAt.Sub(now)
				m.win[i] = max(time.Duration(k.windowMs)*time.Millisecond, m.left[i])
				if !l.h.Shared() {
					// No other instance keeps room for this one's share: the
					// entry ends with the window the attempts were counted in.
					m.win[i] = m.left[i]
				}
				k.put(&es[i])
			} else if es[i].Live() && k.sending > 0 {
				busy[i] = true // another call sends them: not done until it lands
			}
		}
		return nil
	})
	if err != nil {
		return keys, nil, nil // not ours to add: memory holds something else
	}
	var sub []string
	var idx []int // of each of sub in keys
	for i, k := range keys {
		if busy[i] {
			continue
		}
		if m.send[i] <= 0 || m.left[i] <= 0 {
			done = append(done, k)
			continue
		}
		sub, idx = append(sub, k), append(idx, i)
	}
	if len(sub) == 0 {
		return done, nil, nil
	}
	counts := make([]int64, len(sub)) // the store's counts once the keys' alone attempts are in
	wins := make([]int64, len(sub))   // and their windows' ends
	absent := make([]bool, len(sub))  // the store has no entry to add to, and heldOnly
	add := func(now time.Time, es []store.Entry) error {
		for j := range es {
			e := &es[j]
			if absent[j] = heldOnly && !e.Live(); absent[j] {
				continue
			}
			if b := m.caps[idx[j]]; b.Algorithm != store.FixedWindow {
				if err := b.AddUnits(now, e, m.send[idx[j]]); err != nil {
					return err
				}
				c, next, err := b.Units(now, *e)
				if err != nil {
					return err
				}
				counts[j], wins[j] = c, next.UnixMilli()
				continue
			}
			counts[j] = m.send[idx[j]]
			if e.Live() {
				c, err := store.ParseCount(e.Value)
				if err != nil {
					return err
				}
				counts[j] += c
			} else { // a whole window from now: see store.Store.Reserved
				e.ExpiresAt = now.Add(m.win[idx[j]])
			}
			e.Value = value.AppendCount(e.Value[:0], counts[j])
			wins[j] = e.ExpiresAt.UnixMilli()
		}
		return nil
	}
	err = l.h.Update(ctx, sub, add)
	if !heldOnly && store.ReasonOf(err) == store.ReasonFull {
		heldOnly = true // no room for some: the others still go in
		err = l.h.Update(ctx, sub, add)
	}
	if err != nil {
		l.unclaim(ctx, keys, m.send[:len(keys)])
		if errors.Is(err, store.ErrUnavailable) {
			return done, nil, err
		}
		return keys, nil, err // not counts: nothing this limiter can add to
	}
	var back [store.MaxKeys]int64 // what goes back to memory unsent, of each of parked
	for j := range sub {
		if absent[j] {
			back[len(parked)] = m.send[idx[j]]
			parked = append(parked, sub[j])
		}
	}
	if len(parked) > 0 { // the caller keeps them: not queued again
		l.restore(ctx, parked, back[:len(parked)])
	}
	roomy := l.localB.Entries() < l.room/4*memoRoom
	l.local.Update(ctx, sub, func(now time.Time, es []store.Entry) error {
		for j := range es {
			if absent[j] {
				continue
			}
			k, err := knownOf(&es[j])
			if err != nil || !es[j].Live() {
				done = append(done, sub[j])
				continue
			}
			k.sent(m.send[idx[j]], counts[j], wins[j])
			switch {
			case k.unsent() > 0: // admitted meanwhile: sent next round
				k.put(&es[j])
			case roomy:
				k.put(&es[j])
				done = append(done, sub[j])
			default:
				l.forgot.add(sub[j], es[j].ExpiresAt)
				es[j].Value = nil
				done = append(done, sub[j])
			}
		}
		return nil
	})
	return done, parked, nil
}

// Credit gives back, in one store update, the attempt d counted on the keys
// at the indexes refund. As [Limiter.Refund] does, it gives back only in
// the window d counted in. It forgets the count of each key of clear, as
// [Limiter.Reset] does. What this instance remembers of them changes at
// once. Credit never waits for a busy store. A credit the store cannot take
// at once (no free slot, the store unavailable, or ctx ended) is kept. It
// is tried again in the background until it lands or until the latest
// window of d has ended. Credit then returns nil. It returns an error for a
// decision that counted nothing to give back, or when too many credits
// already wait.
func (l *Limiter) Credit(ctx context.Context, d Decision, refund []int, clear ...string) error {
	if !d.Allowed || (d.Unavailable && !d.Local) || d.n == 0 {
		return ErrNotRefundable
	}
	c := credit{until: time.Now(), n: max(int64(d.Cost), 1)}
	for _, i := range refund {
		if i < 0 || i >= int(d.n) {
			continue
		}
		key := d.keys[i]
		exp := d.expires[i]
		if d.inMemory>>i&1 == 1 { // counted alone
			if l.lowerAlone(ctx, key, c.n) {
				continue // before it went to the store
			}
			exp = anyWindow // in the store already, in a window on its clock
		}
		c.keys = append(c.keys, key)
		c.expires = append(c.expires, exp)
		c.addBudget(l.budgetOf(&d, i))
	}
	for _, key := range clear {
		c.keys = append(c.keys, key)
		c.expires = append(c.expires, 0)
		c.addBudget(store.Budget{})
	}
	for i := range d.n {
		if exp := time.UnixMilli(d.expires[i]); exp.After(c.until) {
			c.until = exp
		}
	}
	if len(c.keys) == 0 {
		return nil
	}
	if len(c.keys) > store.MaxKeys {
		return fmt.Errorf("%w: limiter %q: credit of %d keys, want at most %d", ErrInvalidKeys, l.name, len(c.keys), store.MaxKeys)
	}
	for i, key := range c.keys {
		if l.local != nil && c.expires[i] != anyWindow {
			l.lower(ctx, key, c.expires[i] == 0, c.n)
		}
	}
	// A credit is owed: the outbox waits for the store however busy, but
	// the caller (a request, whose answer and a server's shutdown wait
	// for it) does not. An attempt the store refuses meanwhile by one of
	// its keys waits for it (landOwed): it ends once the credit has
	// landed or is kept.
	defer l.out.landing(c.keys)()
	err := l.land(overload.NoWait(ctx), &c)
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, store.ErrUnavailable) && ctx.Err() == nil:
		return fmt.Errorf("limiter %q: credit: %w", l.name, err)
	}
	return l.out.retry(l, c)
}

// credit is a Credit's store update. Each key with a window end (Unix
// milliseconds) gives back n attempts in that window. Each with anyWindow
// gives back n attempts in the window it has. Each with 0 is cleared.
type credit struct {
	keys    []string
	expires []int64
	n       int64     // the cost of the decision credited
	until   time.Time // after it, the credit is dropped
	// caps are the keys' budgets, the zero Budget for a fixed window; nil
	// when all are. A key of another algorithm gives back n units
	// (Budget.TakeUnits) whatever its state's expiry.
	caps []store.Budget
}

// addBudget records b as the budget of c's last key.
func (c *credit) addBudget(b store.Budget) {
	switch {
	case b.Algorithm != store.FixedWindow && c.caps == nil:
		c.caps = make([]store.Budget, len(c.keys)-1, len(c.keys)+MaxKeys)
		fallthrough
	case c.caps != nil:
		c.caps = append(c.caps, b)
	}
}

// land runs c in the store.
func (l *Limiter) land(ctx context.Context, c *credit) error {
	return l.h.Update(ctx, c.keys, func(now time.Time, es []store.Entry) error {
		for i := range es {
			e := &es[i]
			var b store.Budget
			if c.caps != nil {
				b = c.caps[i]
			}
			switch {
			case c.expires[i] == 0:
				e.Value = nil
			case b.Algorithm != store.FixedWindow:
				if err := b.TakeUnits(now, e, max(c.n, 1)); err != nil {
					return err
				}
			case !e.Live() || c.expires[i] != anyWindow && e.ExpiresAt.UnixMilli() != c.expires[i]:
			default:
				n, err := store.ParseCount(e.Value)
				if err != nil {
					return err
				}
				if n > 0 {
					e.Value = value.AppendCount(e.Value[:0], max(n-max(c.n, 1), 0))
				}
			}
		}
		return nil
	})
}

// budgetOf is the budget key i of d was counted under.
func (l *Limiter) budgetOf(d *Decision, i int) store.Budget {
	if d.budgets != nil {
		return d.budgets[i]
	}
	return l.caps[i]
}

// anyWindow is the window end of a credit's key that gives back one attempt
// in whatever window the store has. Such an attempt was counted alone, then
// added to the store, whose clock keeps its window.
const anyWindow = -1

// lowerAlone gives back n attempts of key that this instance admitted
// alone: they no longer spend its share. It reports whether they were
// taken off those not yet sent to the store. Otherwise they are on their
// way to it, or in it, and the caller's credit follows them: an attempt's
// cost is sent to the store whole, never in part.
func (l *Limiter) lowerAlone(ctx context.Context, key string, n int64) bool {
	took := false
	l.local.Update(ctx, []string{key}, func(_ time.Time, es []store.Entry) error {
		k, err := knownOf(&es[0])
		if err != nil || !es[0].Live() {
			return err
		}
		if took = k.alone >= n; took {
			k.alone -= n
		}
		k.given = max(k.given-n, 0)
		k.put(&es[0])
		return nil
	})
	return took
}

// lower takes n attempts off what memory holds of key, or forgets it
// when clear: the attempts admitted alone first, then the store's count.
func (l *Limiter) lower(ctx context.Context, key string, clear bool, n int64) {
	l.local.Update(ctx, []string{key}, func(_ time.Time, es []store.Entry) error {
		e := &es[0]
		k, err := knownOf(e)
		switch {
		case err != nil || !e.Live():
			return err
		case clear:
			e.Value = nil
			return nil
		default:
			took := min(k.alone, n)
			k.alone -= took
			k.seen = max(k.seen-(n-took), 0)
		}
		k.asked = 0
		k.put(e)
		return nil
	})
}

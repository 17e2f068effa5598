// Package degraded decides the attempts of a limiter whose store cannot
// answer. Its rules are in DESIGN.md. With the store answering, every
// attempt is counted there, and a busy store is waited for. A key a full
// store has no room for is held within a share. A store out of reach lets
// a life old enough admit alone within its share, written back once the
// store answers.
package degraded

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gatecount/gatecount/store"
)

// Counter is the store as an attempt sees it: [store.Handle] is one.
type Counter interface {
	Updater
	CountInto(ctx context.Context, keys []string, caps []store.Budget, n int64, t *store.Tally) error
}

// Outcome is how an attempt was decided.
type Outcome uint8

// The outcomes of Attempt.
const (
	// Counted: the store counted the attempt; the Tally is its answer.
	Counted Outcome = iota + 1
	// Alone: counted by this life alone, the store out of reach; the Tally
	// says whether it was admitted.
	Alone
	// NoRoom: refused, the store full or this life's memory full.
	NoRoom
	// Down: the store is out of reach and Options.Alone is not set.
	Down
)

// Options configure a Path.
type Options struct {
	// Fleet is this life's place in the registry; nil counts nothing
	// alone.
	Fleet *Fleet
	// Alone lets the path count alone while the store is out of reach.
	Alone bool
	// MaxKeys bounds the keys remembered, of each kind; 0 means 100,000.
	MaxKeys int
	// Wait is called between tries of a busy store; it returns an error
	// when the attempt should wait no longer. Nil means ctx.Err().
	Wait func(ctx context.Context) error
	// Now is this process's clock; nil means time.Now.
	Now func() time.Time
}

// record is what a life keeps of a key it counted alone: the window it
// counted in, what it admitted alone there, and what the store has not
// taken of it. Times are Unix milliseconds on the store's clock.
type record struct {
	end     int64
	alone   int64
	pending int64
	budget  store.Budget
	held    bool // counted as a key a full store had no room for
}

// seen is what the store last said of a key: its count, until end.
type seen struct {
	count, end int64
}

// Path decides a limiter's attempts through its store, and alone when the
// store is out of reach. It is safe for concurrent use.
type Path struct {
	o Options

	mu     sync.Mutex
	alone  map[string]*record
	seen   map[string]seen
	fullAt time.Time // when the store last had no room for a key, on this process's clock
}

// New returns a Path.
func New(o Options) *Path {
	if o.MaxKeys <= 0 {
		o.MaxKeys = 100_000
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Wait == nil {
		o.Wait = func(ctx context.Context) error { return ctx.Err() }
	}
	return &Path{o: o, alone: map[string]*record{}, seen: map[string]seen{}}
}

// Attempt counts n on each of keys, all or nothing, into t. A busy store
// (overloaded, or a call past its deadline) is tried again until Wait
// says no more. The error is Wait's, or the store's for invalid keys;
// cause is the store's failure when the outcome is not Counted.
func (p *Path) Attempt(ctx context.Context, c Counter, keys []string, caps []store.Budget, n int64, t *store.Tally) (o Outcome, cause, err error) {
	for {
		cause = p.send(ctx, c, keys)
		if plain, _ := p.o.Fleet.making(); cause == nil && plain {
			cause = c.CountInto(ctx, keys, caps, n, t)
		} else if cause == nil {
			cause = c.Update(ctx, keys, func(now time.Time, es []store.Entry) error {
				if err := p.make(now, es, caps); err != nil {
					return err
				}
				return store.ApplyCount(now, es, caps, n, t)
			})
		}
		if cause == nil {
			p.saw(keys, t)
			return Counted, nil, nil
		}
		if store.ReasonOf(cause) == store.ReasonFull && p.o.Alone && len(keys) > 1 {
			var o Outcome
			if o, cause = p.split(ctx, c, keys, caps, n, t); cause == nil {
				return o, store.ErrFull, nil
			}
		}
		switch store.ReasonOf(cause) {
		case 0:
			if errors.Is(cause, errStale) {
				if err := p.o.Wait(ctx); err != nil {
					return 0, cause, err
				}
				continue
			}
			return 0, nil, cause
		case store.ReasonOverloaded, store.ReasonDeadline:
			if err := p.o.Wait(ctx); err != nil {
				return 0, cause, err
			}
		case store.ReasonFull:
			if p.o.Alone && len(keys) == 1 {
				return p.count(keys, caps, n, true, t), cause, nil
			}
			*t = store.Tally{Limiting: -1}
			return NoRoom, cause, nil
		default:
			if !p.o.Alone {
				*t = store.Tally{Limiting: -1}
				return Down, cause, nil
			}
			return p.count(keys, caps, n, false, t), cause, nil
		}
	}
}

// errStale is the error of a count that would make an entry, by a life that
// has not beaten within Fresh. It waits, as for a busy store.
var errStale = errors.New("degraded: no beat within Fresh to make an entry by")

// errProbe ends the Update that tells which keys a full store holds.
var errProbe = errors.New("degraded: probe")

// split decides an attempt a full store has no room for on some of its
// keys: the keys it holds are counted there, the others held alone, all or
// nothing. An error is the store's.
func (p *Path) split(ctx context.Context, c Counter, keys []string, caps []store.Budget, n int64, t *store.Tally) (Outcome, error) {
	var live [store.MaxCountKeys]bool
	err := c.Update(ctx, keys, func(_ time.Time, es []store.Entry) error {
		for i := range es {
			live[i] = es[i].Live()
		}
		return errProbe
	})
	if !errors.Is(err, errProbe) {
		return 0, cmp.Or(err, store.ErrFull)
	}
	var part [2][]int // the indexes of the keys it holds, and of the others
	var pk [2][]string
	var pc [2][]store.Budget
	for i := range keys {
		j := b2i(!live[i])
		part[j], pk[j], pc[j] = append(part[j], i), append(pk[j], keys[i]), append(pc[j], caps[i])
	}
	if len(part[0]) == 0 {
		return p.count(keys, caps, n, true, t), nil
	}
	if len(part[1]) == 0 {
		return 0, store.ErrFull // it has room now: asked again
	}
	var pt [2]store.Tally
	o := p.count(pk[1], pc[1], n, true, &pt[1])
	if o == Alone && pt[1].Allowed {
		o = Counted
		if err := c.CountInto(ctx, pk[0], pc[0], n, &pt[0]); err != nil || !pt[0].Allowed {
			p.giveBack(pk[1], n)
			if err != nil {
				return 0, err
			}
		} else {
			o = Alone
		}
	}
	*t = store.Tally{Now: pt[1].Now, Limiting: -1, Allowed: o == Alone && pt[1].Allowed}
	for j := range part {
		for at, i := range part[j] {
			t.Counts[i], t.ExpiresAt[i] = pt[j].Counts[at], pt[j].ExpiresAt[at]
			if pt[j].Limiting == at && t.Limiting < 0 {
				t.Limiting = i
			}
		}
	}
	return o, nil
}

// giveBack takes back n counted alone on keys.
func (p *Path) giveBack(keys []string, n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range keys {
		if r := p.alone[k]; r != nil {
			r.alone, r.pending = r.alone-n, max(r.pending-n, 0) // what was sent stays sent
		}
	}
}

// make counts as spent, in each entry of es a count would make, what other
// lives holding keys a full store had no room for may have admitted of it.
// A life that may not know of every holder makes none: the store is then
// full to it.
func (p *Path) make(now time.Time, es []store.Entry, caps []store.Budget) error {
	for i := range es {
		if es[i].Live() {
			continue
		}
		if _, ok := p.o.Fleet.making(); !ok {
			return errStale
		}
		if r := p.o.Fleet.room(caps[i].Capacity()); r > 0 {
			var t store.Tally
			if err := store.ApplyCount(now, es[i:i+1], caps[i:i+1], r, &t); err != nil {
				return err
			}
		}
	}
	return nil
}

// storeNow is the store's time as this life last saw it, carried forward
// by this process's clock, in Unix milliseconds; this process's time
// before it has seen the store's.
func (p *Path) storeNow() int64 {
	if t, ok := p.o.Fleet.storeNow(); ok {
		return t.UnixMilli()
	}
	return p.o.Now().UnixMilli()
}

// saw keeps what the store answered of keys.
func (p *Path) saw(keys []string, t *store.Tally) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.seen)+len(keys) > p.o.MaxKeys {
		clear(p.seen) // a bound, not a promise: what is seen only tightens
	}
	for i, k := range keys {
		p.seen[k] = seen{count: t.Counts[i], end: t.ExpiresAt[i].UnixMilli()}
	}
}

// count decides the attempt alone: each key admits n more while what this
// life admitted alone in the key's window stays within its share, and
// what the store last showed plus that within the budget. A key a full
// store has no room for (held) counts within the share of a holder.
func (p *Path) count(keys []string, caps []store.Budget, n int64, held bool, t *store.Tally) Outcome {
	p.mu.Lock()
	defer p.mu.Unlock()
	if held {
		p.fullAt = p.o.Now()
		p.o.Fleet.hold(true)
	}
	now := p.storeNow()
	*t = store.Tally{Now: time.UnixMilli(now), Limiting: -1}
	adding := 0
	for i, k := range keys {
		r := p.alone[k]
		if r != nil && r.end <= now {
			delete(p.alone, k) // its window is over; what it owed with it
			r = nil
		}
		var alone, end int64
		if r != nil {
			alone, end = r.alone, r.end
		} else {
			adding++
		}
		s := p.seen[k]
		if s.end <= now {
			s = seen{}
		}
		if end == 0 {
			end = s.end
		}
		if end == 0 {
			end = now + caps[i].Window.Milliseconds()
		}
		share := p.o.Fleet.share(caps[i].Capacity(), caps[i].Window)
		if held || r != nil && r.held {
			share = p.o.Fleet.holdShare(caps[i].Capacity())
		}
		t.Counts[i], t.ExpiresAt[i] = s.count+alone, time.UnixMilli(end)
		if t.Limiting < 0 && (alone+n > share || s.count+alone+n > caps[i].Capacity()) {
			t.Limiting = i
		}
	}
	if t.Limiting >= 0 {
		return Alone
	}
	if len(p.alone)+adding > p.o.MaxKeys {
		p.sweep(now)
		if len(p.alone)+adding > p.o.MaxKeys {
			return NoRoom
		}
	}
	t.Allowed = true
	for i, k := range keys {
		r := p.alone[k]
		if r == nil {
			r = &record{end: t.ExpiresAt[i].UnixMilli(), budget: caps[i], held: held}
			p.alone[k] = r
		}
		r.alone += n
		r.pending += n
		t.Counts[i] += n
	}
	return Alone
}

// sweep forgets the records whose window is over.
func (p *Path) sweep(now int64) {
	for k, r := range p.alone {
		if r.end <= now {
			delete(p.alone, k)
		}
	}
}

// send writes back what this life admitted alone of keys and the store has
// not taken, before they are counted there.
func (p *Path) send(ctx context.Context, c Updater, keys []string) error {
	p.mu.Lock()
	empty := len(p.alone) == 0
	p.mu.Unlock()
	if empty {
		return nil
	}
	for _, k := range keys {
		if err := p.writeBack(ctx, c, k); err != nil {
			return err
		}
	}
	return nil
}

// Flush writes back everything this life admitted alone that the store
// has not taken. It reports whether the life is clear: it owes nothing,
// and no window it counted alone in is running, so that it may leave the
// registry. The error is the first write-back's.
func (p *Path) Flush(ctx context.Context, c Updater) (clear bool, err error) {
	p.mu.Lock()
	now := p.storeNow()
	p.sweep(now)
	var owed []string
	for k, r := range p.alone {
		if r.pending > 0 {
			owed = append(owed, k)
		}
	}
	p.mu.Unlock()
	for _, k := range owed {
		if e := p.writeBack(ctx, c, k); e != nil && err == nil {
			err = e
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	clear, holding := len(p.alone) == 0, false
	for _, r := range p.alone {
		holding = holding || r.held && r.pending > 0
	}
	if !holding && p.o.Now().Sub(p.fullAt) >= p.o.Fleet.fresh() {
		p.o.Fleet.hold(false)
	}
	return clear && err == nil, err
}

// writeBack adds to key's count in the store what this life admitted alone
// of it and the store has not taken, as far as its budget has room.
func (p *Path) writeBack(ctx context.Context, c Updater, key string) error {
	p.mu.Lock()
	r := p.alone[key]
	if r == nil || r.pending == 0 {
		p.mu.Unlock()
		return nil
	}
	if r.end <= p.storeNow() { // its window is over
		r.pending = 0
		p.mu.Unlock()
		return nil
	}
	owed, b := r.pending, r.budget
	p.mu.Unlock()
	err := c.Update(ctx, []string{key}, func(now time.Time, es []store.Entry) error {
		caps := []store.Budget{b}
		if err := p.make(now, es, caps); err != nil {
			return err
		}
		var t store.Tally
		if err := store.ApplyCount(now, es, caps, min(owed, b.Capacity()), &t); err != nil || t.Allowed {
			return err
		}
		if room := b.Capacity() - t.Counts[0]; room > 0 {
			return store.ApplyCount(now, es, caps, room, &t)
		}
		return nil
	})
	if err != nil {
		return err
	}
	p.mu.Lock()
	r.pending -= owed
	p.mu.Unlock()
	return nil
}

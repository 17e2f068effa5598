package limiter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gatecount/gatecount/internal/overload"
	"github.com/gatecount/gatecount/store"
)

// Bounds of a limiter's outbox.
const (
	// MaxCredits bounds the credits (see [Limiter.Credit]) that wait for the
	// store at once; one more is refused with [ErrOutboxFull].
	MaxCredits = 10000
	// outboxEvery is how often the outbox tries the store again.
	outboxEvery = 250 * time.Millisecond
	// flushBatch bounds the keys one round adds to the store, in updates
	// of store.MaxKeys keys.
	flushBatch = 1024
	// parkedEvery is how often the outbox tries again the keys a full
	// store had no room for.
	parkedEvery = 4 * time.Second
)

// ErrOutboxFull is returned by Credit when [MaxCredits] credits already wait
// for the store.
var ErrOutboxFull = fmt.Errorf("limiter: %d credits already wait for the store", MaxCredits)

// outbox is what a limiter owes its store: the keys with attempts admitted
// alone, and the credits the store could not take. One goroutine, started
// when there is something to send and stopped by Close, tries the store
// every outboxEvery until everything has landed, and at once when a credit
// comes: a credit that lags lets the owner it gives back to be refused.
type outbox struct {
	mu    sync.Mutex
	alone map[string]struct{}
	// parked holds the keys with attempts admitted alone that a full store
	// had no room for. No instance counts them in the store while it stays
	// full. They are tried again every parkedEvery, in case another
	// instance has made an entry for one since: until then, the others
	// keep room for this instance's share in new entries (see
	// store.Store.Parking).
	parked      map[string]struct{}
	parkedTried time.Time // when parked keys were last tried
	credits     []credit
	kick        chan struct{} // a credit came: start a round without waiting for the tick

	// The keys of the credits being landed now (by a round or a Credit
	// call), a channel closed, and made anew, whenever a landing ends, and
	// how many have ended.
	landingNow  map[string]int
	landingDone chan struct{}
	landings    atomic.Uint64
	running     bool
	closed      bool
	stop        chan struct{}
	done        sync.WaitGroup
}

// admitted records that keys have attempts admitted alone.
func (o *outbox) admitted(l *Limiter, keys []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.alone == nil {
		o.alone, o.parked = map[string]struct{}{}, map[string]struct{}{}
	}
	if len(o.alone) == 0 && !o.closed {
		l.h.Store().Owing(true)
	}
	for _, k := range keys {
		o.alone[k] = struct{}{}
	}
	o.start(l)
}

// retry keeps c to be tried again.
func (o *outbox) retry(l *Limiter, c credit) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.credits) >= MaxCredits {
		return fmt.Errorf("limiter %q: %w", l.name, ErrOutboxFull)
	}
	o.credits = append(o.credits, c)
	o.start(l)
	select {
	case o.kick <- struct{}{}:
	default: // a round is due already
	}
	return nil
}

// begin records that credits on keys are being landed, until end. o.mu is
// held.
func (o *outbox) begin(keys []string) {
	if o.landingNow == nil {
		o.landingNow, o.landingDone = map[string]int{}, make(chan struct{})
	}
	for _, k := range keys {
		o.landingNow[k]++
	}
}

// end records that the landing begin recorded has ended: the credits have
// landed, or are kept.
func (o *outbox) end(keys []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, k := range keys {
		if o.landingNow[k]--; o.landingNow[k] <= 0 {
			delete(o.landingNow, k)
		}
	}
	close(o.landingDone)
	o.landingDone = make(chan struct{})
	o.landings.Add(1)
}

// landing records, until the returned func is called, that a caller of
// Credit lands a credit on keys.
func (o *outbox) landing(keys []string) (end func()) {
	o.mu.Lock()
	o.begin(keys)
	o.mu.Unlock()
	return func() { o.end(keys) }
}

// waitLanded waits until no credit on key is being landed, or ctx ends.
func (o *outbox) waitLanded(ctx context.Context, key string) {
	for {
		o.mu.Lock()
		n, done := o.landingNow[key], o.landingDone
		o.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-done:
		case <-ctx.Done():
			return
		}
	}
}

// take removes from the outbox, and returns, the credits that give back
// on key.
func (o *outbox) take(key string) (taken []credit) {
	o.mu.Lock()
	defer o.mu.Unlock()
	kept := o.credits[:0]
	for _, c := range o.credits {
		if slices.Contains(c.keys, key) {
			taken = append(taken, c)
		} else {
			kept = append(kept, c)
		}
	}
	clear(o.credits[len(kept):])
	o.credits = kept
	return taken
}

// landOwed lands now, on ctx, the credits the outbox holds for key, and
// reports whether any landed. An attempt the store refused by key, which
// credits still owe, calls it before it asks the store again: a credit that
// waits for a busy store must not refuse the owner it gives back to. The
// credits that do not land go back to the outbox. When a round or a
// Credit call is landing one, it waits for that to end. It reports
// true too when landings ended since landingsBefore (o.landings before the
// attempt was counted): one may have been key's.
func (l *Limiter) landOwed(ctx context.Context, key string, landingsBefore uint64) bool {
	taken := l.out.take(key)
	l.out.waitLanded(ctx, key)
	landed := l.out.landings.Load() != landingsBefore
	for i := range taken {
		c := &taken[i]
		switch err := l.land(ctx, c); {
		case err == nil:
			landed = true
		case errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil:
			if l.out.retry(l, *c) != nil {
				l.log.Warn("a credit could not be kept", "kind", KindOutbox, "err", err)
			}
		default:
			l.log.Warn("a credit could not be given", "kind", KindOutbox, "err", err)
		}
	}
	return landed
}

// start starts the goroutine, unless it runs or the limiter is closed.
// o.mu is held.
func (o *outbox) start(l *Limiter) {
	if o.running || o.closed {
		return
	}
	if o.stop == nil {
		o.stop, o.kick = make(chan struct{}), make(chan struct{}, 1)
	}
	o.running = true
	o.done.Add(1)
	go l.drain()
}

// close stops the goroutine and waits for it. What was not sent stays
// unsent.
func (o *outbox) close(l *Limiter) {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return
	}
	o.closed = true
	if o.stop != nil {
		close(o.stop)
	}
	o.mu.Unlock()
	o.done.Wait()
	o.mu.Lock()
	if len(o.alone) > 0 { // not sent, and never will be
		l.h.Store().Owing(false)
		clear(o.alone)
	}
	if len(o.parked) > 0 {
		l.h.Store().Parking(false)
		clear(o.parked)
	}
	o.mu.Unlock()
}

// drain tries the store every outboxEvery until the outbox is empty or the
// limiter is closed.
func (l *Limiter) drain() {
	o := &l.out
	defer o.done.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-o.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTicker(outboxEvery)
	defer t.Stop()
	for {
		select {
		case <-o.stop:
			return
		case <-t.C:
		case <-o.kick:
		}
		if l.sendOnce(ctx) {
			o.mu.Lock()
			if len(o.alone)+len(o.parked)+len(o.credits) == 0 {
				o.running = false
				o.mu.Unlock()
				return
			}
			o.mu.Unlock()
		}
	}
}

// sendOnce sends what the outbox holds, up to flushBatch keys and every
// credit, and stops at the first answer that the store is still
// unavailable. It reports whether it got through everything it tried.
func (l *Limiter) sendOnce(ctx context.Context) bool {
	o := &l.out
	o.mu.Lock()
	full := len(o.alone) > flushBatch // more than one round's
	keys := make([]string, 0, min(len(o.alone), flushBatch))
	for k := range o.alone {
		if len(keys) == flushBatch {
			break
		}
		keys = append(keys, k)
	}
	var parked []string // tried again this round
	if now := time.Now(); len(o.parked) > 0 && now.Sub(o.parkedTried) >= parkedEvery {
		o.parkedTried = now
		for k := range o.parked {
			if len(parked) == flushBatch {
				break
			}
			parked = append(parked, k)
		}
	}
	credits := o.credits
	o.credits = nil
	var landing []string // the keys of credits
	for _, c := range credits {
		landing = append(landing, c.keys...)
	}
	if len(landing) > 0 {
		o.begin(landing)
		defer o.end(landing) // after the credits that failed are kept again
	}
	o.mu.Unlock()

	var failed []credit
	ok := true
	now := time.Now()
	for i := range credits {
		c := &credits[i]
		if !ok {
			failed = append(failed, *c)
			continue
		}
		if !now.Before(c.until) {
			l.log.Warn("a credit's window ended before the store took it", "kind", KindOutbox)
			continue
		}
		switch err := l.land(overload.Patient(ctx), c); {
		case err == nil:
		case ctx.Err() != nil:
			failed = append(failed, *c)
		case errors.Is(err, store.ErrUnavailable):
			ok = false
			failed = append(failed, *c)
		default:
			l.log.Warn("a credit could not be given", "kind", KindOutbox, "err", err)
		}
	}
	sent, noRoom, ok := l.flushKeys(ctx, keys, false, ok)
	unparked, _, ok := l.flushKeys(ctx, parked, true, ok) // those still without room stay
	o.mu.Lock()
	o.credits = append(failed, o.credits...)
	owed, parking := len(o.alone) > 0, len(o.parked) > 0
	for _, k := range unparked { // before noRoom: a key may be in both
		delete(o.parked, k)
	}
	for _, k := range sent {
		delete(o.alone, k)
	}
	for _, k := range noRoom {
		delete(o.alone, k)
		o.parked[k] = struct{}{}
	}
	// Parking is said before owing is taken back: the others keep room
	// for the attempts throughout.
	if !parking && len(o.parked) > 0 {
		l.h.Store().Parking(true)
	}
	if owed && len(o.alone) == 0 {
		l.h.Store().Owing(false)
	}
	if parking && len(o.parked) == 0 {
		l.h.Store().Parking(false)
	}
	o.mu.Unlock()
	return ok && !full
}

// flushKeys adds to the store what this instance admitted alone of keys,
// in updates of store.MaxKeys keys, while ok (see flushAlone for heldOnly).
// It returns the keys with nothing left to add, those the store had no
// room for, and false once the store was unavailable.
func (l *Limiter) flushKeys(ctx context.Context, keys []string, heldOnly, ok bool) (done, parked []string, _ bool) {
	for len(keys) > 0 && ok {
		batch := keys[:min(len(keys), store.MaxKeys)]
		keys = keys[len(batch):]
		d, p, err := l.flushAlone(ctx, batch, heldOnly)
		done, parked = append(done, d...), append(parked, p...)
		switch {
		case err == nil:
		case errors.Is(err, store.ErrUnavailable):
			ok = false
		default:
			l.log.Warn("attempts admitted alone could not be added to the store", "kind", KindOutbox, "err", err)
		}
	}
	return done, parked, ok
}

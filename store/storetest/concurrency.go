package storetest

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gatecount/gatecount/store"
)

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

// slowIncr is incr with a yield in the middle, between what it read and
// what it leaves.
func slowIncr(i int) store.ApplyFunc {
	return func(now time.Time, es []store.Entry) error {
		yield(i)
		return incr(now, es)
	}
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

// exactTotal checks that k's counter reached want.
func (r *runner) exactTotal(k string, want int64, what string) error {
	n, err := r.counter(k, "after "+what)
	if err != nil {
		return err
	}
	if n < want {
		return r.failf("%s: total is %d, want %d (%d updates lost)", what, n, want, want-n)
	}
	if n > want {
		return r.failf("%s: total is %d, want %d (%d counted more than once)", what, n, want, n-want)
	}
	return nil
}

// noLostUpdate: 64 goroutines, half on First and half on Second, start at
// once. Each adds one to a counter 20 times, through an apply that yields
// between what it reads and what it leaves. The total is exact. It catches
// an update that is not atomic: one that reads, lets go of the key while
// apply runs, and writes.
func noLostUpdate(r *runner) error {
	const workers, each = 64, 20
	k := r.key("lost")
	err := r.together(workers, each, func(_, i int, h *store.Handle) error {
		if err := r.update(h, []string{k}, slowIncr(i)); err != nil {
			return r.failf("Update on %s adding one under contention: %v", r.hname(h), err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return r.exactTotal(k, workers*each, fmt.Sprintf("%d goroutines added one %d times each, through First and Second", workers, each))
}

// moves runs movers goroutines that move a unit at a time between a and b,
// which hold total between them. They move through two-key updates naming a
// first, that yield between what they read and what they leave. As many
// lookers run beside them, each calling look as often as a mover moves. All
// run on both handles at once. It returns the first failure and checks the
// sum at the end.
func (r *runner) moves(a, b string, movers, each int, look func(h *store.Handle) error) error {
	const total = 100
	if err := r.update(r.p.First, []string{a, b}, func(now time.Time, es []store.Entry) error {
		for i := range es {
			es[i] = store.Entry{Value: []byte(strconv.Itoa(total / 2)), ExpiresAt: now.Add(longTTL)}
		}
		return nil
	}); err != nil {
		return r.failf("Update writing two keys: %v", err)
	}
	var bad atomic.Bool
	err := r.together(2*movers, each, func(w, i int, h *store.Handle) error {
		if bad.Load() {
			return nil
		}
		if w >= movers { // the second half look
			if err := look(h); err != nil {
				bad.Store(true)
				return err
			}
			return nil
		}
		var broken error
		err := r.update(h, []string{a, b}, func(_ time.Time, es []store.Entry) error {
			if broken = r.sum(es, total, "apply of a move", h); broken != nil {
				return broken
			}
			from, to := 0, 1
			if (i+w)%2 == 1 {
				from, to = 1, 0
			}
			x, _ := intOf(es[from])
			y, _ := intOf(es[to])
			if x > 0 {
				x, y = x-1, y+1
			}
			yield(i)
			es[from].Value = strconv.AppendInt(es[from].Value[:0], x, 10)
			es[to].Value = strconv.AppendInt(es[to].Value[:0], y, 10)
			return nil
		})
		if broken != nil {
			bad.Store(true)
			return broken
		}
		if err != nil {
			return r.failf("Update on %s moving a unit: %v", r.hname(h), err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	es, err := r.mustRead(r.p.First, a, b)
	if err != nil {
		return err
	}
	return r.sum(es, total, "Read after the moves", r.p.First)
}

// sum checks that two counters hold total between them.
func (r *runner) sum(es []store.Entry, total int64, how string, h *store.Handle) error {
	x, err := intOf(es[0])
	if err != nil {
		return r.failf("%s on %s, first key: %v", how, r.hname(h), err)
	}
	y, err := intOf(es[1])
	if err != nil {
		return r.failf("%s on %s, second key: %v", how, r.hname(h), err)
	}
	if x+y != total {
		return r.failf("%s on %s saw %d + %d = %d mid-way through two-key updates, want %d",
			how, r.hname(h), x, y, x+y, total)
	}
	return nil
}

// multiKeyAtomic: 8 goroutines move units between two keys through two-key
// updates. 8 more look at both keys through applies that change nothing,
// all on both handles at once. The sum never changes. It catches a
// multi-key update written one key at a time, and one that lets go of some
// keys while apply runs.
func multiKeyAtomic(r *runner) error {
	a, b := r.key("atom-a"), r.key("atom-b")
	return r.moves(a, b, 8, 60, func(h *store.Handle) error {
		var bad error
		if err := r.update(h, []string{a, b}, func(_ time.Time, es []store.Entry) error {
			bad = r.sum(es, 100, "apply that only observes", h)
			return bad
		}); err != nil {
			if bad != nil {
				return bad
			}
			return r.failf("observing Update on %s: %v", r.hname(h), err)
		}
		return nil
	})
}

// readSnapshot: while 8 goroutines move units between two keys through
// two-key updates, 8 more, all on both handles at once, Read both keys in
// one call: the sum never changes. It catches a Read of several keys that
// is not a snapshot (one that reads them one at a time).
func readSnapshot(r *runner) error {
	a, b := r.key("snap-a"), r.key("snap-b")
	return r.moves(a, b, 8, 150, func(h *store.Handle) error {
		es, err := r.mustRead(h, a, b)
		if err != nil {
			return err
		}
		if err := r.sum(es, 100, "Read", h); err != nil {
			return fmt.Errorf("%w: the Read is not a snapshot", err)
		}
		return nil
	})
}

// lockOrder: 16 goroutines on both handles at once add one to two keys
// through two-key updates. Half name the keys in one order and half in the
// other. All of them finish, and both totals are exact. It catches a store
// that takes its keys' locks in the order a call names them, which
// deadlocks two calls naming them in opposite orders. When no update
// finishes for stallLimit, the case reports the deadlock rather than hang,
// leaving the stuck goroutines behind.
func lockOrder(r *runner) error {
	const workers, each = 16, 30
	a, b := r.key("order-a"), r.key("order-b")
	err := r.together(workers, each, func(w, i int, h *store.Handle) error {
		keys, order := []string{a, b}, "one"
		if (w/2)%2 == 1 {
			keys, order = []string{b, a}, "the other"
		}
		if err := r.update(h, keys, slowIncr(i)); err != nil {
			return r.failf("two-key Update on %s naming its keys in %s order, while others name them in the other: %v",
				r.hname(h), order, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	what := fmt.Sprintf("%d goroutines added one to two keys %d times each, naming them in both orders", workers, each)
	if err := r.exactTotal(a, workers*each, what); err != nil {
		return err
	}
	return r.exactTotal(b, workers*each, what)
}

// applyRetriedOnce: however often a store calls apply for one Update,
// exactly one run counts. Each run is given what is stored, not what an
// earlier run left. 16 goroutines on both handles at once add one 20 times
// each, through an apply that yields between what it reads and what it
// leaves. The total is exact. It catches a store that retries apply (an
// optimistic one, on a conflict) and then writes the result of a run other
// than the last. It catches one that gives a retry the entries an earlier
// run changed.
func applyRetriedOnce(r *runner) error {
	const workers, each = 16, 20
	k := r.key("retry")
	var calls atomic.Int64
	err := r.together(workers, each, func(_, i int, h *store.Handle) error {
		if err := r.update(h, []string{k}, func(now time.Time, es []store.Entry) error {
			calls.Add(1)
			yield(i)
			return incr(now, es)
		}); err != nil {
			return r.failf("Update on %s adding one: %v", r.hname(h), err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return r.exactTotal(k, workers*each, fmt.Sprintf("%d Updates each adding one, with apply run %d times", workers*each, calls.Load()))
}

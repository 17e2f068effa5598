package storetest

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/gatecount/gatecount/store"
)

// sweep: Sweep removes expired entries, under every prefix, reports at least
// as many as the case left expired, and keeps every live one. It runs on
// First's Store, which other tests may use and sweep at the same time, so
// its count is checked as a floor; sweep-exact checks it exactly. It
// catches a Sweep that removes live entries, or leaves expired ones
// readable.
func sweep(r *runner) error {
	const short, long = 5, 5
	// Another process may sweep the same store at the same moment and take
	// some of this case's expired entries first: a short count is only a
	// violation when it happens every time.
	const attempts = 3
	var last error
	for a := range attempts {
		var shortKeys, longKeys [2][]string
		for i := range short {
			shortKeys[0] = append(shortKeys[0], r.keyOn(r.p.First, fmt.Sprintf("sw%d-short-%d", a, i)))
			shortKeys[1] = append(shortKeys[1], r.keyOn(r.p.Other, fmt.Sprintf("sw%d-oshort-%d", a, i)))
		}
		for i := range long {
			longKeys[0] = append(longKeys[0], r.keyOn(r.p.First, fmt.Sprintf("sw%d-long-%d", a, i)))
			longKeys[1] = append(longKeys[1], r.keyOn(r.p.Other, fmt.Sprintf("sw%d-olong-%d", a, i)))
		}
		var exp time.Time
		for j, h := range []*store.Handle{r.p.First, r.p.Other} {
			_, e, err := r.put(h, `1`, shortTTL, shortKeys[j]...)
			if err != nil {
				return err
			}
			exp = e
			if _, _, err := r.put(h, `1`, longTTL, longKeys[j]...); err != nil {
				return err
			}
		}
		if _, err := r.waitPast(r.p.First, exp); err != nil {
			return err
		}
		n, err := r.p.First.Store().Sweep(r.ctx)
		if err != nil {
			return r.failf("Sweep: %v", err)
		}
		for j, h := range []*store.Handle{r.p.First, r.p.Other} {
			es, err := r.mustRead(h, longKeys[j]...)
			if err != nil {
				return err
			}
			for i, e := range es {
				if !e.Live() {
					return r.failf("Sweep removed a live entry (key %d of %d expiring in an hour, on %s)", i, long, r.hname(h))
				}
			}
			es, err = r.mustRead(h, shortKeys[j]...)
			if err != nil {
				return err
			}
			for i, e := range es {
				if e.Live() {
					return r.failf("an expired entry (key %d on %s) was read after Sweep", i, r.hname(h))
				}
			}
		}
		if n >= 2*short {
			return nil
		}
		last = r.failf("wrote %d entries that expired (under First's and Other's prefixes); Sweep reported %d removed, want at least %d",
			2*short, n, 2*short)
	}
	return last
}

// sweepExact: on a store of its own (from Pair.NewBounded), Sweep reports
// exactly how many entries it removed. Those are the entries the case left
// to expire under two handles. A second Sweep right after finds none, and
// the live entries stay. It catches a Sweep that over-counts (counting rows
// it looked at, say) and one that does not commit what it removes. It does
// not apply when Pair.SharedSweep is set.
func sweepExact(r *runner) error {
	if r.p.SharedSweep {
		return r.notApplicable("Pair.SharedSweep is set: the store's Sweep also removes entries of other stores")
	}
	const short, long = 6, 4
	h, err := r.bounded(1000)
	if err != nil {
		return err
	}
	s := h.Store()
	defer s.Close()
	h2, err := r.handle(s, "sweep")
	if err != nil {
		return err
	}
	var shortKeys, longKeys []string
	for i := range short {
		shortKeys = append(shortKeys, r.keyOn(h, fmt.Sprintf("sx-short-%d", i)))
	}
	for i := range long {
		longKeys = append(longKeys, r.keyOn(h, fmt.Sprintf("sx-long-%d", i)))
	}
	var exp time.Time
	for _, h := range []*store.Handle{h, h2} {
		_, e, err := r.put(h, `1`, shortTTL, shortKeys...)
		if err != nil {
			return err
		}
		exp = e
		if _, _, err := r.put(h, `1`, longTTL, longKeys...); err != nil {
			return err
		}
	}
	if _, err := r.waitPast(h, exp); err != nil {
		return err
	}
	n, err := s.Sweep(r.ctx)
	if err != nil {
		return r.failf("Sweep: %v", err)
	}
	if n != 2*short {
		return r.failf("a store of its own held %d expired entries (under two handles) and %d live ones; Sweep reported %d removed, want exactly %d",
			2*short, 2*long, n, 2*short)
	}
	if n, err = s.Sweep(r.ctx); err != nil {
		return r.failf("second Sweep: %v", err)
	}
	if n != 0 {
		return r.failf("a second Sweep, right after one that removed %d expired entries, reported %d removed, want 0: the first did not remove what it counted",
			2*short, n)
	}
	for _, h := range []*store.Handle{h, h2} {
		es, err := r.mustRead(h, longKeys...)
		if err != nil {
			return err
		}
		for i, e := range es {
			if !e.Live() {
				return r.failf("Sweep removed a live entry (key %d of %d expiring in an hour)", i, long)
			}
		}
	}
	return nil
}

// goroutineLabel is the profiler label the close case gives the goroutine
// that opens and uses its store, and so every goroutine started from it.
const goroutineLabel = "gatecount-storetest-close"

// closeCase: once a store's Close has returned, none of the goroutines it
// started, while it was opened or while it served calls, is still running
// (the case gives them closeWait to end). It catches a background sweep,
// clock or connection that Close does not stop. The store comes from
// Pair.NewBounded, called on a goroutine with a profiler label of the
// case's own. Every goroutine started from it inherits the label, which
// tells the store's goroutines from those of other tests in the process.
func closeCase(r *runner) error {
	var err error
	pprof.Do(r.ctx, pprof.Labels(goroutineLabel, r.id), func(context.Context) { err = r.useAndClose() })
	if err != nil {
		return err
	}
	limit := time.Now().Add(closeWait)
	for {
		n, stack := labelled(r.id)
		if n == 0 {
			return nil
		}
		if time.Now().After(limit) {
			return r.failf("%d goroutines the store started were still running %v after its Close returned; one of them:\n%s", n, closeWait, stack)
		}
		if err := r.pause(closePoll); err != nil {
			return err
		}
	}
}

// useAndClose opens a store through Pair.NewBounded, calls each of its
// methods, and closes it.
func (r *runner) useAndClose() error {
	h, err := r.bounded(100)
	if err != nil {
		return err
	}
	s := h.Store()
	defer s.Close()
	a, b := r.keyOn(h, "close-a"), r.keyOn(h, "close-b")
	if _, _, err := r.put(h, `1`, longTTL, a, b); err != nil {
		return err
	}
	if err := r.update(h, []string{a}, incr); err != nil {
		return r.failf("Update: %v", err)
	}
	if _, err := r.mustRead(h, a, b); err != nil {
		return err
	}
	if _, err := r.count(h, []string{r.keyOn(h, "close-c")}, []store.Budget{{Limit: 5, Window: time.Minute}}, 1); err != nil {
		return r.failf("Count: %v", err)
	}
	if _, err := s.Sweep(r.ctx); err != nil {
		return r.failf("Sweep: %v", err)
	}
	if err := s.Close(); err != nil {
		return r.failf("Close: %v", err)
	}
	return nil
}

// labelled returns how many goroutines carry the close case's label with
// value id, and the stack of one of them.
func labelled(id string) (int, string) {
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		return 0, ""
	}
	mark := fmt.Sprintf("%q:%q", goroutineLabel, id)
	n, stack := 0, ""
	for _, rec := range strings.Split(buf.String(), "\n\n") {
		count, ours := 0, false
		for _, l := range strings.Split(rec, "\n") {
			if c, _, ok := strings.Cut(l, " @ "); ok && count == 0 {
				count, _ = strconv.Atoi(c)
			}
			if strings.HasPrefix(l, "# labels: ") && strings.Contains(l, mark) {
				ours = true
			}
		}
		if !ours {
			continue
		}
		n += max(count, 1)
		if stack == "" {
			stack = rec
		}
	}
	return n, stack
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatecount/gatecount/store"
)

// boundFleet opens n stores of one fresh secret bounded by max, on pools of
// their own, announcing every announce. When settled, it waits until each
// has counted n members; otherwise the stores are as they start.
func boundFleet(t *testing.T, n, max int, announce time.Duration, settled bool) []*store.Store {
	t.Helper()
	secret := randomSecret()
	o := store.Options{Announce: announce}
	ss := make([]*store.Store, n)
	for i := range ss {
		ss[i] = newStore(t, newPool(t), Options{Secret: secret, MaxEntries: max, CountInterval: time.Hour, Store: o})
		ss[i].Join()
	}
	for i, s := range ss {
		for j := 0; settled && s.Members() != n; j++ {
			if j == 500 {
				t.Fatalf("store %d counts %d members, want %d", i, s.Members(), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return ss
}

// addNew writes count new keys named prefix and a number through h, one
// update each, and returns how many the store took.
func addNew(t *testing.T, h *store.Handle, prefix string, count int) (took int) {
	t.Helper()
	for i := range count {
		err := h.Update(context.Background(), []string{fmt.Sprint(prefix, i)}, func(now time.Time, es []store.Entry) error {
			es[0].Value, es[0].ExpiresAt = []byte("1"), now.Add(time.Hour)
			return nil
		})
		switch {
		case err == nil:
			took++
		case !errors.Is(err, store.ErrFull):
			t.Error(err)
			return took
		}
	}
	return took
}

// countNew counts attempts of three new keys each, named prefix and
// numbers, through h, from 8 goroutines at once, until count keys were
// offered, and returns how many keys the store took.
func countNew(t *testing.T, h *store.Handle, prefix string, count int) int {
	t.Helper()
	var took atomic.Int64
	var wg sync.WaitGroup
	caps := []store.Budget{{Limit: 5, Window: time.Hour}, {Limit: 5, Window: time.Hour}, {Limit: 5, Window: time.Hour}}
	for w := range 8 {
		wg.Go(func() {
			for i := w * 3; i < count; i += 8 * 3 {
				keys := []string{fmt.Sprint(prefix, i), fmt.Sprint(prefix, i+1), fmt.Sprint(prefix, i+2)}
				var tl store.Tally
				err := h.CountInto(context.Background(), keys, caps, 1, &tl)
				switch {
				case err == nil:
					took.Add(3)
				case !errors.Is(err, store.ErrFull):
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return int(took.Load())
}

// Instances adding new keys at once, far below the bound at first, hold
// the store to its bound. Once they have counted one another, each takes
// the others to add as it does, so their estimates leave the margin
// together, not each on its own (three instances). Until then, each
// counts every new key exactly: five that have just started, each taking
// itself for alone, would otherwise add 1,000 uncounted each where 2,000
// fit.
func TestBoundAcrossInstances(t *testing.T) {
	const max = 2000 // a margin of 1,000: an instance alone would add 1,000 uncounted
	for _, tt := range []struct {
		name     string
		n        int
		announce time.Duration
		settled  bool
	}{
		{"counted", 3, 20 * time.Millisecond, true},
		{"starting", 5, time.Hour, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ss := boundFleet(t, tt.n, max, tt.announce, tt.settled)
			var wg sync.WaitGroup
			var mu sync.Mutex
			took := 0
			for _, s := range ss {
				h := newHandle(t, s, "bound")
				wg.Go(func() {
					k := addNew(t, h, "k", max/4)
					k += countNew(t, h, "c", max/2)
					mu.Lock()
					took += k
					mu.Unlock()
				})
			}
			wg.Wait()
			var live int
			err := newPool(t).QueryRow(context.Background(),
				"SELECT count(*) FROM gatecount_entries WHERE fingerprint = $1 AND expires_at > now()", ss[0].Backend().(*Backend).Fingerprint()).Scan(&live)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d instances took %d new keys; %d live of the bound %d", tt.n, took, live, max)
			if live > max {
				t.Fatalf("%d live entries of a bound of %d, added by %d instances at once", live, max, tt.n)
			}
			if took < max-3 { // the fleet's own entry, and an attempt's three keys
				t.Fatalf("the store took %d new keys of %d offered, want about its bound %d: the test tests nothing", took, tt.n*(max/4+max/2), max)
			}
		})
	}
}

// A store an exact count found full refuses new keys without taking the
// bound's lock: a flood of them does not queue behind it, each to count
// the store again only to be refused.
func TestFullRefusesWithoutLock(t *testing.T) {
	const max = 50
	s := newStore(t, newPool(t), Options{Secret: randomSecret(), MaxEntries: max})
	h := newHandle(t, s, "full")
	if took := addNew(t, h, "k", max+1); took != max {
		t.Fatalf("the store took %d new keys, want its bound %d", took, max)
	}
	b := s.Backend().(*Backend)
	ctx := context.Background()
	conn, err := newPool(t).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", b.boundLock); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", b.boundLock)
	for i := range 20 {
		err := h.Update(ctx, []string{fmt.Sprint("more", i)}, func(now time.Time, es []store.Entry) error {
			es[0].Value, es[0].ExpiresAt = []byte("1"), now.Add(time.Hour)
			return nil
		})
		if !errors.Is(err, store.ErrFull) {
			t.Fatalf("new key %d, the store full and its lock held: %v, want %v at once", i, err, store.ErrFull)
		}
	}
}

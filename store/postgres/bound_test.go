package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gatecount/gatecount/store"
)

// boundFleet opens n stores of one fresh secret bounded by max, on pools of
// their own, and waits until each counts n members.
func boundFleet(t *testing.T, n, max int) []*store.Store {
	t.Helper()
	secret := randomSecret()
	o := store.Options{Announce: 20 * time.Millisecond}
	ss := make([]*store.Store, n)
	for i := range ss {
		ss[i] = newStore(t, newPool(t), Options{Secret: secret, MaxEntries: max, CountInterval: time.Hour, Store: o})
		ss[i].Join()
	}
	for i, s := range ss {
		for j := 0; s.Members() != n; j++ {
			if j == 500 {
				t.Fatalf("store %d counts %d members, want %d", i, s.Members(), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return ss
}

// addNew writes count new keys through h, one update each, and returns how
// many the store took.
func addNew(t *testing.T, h *store.Handle, count int) (took int) {
	t.Helper()
	for i := range count {
		err := h.Update(context.Background(), []string{fmt.Sprint("k", i)}, func(now time.Time, es []store.Entry) error {
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

// Three instances adding new keys at once, far below the bound at first,
// hold the store to its bound: each takes the others to add as it does,
// so their estimates leave the margin together, not each on its own.
func TestBoundAcrossInstances(t *testing.T) {
	const n, max = 3, 2000 // a margin of 1,000: each alone would add 1,000 uncounted
	ss := boundFleet(t, n, max)
	var wg sync.WaitGroup
	var mu sync.Mutex
	took := 0
	for _, s := range ss {
		h := newHandle(t, s, "bound")
		wg.Go(func() {
			k := addNew(t, h, max/2)
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
	t.Logf("%d instances took %d new keys; %d live of the bound %d", n, took, live, max)
	if live > max {
		t.Fatalf("%d live entries of a bound of %d, added by %d instances at once", live, max, n)
	}
	if took < max-1 { // the fleet's own entry is the last
		t.Fatalf("the store took %d new keys of %d offered, want the bound %d less the fleet's entry: the test tests nothing", took, n*max/2, max)
	}
}

// A store an exact count found full refuses new keys without taking the
// bound's lock: a flood of them does not queue behind it, each to count
// the store again only to be refused.
func TestFullRefusesWithoutLock(t *testing.T) {
	const max = 50
	s := newStore(t, newPool(t), Options{Secret: randomSecret(), MaxEntries: max})
	h := newHandle(t, s, "full")
	if took := addNew(t, h, max+1); took != max {
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

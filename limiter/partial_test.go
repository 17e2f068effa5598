package limiter_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatecount/gatecount/internal/faultproxy"
	"github.com/gatecount/gatecount/internal/servicetest"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/storekit"
)

// instances starts n limiters named name on one store of kind, each
// instance through a fault proxy of its own, and waits until each counts
// all n. Announcements come every 100 ms. The store holds at most
// maxEntries live entries (0: its default).
func instances(t *testing.T, kind string, n int, b limiter.Budget, maxEntries int) ([]*limiter.Limiter, []*faultproxy.Proxy) {
	t.Helper()
	direct := servicetest.PostgresURL(t)
	if kind == "redis" {
		direct = servicetest.RedisURL(t)
	} else {
		migratePostgres(t, direct)
	}
	secret := make([]byte, 32)
	rand.Read(secret)
	prefix := "fleet-" + hex.EncodeToString(secret[:4]) + ":"
	ls := make([]*limiter.Limiter, n)
	ps := make([]*faultproxy.Proxy, n)
	ss := make([]*store.Store, n)
	for i := range n {
		var through string
		ps[i], through = proxyTo(t, direct, kind)
		s, release, err := storekit.OpenURL(context.Background(), through, storekit.URLOptions{Secret: secret, MaxEntries: maxEntries, Store: store.Options{
			Logger: quiet, Deadline: 500 * time.Millisecond, Announce: 100 * time.Millisecond,
		}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			s.Close()
			if release != nil {
				release()
			}
		})
		ss[i] = s
		h, err := s.Handle(prefix)
		if err != nil {
			t.Fatal(err)
		}
		if ls[i], err = limiter.New(h, limiter.Options{Name: "fleet", Budget: b, Unavailable: limiter.Local, Logger: quiet}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ls[i].Close() })
	}
	for i, s := range ss {
		for j := 0; s.Members() != n; j++ {
			if j == 500 {
				t.Fatalf("instance %d counts %d members, want %d", i, s.Members(), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return ls, ps
}

// A fleet whose instances each last saw a key's count at a different
// point stays within the budget when the store goes away from all of them,
// and within the budget and one instance's share when it goes away from
// one only: attempts go round robin through the store (so that
// each instance's view lags the others'), then the store is cut, and every
// instance keeps attempting, alone or through the store, as fast as it
// can, and goes on once the store is back. Three instances, budget 20, on
// PostgreSQL and on Redis. In the full case, the store has no room for
// new keys, and each attempt has one besides the key under test, as a
// guess has its password: the store counts the key it holds, and memory
// the new one.
func TestFleetWithinBudgetThroughOutage(t *testing.T) {
	t.Parallel() // waits in real time: overlaps the others
	const budget, before, maxEntries = 20, 10, 64
	for _, kind := range []string{"postgres", "redis"} {
		for _, cut := range []string{"all", "one", "all, store full"} {
			t.Run(kind+"/cut "+cut, func(t *testing.T) {
				full := cut == "all, store full"
				ls, ps := instances(t, kind, 3, limiter.Budget{Limit: budget, Window: time.Minute}, map[bool]int{true: maxEntries}[full])
				ctx := context.Background()
				var mu sync.Mutex
				admitted, alone := 0, 0
				count := func(d limiter.Decision, err error) {
					if err != nil {
						t.Error(err)
					}
					mu.Lock()
					defer mu.Unlock()
					if d.Allowed {
						admitted++
						if d.Local {
							alone++
						}
					}
				}
				var fresh atomic.Int64
				keys := func() []string {
					if full {
						return []string{"alice", fmt.Sprint("guess", fresh.Add(1))}
					}
					return []string{"alice"}
				}
				if full { // alice's key is made, then the store filled
					count(ls[0].Attempt(ctx, "alice"))
					fillFleetStore(t, ls[0], maxEntries)
				}
				// An instance whose announcements lag on a loaded machine
				// keeps room for the others' shares, and may refuse: such
				// an attempt is not counted, and is made again.
				for i, tries := admitted, 0; i < before; tries++ {
					d, err := ls[i%len(ls)].Attempt(ctx, keys()...)
					if err != nil || d.Unavailable && !full || !d.Allowed && tries == 200 {
						t.Fatalf("attempt %d through the store: %+v, %v; want admitted by the store", i+1, d, err)
					}
					if !d.Allowed {
						time.Sleep(50 * time.Millisecond)
						continue
					}
					count(d, err)
					i++
				}
				if admitted != before {
					t.Fatalf("%d of the first %d attempts admitted through the store, want all", admitted, before)
				}
				cutOff := ps
				if cut == "one" {
					cutOff = ps[:1]
				}
				for _, p := range cutOff {
					p.Cut()
				}
				each := func(d time.Duration) {
					var wg sync.WaitGroup
					for _, l := range ls {
						wg.Go(func() {
							for end := time.Now().Add(d); time.Now().Before(end); {
								count(l.Attempt(ctx, keys()...))
								time.Sleep(5 * time.Millisecond)
							}
						})
					}
					wg.Wait()
				}
				each(2 * time.Second) // past the wait for the others to keep room, and through it
				for _, p := range cutOff {
					p.Restore()
				}
				each(time.Second)
				t.Logf("%s: %d admitted in all, %d of them alone", cut, admitted, alone)
				// Cut off from a store the others still reach, an instance
				// cannot know what they admitted before they kept room
				// for its share: the fleet may pass the budget by that
				// share, never more (README, "a partial outage").
				limit := budget
				if cut == "one" {
					limit += (budget + len(ls) - 1) / len(ls)
				}
				if admitted > limit {
					t.Errorf("cut %s: the fleet admitted %d (%d alone), want at most %d", cut, admitted, alone, limit)
				}
				if alone == 0 {
					t.Errorf("cut %s: no attempt was counted alone: the test tests nothing", cut)
				}
			})
		}
	}
}

// fillFleetStore fills l's store with the keys of another limiter on it,
// until the store has no room left.
func fillFleetStore(t *testing.T, l *limiter.Limiter, maxEntries int) {
	t.Helper()
	ctx := context.Background()
	h, err := l.Handle().Store().Handle("filler:")
	if err != nil {
		t.Fatal(err)
	}
	filler, err := limiter.New(h, limiter.Options{Name: "filler", Budget: limiter.Budget{Limit: 1, Window: time.Minute}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer filler.Close()
	for i := 0; ; i++ {
		if i == 2*maxEntries {
			t.Fatalf("the store still had room after %d new keys", i)
		}
		d, err := filler.Attempt(ctx, fmt.Sprint("fill", i))
		if err != nil {
			t.Fatal(err)
		}
		if d.Unavailable {
			return
		}
	}
}

package limiter_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gatecount/gatecount/internal/faultproxy"
	"github.com/gatecount/gatecount/internal/servicetest"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/postgres"
	_ "github.com/gatecount/gatecount/store/redis"
)

// Three instances sharing a store, which goes down once they have
// announced themselves, count alone and admit together at most each key's
// budget, for budgets of 1, 5, 20 and 30: each admits its share, and the
// shares sum to the budget. When the store answers again, each key's count
// in it includes every attempt admitted alone. On PostgreSQL and on Redis,
// through a proxy that cuts every connection.
func TestSplitAcrossInstances(t *testing.T) {
	budgets := []int{1, 5, 20, 30}
	for _, kind := range []string{"postgres", "redis"} {
		t.Run(kind, func(t *testing.T) {
			direct := servicetest.PostgresURL(t)
			if kind == "redis" {
				direct = servicetest.RedisURL(t)
			} else {
				migratePostgres(t, direct)
			}
			proxy, through := proxyTo(t, direct, kind)
			secret := make([]byte, 32)
			rand.Read(secret)
			prefix := "split-" + hex.EncodeToString(secret[:4]) + ":"
			open := func(u string) *store.Store {
				s, release, err := store.OpenURL(context.Background(), u, store.URLOptions{Secret: secret, Store: store.Options{
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
				return s
			}
			var ls [3]*limiter.Limiter
			var ss [3]*store.Store
			for i := range ls {
				ss[i] = open(through)
				h, err := ss[i].Handle(prefix)
				if err != nil {
					t.Fatal(err)
				}
				if ls[i], err = limiter.New(h, limiter.Options{Name: "split", Budget: limiter.Budget{Limit: 1, Window: time.Minute}, Unavailable: limiter.Local, Logger: quiet}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ls[i].Close() })
			}
			for i, s := range ss {
				for j := 0; s.Members() != len(ss); j++ {
					if j == 500 {
						t.Fatalf("instance %d counts %d members, want %d", i, s.Members(), len(ss))
					}
					time.Sleep(10 * time.Millisecond)
				}
			}

			proxy.Cut()
			ctx := context.Background()
			admitted := map[int]int{}
			for _, b := range budgets {
				charge := limiter.Charge{Key: fmt.Sprintf("key-%d", b), Budget: limiter.Budget{Limit: b, Window: time.Minute}}
				var each [3]int
				for i, l := range ls {
					for range b + 3 {
						d, err := l.AttemptEach(ctx, charge)
						if err != nil {
							t.Fatal(err)
						}
						if d.Allowed {
							if !d.Local {
								t.Fatalf("budget %d, instance %d: admitted by a store that is down: %+v", b, i, d)
							}
							each[i]++
						}
					}
				}
				admitted[b] = each[0] + each[1] + each[2]
				t.Logf("budget %d: the instances admitted %v alone", b, each)
				if admitted[b] != b {
					t.Errorf("budget %d: three instances counting alone admitted %d in all (%v), want the budget", b, admitted[b], each)
				}
			}

			proxy.Restore()
			for _, b := range budgets {
				key := fmt.Sprintf("key-%d", b)
				var got int64
				for j := 0; ; j++ {
					got = storedCount(t, ls[0].Handle(), key)
					if got == int64(admitted[b]) || j == 100 {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
				if got != int64(admitted[b]) {
					t.Errorf("budget %d: the store counts %d once back, want the %d admitted alone", b, got, admitted[b])
				}
			}
		})
	}
}

// storedCount reads key's count in h's store, 0 when it has none.
func storedCount(t *testing.T, h *store.Handle, key string) int64 {
	t.Helper()
	es, err := h.Read(context.Background(), []string{key})
	if err != nil {
		return -1 // not back yet
	}
	if !es[0].Live() {
		return 0
	}
	n, err := store.ParseCount(es[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// proxyTo starts a fault proxy in front of the server of the URL direct and
// returns it with the URL that reaches the server through it.
func proxyTo(t *testing.T, direct, kind string) (*faultproxy.Proxy, string) {
	t.Helper()
	port := "5432"
	if kind == "redis" {
		port = "6379"
	}
	p, through, err := faultproxy.ForURL(direct, port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, through
}

// migratePostgres migrates the PostgreSQL database at u.
func migratePostgres(t *testing.T, u string) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := postgres.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
}

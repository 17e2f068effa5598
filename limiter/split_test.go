package limiter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gatecount/gatecount/internal/faultproxy"
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
// each instance through a fault proxy of its own, all cut at once.
func TestSplitAcrossInstances(t *testing.T) {
	t.Parallel() // waits in real time: overlaps the others
	budgets := []int{1, 5, 20, 30}
	for _, kind := range []string{"postgres", "redis"} {
		t.Run(kind, func(t *testing.T) {
			ls, proxies := instances(t, kind, 3, limiter.Budget{Limit: 1, Window: time.Minute}, 0)
			for _, p := range proxies {
				p.Cut()
			}
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

			for _, p := range proxies {
				p.Restore()
			}
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

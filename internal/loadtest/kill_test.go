package loadtest

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gatecount/gatecount/internal/servicetest"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/postgres"
)

// Two servers over PostgreSQL under load; one is killed with SIGKILL once
// half of every budget is spent. The other keeps counting from where both
// had got: every 200 the killed server answered is still counted, so the
// two together never admit more than the budget, and the survivor refuses
// past it.
func TestKillMidLoad(t *testing.T) {
	url := servicetest.PostgresURL(t)
	bin := serverBin(t)
	ctx := context.Background()
	budget, ncallers := pick(100, 1000), pick(4, 10)
	callers := NewCallers(ncallers)
	secret := NewSecret()
	cluster, err := StartCluster(ctx, ClusterConfig{
		Bin: bin, Dir: t.TempDir(), Servers: 2, Store: Postgres, DatabaseURL: url,
		Budget: budget, Callers: callers, Secret: secret,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cluster.Close(); err != nil {
			t.Error(err)
		}
	})
	victim, survivor := cluster.Servers[0], cluster.Servers[1]

	var killOnce sync.Once
	killed := make(chan struct{})
	res, err := Run(ctx, LoadConfig{
		Targets:       cluster.URLs(),
		Callers:       callers,
		Clients:       32,
		Requests:      3 * budget * ncallers,
		Duration:      pick(30*time.Second, 45*time.Second),
		ProgressEvery: 10 * time.Millisecond,
		Progress: func(p Progress) {
			if p.Admitted < int64(budget*ncallers/2) {
				return
			}
			killOnce.Do(func() {
				if err := victim.Kill(); err != nil {
					t.Error(err)
				}
				t.Logf("killed %s after %d admitted of %d requests", victim.Name, p.Admitted, p.Requests)
				close(killed)
			})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-killed:
	default:
		t.Fatalf("the run ended before half the budgets were spent: %+v", res.Status)
	}
	for kind, n := range res.Errors {
		switch kind {
		case "connection refused", "connection reset", "connection closed before an answer":
		default:
			t.Errorf("%d errors of kind %q: only the killed server's connections may fail", n, kind)
		}
	}
	t.Logf("statuses %v, errors %v, p99 %v", res.Status, res.Errors, res.Percentile(0.99))

	// The survivor refuses every caller, and the store holds each count at
	// exactly the budget.
	after, err := Run(ctx, LoadConfig{Targets: []string{survivor.URL}, Callers: callers, Clients: 1, Requests: ncallers})
	if err != nil {
		t.Fatal(err)
	}
	if after.Status[http.StatusTooManyRequests] != ncallers {
		t.Errorf("after the kill the survivor answered %v to one request per spent caller, want only 429", after.Status)
	}
	counts := readCounts(t, url, secret, callers)
	for i, c := range res.Callers {
		a, b := c.Admitted[0], c.Admitted[1]
		if a == 0 {
			t.Errorf("%s: the killed server admitted nothing before dying", c.Caller.Name)
		}
		if a+b > budget {
			t.Errorf("%s: %d admitted by the killed server + %d by the survivor = %d, over the budget of %d: the killed server's admissions were lost",
				c.Caller.Name, a, b, a+b, budget)
		}
		if counts[i] != int64(budget) {
			t.Errorf("%s: count in the store %d, want the budget %d", c.Caller.Name, counts[i], budget)
		}
	}
}

// readCounts reads each caller's execute count from PostgreSQL, through a
// store of its own with the servers' secret.
func readCounts(t *testing.T, url, secret string, callers []Caller) []int64 {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s, err := postgres.New(ctx, pool, postgres.Options{Secret: []byte(secret), Store: store.Options{Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h, err := s.Handle("execute:")
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int64, len(callers))
	for i, c := range callers {
		es, err := h.Read(ctx, []string{c.Name})
		if err != nil {
			t.Fatal(err)
		}
		if es[0].Live() {
			if out[i], err = store.ParseCount(es[0].Value); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

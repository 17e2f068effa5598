package middleware_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gatecount/gatecount/internal/servicetest"
	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/postgres"
	_ "github.com/gatecount/gatecount/store/redis"
	"github.com/gatecount/gatecount/store/storekit"
)

var (
	freePlan = limiter.Budget{Limit: 30, Window: time.Minute}
	paidPlan = limiter.Budget{Limit: 60, Window: time.Minute}
)

// planOf is a BudgetFor by the caller's plan: callers named paid-… are on
// the paid plan, others on the free one.
func planOf(r *http.Request) (limiter.Budget, error) {
	id, _ := keyfunc.CallerID(r)
	if strings.HasPrefix(id, "paid-") {
		return paidPlan, nil
	}
	return freePlan, nil
}

// Each caller gets the budget of its plan, and the RateLimit fields show
// it; a cost route charges its cost, shown in the same units.
func TestBudgetForAndCost(t *testing.T) {
	s := memStore(t, nil)
	plans, err := perCaller(handle(t, s, "plan:"), freePlan, middleware.Options{Name: "execute", Logger: quiet, BudgetFor: planOf})
	if err != nil {
		t.Fatal(err)
	}
	defer plans.Close()
	batch, err := perCaller(handle(t, s, "batch:"), limiter.Budget{Limit: 100, Window: time.Minute}, middleware.Options{
		Name: "batch", Logger: quiet,
		Cost: func(*http.Request) (int, error) { return 10, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer batch.Close()
	next := &counting{}
	for _, tc := range []struct {
		h              http.Handler
		caller         string
		policy, fields string
	}{
		{plans.Wrap(next), "free-1", `"execute";q=30;w=60`, `"execute";r=29;t=60`},
		{plans.Wrap(next), "paid-1", `"execute";q=60;w=60`, `"execute";r=59;t=60`},
		{plans.Wrap(next), "free-1", `"execute";q=30;w=60`, `"execute";r=28;t=60`},
		{batch.Wrap(next), "free-1", `"batch";q=100;w=60`, `"batch";r=90;t=60`},
		{batch.Wrap(next), "free-1", `"batch";q=100;w=60`, `"batch";r=80;t=60`},
	} {
		w := httptest.NewRecorder()
		tc.h.ServeHTTP(w, asCaller(tc.caller))
		if w.Code != 200 || w.Header().Get("RateLimit-Policy") != tc.policy || w.Header().Get("RateLimit") != tc.fields {
			t.Errorf("%s: %d, RateLimit-Policy %q, RateLimit %q; want 200, %q, %q", tc.caller, w.Code,
				w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"), tc.policy, tc.fields)
		}
	}
}

// A budget or cost out of range, or an error choosing either, answers 500,
// never reaches the handler, and is logged with KindInvalidCharge.
func TestInvalidCharge(t *testing.T) {
	errPlan := errors.New("no plan")
	for _, tc := range []struct {
		name   string
		budget func(*http.Request) (limiter.Budget, error)
		cost   func(*http.Request) (int, error)
	}{
		{"budget error", func(*http.Request) (limiter.Budget, error) { return limiter.Budget{}, errPlan }, nil},
		{"zero budget", func(*http.Request) (limiter.Budget, error) { return limiter.Budget{}, nil }, nil},
		{"window too short", func(*http.Request) (limiter.Budget, error) {
			return limiter.Budget{Limit: 5, Window: time.Millisecond}, nil
		}, nil},
		{"limit too high", func(*http.Request) (limiter.Budget, error) {
			return limiter.Budget{Limit: limiter.MaxLimit + 1, Window: time.Minute}, nil
		}, nil},
		{"cost error", nil, func(*http.Request) (int, error) { return 0, errPlan }},
		{"cost 0", nil, func(*http.Request) (int, error) { return 0, nil }},
		{"cost negative", nil, func(*http.Request) (int, error) { return -10, nil }},
		{"cost over the limit", nil, func(*http.Request) (int, error) { return 11, nil }},
		{"cost over the chosen limit", planOf, func(*http.Request) (int, error) { return 31, nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			m, err := perCaller(handle(t, memStore(t, nil), "x:"), limiter.Budget{Limit: 10, Window: time.Minute}, middleware.Options{
				Logger: slog.New(slog.NewJSONHandler(&logs, nil)), BudgetFor: tc.budget, Cost: tc.cost,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			next := &counting{}
			w := httptest.NewRecorder()
			m.Wrap(next).ServeHTTP(w, asCaller("free-1"))
			if w.Code != http.StatusInternalServerError || next.runs.Load() != 0 {
				t.Errorf("answered %d, handler ran %d times; want 500 and 0", w.Code, next.runs.Load())
			}
			if !strings.Contains(logs.String(), `"kind":"`+middleware.KindInvalidCharge+`"`) {
				t.Errorf("logs %q lack kind %s", logs.String(), middleware.KindInvalidCharge)
			}
		})
	}
}

// Under CountFailures, a successful request of cost 10 gives back all 10.
func TestCostRefunded(t *testing.T) {
	m, err := perCaller(handle(t, memStore(t, nil), "x:"), limiter.Budget{Limit: 20, Window: time.Minute}, middleware.Options{
		Logger: quiet, CountFailures: true, Cost: func(*http.Request) (int, error) { return 10, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ok, failing := m.Wrap(&counting{}), m.Wrap(&counting{status: 400})
	for i, want := range []int{200, 200, 200, 400, 400, 429} {
		h := ok
		if want != 200 {
			h = failing
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, asCaller("alice"))
		if w.Code != want {
			t.Fatalf("request %d: %d, want %d", i+1, w.Code, want)
		}
	}
}

// exactStores returns, by name, a function opening a fresh store of each
// kind the exactness tests run on: memory, PostgreSQL and Redis.
func exactStores() map[string]func(t *testing.T) *store.Store {
	shared := func(t *testing.T, u string) *store.Store {
		secret := make([]byte, 32)
		rand.Read(secret)
		return openShared(t, u, secret)
	}
	return map[string]func(t *testing.T) *store.Store{
		"memory":   func(t *testing.T) *store.Store { return memStore(t, nil) },
		"postgres": func(t *testing.T) *store.Store { return shared(t, migratedPostgres(t)) },
		"redis":    func(t *testing.T) *store.Store { return shared(t, servicetest.RedisURL(t)) },
	}
}

// openShared opens the store at u under the store secret, closed when t
// ends. Its deadline is long enough for a burst under -race on a busy
// machine: a call that timed out would be the policy's answer, not the
// count a test checks.
func openShared(t *testing.T, u string, secret []byte) *store.Store {
	t.Helper()
	s, release, err := storekit.OpenURL(context.Background(), u, storekit.URLOptions{Secret: secret, Store: store.Options{Logger: quiet, Deadline: 30 * time.Second}})
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

// migratedPostgres returns the URL of the test PostgreSQL server, its
// tables made.
func migratedPostgres(t testing.TB) string {
	u := servicetest.PostgresURL(t)
	pool, err := pgxpool.New(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := postgres.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return u
}

// fresh returns a prefix no earlier run used, for a store that outlives
// the test.
func fresh(name string) string {
	b := make([]byte, 6)
	rand.Read(b)
	return name + "-" + hex.EncodeToString(b) + ":"
}

// 200 concurrent requests admit exactly each plan's budget per caller, and
// exactly budget/cost of a cost route, on every store.
func TestPlansAndCostExact(t *testing.T) {
	for name, open := range exactStores() {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			plans, err := perCaller(handle(t, s, fresh("plans")), freePlan, middleware.Options{Name: "execute", Logger: quiet, BudgetFor: planOf})
			if err != nil {
				t.Fatal(err)
			}
			defer plans.Close()
			batch, err := perCaller(handle(t, s, fresh("batch")), limiter.Budget{Limit: 100, Window: time.Minute}, middleware.Options{
				Name: "batch", Logger: quiet,
				Cost: func(*http.Request) (int, error) { return 10, nil },
			})
			if err != nil {
				t.Fatal(err)
			}
			defer batch.Close()
			free, paid, batched := &counting{}, &counting{}, &counting{}
			byPlan := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if id, _ := keyfunc.CallerID(r); id == "paid-1" {
					paid.ServeHTTP(w, r)
				} else {
					free.ServeHTTP(w, r)
				}
			})
			// Two bursts of 200: the plans' two callers interleaved, then
			// one caller on the cost route.
			for _, burst := range []struct {
				h      http.Handler
				caller func(i int) string
			}{
				{plans.Wrap(byPlan), func(i int) string { return [2]string{"free-1", "paid-1"}[i%2] }},
				{batch.Wrap(batched), func(int) string { return "batcher" }},
			} {
				var wg sync.WaitGroup
				for i := range 200 {
					wg.Go(func() {
						w := httptest.NewRecorder()
						burst.h.ServeHTTP(w, asCaller(burst.caller(i)))
						if w.Code != 200 && w.Code != 429 {
							t.Errorf("%s: answered %d", burst.caller(i), w.Code)
						}
					})
				}
				wg.Wait()
			}
			for _, c := range []struct {
				what string
				got  *counting
				want int64
			}{{"free caller, budget 30", free, 30}, {"paid caller, budget 60", paid, 60}, {"cost 10 of a budget of 100", batched, 10}} {
				if n := c.got.runs.Load(); n != c.want {
					t.Errorf("%s: %d reached the handler, want %d", c.what, n, c.want)
				}
			}
		})
	}
}

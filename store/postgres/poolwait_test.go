package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gatecount/gatecount/internal/overload"
	"github.com/gatecount/gatecount/store"
)

// A call that waits for a connection of a busy pool past its deadline is
// answered overloaded, never deadline or down: the pool was busy, the
// database was not failing. However many such calls there are, the
// breaker stays closed, and once the connection is free again the next
// call is answered by the database.
func TestPoolWaitIsOverload(t *testing.T) {
	pool := openPool(t, testURL(), "PostgreSQL", "set GATECOUNT_TEST_POSTGRES_URL", func(c *pgxpool.Config) { c.MaxConns = 1 })
	newPool(t) // migrated
	s, err := New(context.Background(), pool, Options{Secret: randomSecret(), Store: store.Options{
		Deadline: 500 * time.Millisecond,
		Breaker:  store.BreakerOptions{Failures: 2},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h, err := s.Handle(randomPrefix("poolwait"))
	if err != nil {
		t.Fatal(err)
	}
	held, err := pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	released := false
	defer func() { // before the pool closes, which waits for it
		if !released {
			held.Release()
		}
	}()
	budget := store.Budget{Limit: 10, Window: time.Minute}
	for i := range 5 {
		_, err := h.Count(context.Background(), []string{"k", "l"}, []store.Budget{budget, budget}, 1)
		if r := store.ReasonOf(err); r != store.ReasonOverloaded || !errors.Is(err, overload.ErrWaitedOut) {
			t.Fatalf("call %d waiting for the pool's one connection: %v (reason %v), want overloaded, waited out", i+1, err, r)
		}
	}
	if h.BreakerOpen() {
		t.Fatal("calls that waited for a busy pool opened the breaker")
	}
	held.Release()
	released = true
	tally, err := h.Count(context.Background(), []string{"k", "l"}, []store.Budget{budget, budget}, 1)
	if err != nil || !tally.Allowed || tally.Counts[0] != 1 {
		t.Fatalf("once the connection is free: %+v, %v; want counted 1", tally, err)
	}
}

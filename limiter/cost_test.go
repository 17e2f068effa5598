package limiter_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatecount/gatecount/limiter"
)

// costLimiters returns a limiter of budget on the memory store, and one on
// a store that does I/O (so that it remembers the store's counts), by name.
func costLimiters(t *testing.T, budget limiter.Budget) map[string]*limiter.Limiter {
	_, remembering := newCounting(t, limiter.Deny, budget, 0)
	return map[string]*limiter.Limiter{
		"memory":      newLimiter(t, nil, limiter.Options{Budget: budget}),
		"remembering": remembering,
	}
}

// A cost is counted whole on every key: a key with less left refuses it,
// and still admits a smaller cost, also when the limiter remembers the
// store's counts.
func TestAttemptCost(t *testing.T) {
	b := limiter.Budget{Limit: 100, Window: time.Minute}
	for name, l := range costLimiters(t, b) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			steps := []struct {
				cost       int
				allowed    bool
				remaining  int
				remembered bool // when the limiter remembers the store's counts
			}{
				{10, true, 90, false},
				{85, true, 5, false},
				{10, false, 0, true}, // 5 left: refused whole, memory knows
				{10, false, 0, true},
				{1, true, 4, false}, // a smaller cost still fits: asked of the store
				{4, true, 0, false},
				{1, false, 0, true},
			}
			for i, s := range steps {
				d, err := l.AttemptCost(ctx, s.cost, limiter.Charge{Key: "k", Budget: b})
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if d.Allowed != s.allowed || d.Remaining != s.remaining || d.Cost != s.cost || d.Limit != 100 {
					t.Fatalf("step %d, cost %d: allowed %v, remaining %d, cost %d, limit %d; want %v, %d, %d, 100",
						i, s.cost, d.Allowed, d.Remaining, d.Cost, d.Limit, s.allowed, s.remaining, s.cost)
				}
				if name == "remembering" && d.Remembered != s.remembered {
					t.Fatalf("step %d, cost %d: refused from memory %v, want %v", i, s.cost, d.Remembered, s.remembered)
				}
			}
		})
	}
}

// A refund gives back the whole cost the decision counted.
func TestRefundCost(t *testing.T) {
	b := limiter.Budget{Limit: 20, Window: time.Minute}
	for name, l := range costLimiters(t, b) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := limiter.Charge{Key: "k", Budget: b}
			first, _ := l.AttemptCost(ctx, 10, c)
			if second, _ := l.AttemptCost(ctx, 10, c); !first.Allowed || !second.Allowed {
				t.Fatalf("within budget: %+v %+v", first, second)
			}
			if d, _ := l.AttemptCost(ctx, 10, c); d.Allowed {
				t.Fatalf("over budget: %+v", d)
			}
			if err := l.Refund(ctx, first); err != nil {
				t.Fatal(err)
			}
			d, _ := l.AttemptCost(ctx, 10, c)
			if !d.Allowed || d.Remaining != 0 {
				t.Fatalf("after a refund of 10: %+v, want allowed with 0 left", d)
			}
			if d, _ := l.Attempt(ctx, "k"); d.Allowed {
				t.Fatalf("a refund gave back more than 10: %+v", d)
			}
		})
	}
}

// A cost below 1 or above a budget's limit is an error, never a decision.
func TestAttemptCostInvalid(t *testing.T) {
	b := limiter.Budget{Limit: 10, Window: time.Minute}
	l := newLimiter(t, nil, limiter.Options{Budget: b})
	for _, tc := range []struct {
		cost    int
		charges []limiter.Charge
	}{
		{0, []limiter.Charge{{Key: "k", Budget: b}}},
		{-1, []limiter.Charge{{Key: "k", Budget: b}}},
		{11, []limiter.Charge{{Key: "k", Budget: b}}},
		{6, []limiter.Charge{{Key: "k", Budget: b}, {Key: "j", Budget: limiter.Budget{Limit: 5, Window: time.Minute}}}},
	} {
		d, err := l.AttemptCost(context.Background(), tc.cost, tc.charges...)
		if !errors.Is(err, limiter.ErrInvalidCost) || d.Allowed {
			t.Errorf("cost %d on %d keys: %+v, %v; want ErrInvalidCost", tc.cost, len(tc.charges), d, err)
		}
	}
}

// Concurrent attempts of cost 10 against a budget of 100 admit exactly 10.
func TestAttemptCostExact(t *testing.T) {
	b := limiter.Budget{Limit: 100, Window: time.Minute}
	for name, l := range costLimiters(t, b) {
		t.Run(name, func(t *testing.T) {
			var allowed atomic.Int64
			var wg sync.WaitGroup
			for range 200 {
				wg.Go(func() {
					if d, err := l.AttemptCost(context.Background(), 10, limiter.Charge{Key: "k", Budget: b}); err == nil && d.Allowed {
						allowed.Add(1)
					}
				})
			}
			wg.Wait()
			if n := allowed.Load(); n != 10 {
				t.Fatalf("admitted %d of 200 of cost 10, want 10", n)
			}
		})
	}
}

// Counting alone while the store is down charges the cost too, and the
// store, back, holds it: a budget of 30 admits three of cost 10, then
// nothing more.
func TestAttemptCostAlone(t *testing.T) {
	t.Parallel() // waits in real time: overlaps the others
	b := limiter.Budget{Limit: 30, Window: time.Minute}
	c, l := newCounting(t, limiter.Local, b, 0)
	ctx := context.Background()
	ch := limiter.Charge{Key: "k", Budget: b}
	c.down.Store(true)
	admitted := 0
	var first limiter.Decision
	for range 5 {
		d, err := l.AttemptCost(ctx, 10, ch)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			if admitted == 0 {
				first = d
			}
			admitted++
			if !d.Local {
				t.Fatalf("store down, yet not counted alone: %+v", d)
			}
		}
	}
	if admitted != 3 {
		t.Fatalf("admitted %d of cost 10 alone, want 3", admitted)
	}
	if err := l.Refund(ctx, first); err != nil { // before it went to the store
		t.Fatal(err)
	}
	if d, _ := l.AttemptCost(ctx, 10, ch); !d.Allowed {
		t.Fatalf("after a refund of 10 counted alone: %+v", d)
	}
	c.down.Store(false)
	if d, _ := l.Attempt(ctx, "k"); d.Allowed {
		t.Fatalf("store back: a spent key admitted: %+v", d)
	}
}

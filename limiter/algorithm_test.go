package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/gatecount/gatecount/internal/clock"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
)

// Each algorithm's attempts are admitted as its rule says, a refused
// attempt's RetryAfter is exactly when one more is admitted (retried then,
// it is; a millisecond earlier, it is not), and a Refund gives a unit back.
func TestAttemptAlgorithms(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		budget limiter.Budget
		spend  []time.Duration // when each of the budget's attempts is made
		retry  time.Duration   // RetryAfter of the next, made with the last
	}{
		{limiter.Budget{Limit: 3, Window: 10 * time.Second, Algorithm: store.SlidingWindow},
			[]time.Duration{0, 2 * time.Second, 4 * time.Second}, 6 * time.Second},
		{limiter.Budget{Limit: 2, Window: 10 * time.Second, Algorithm: store.TokenBucket},
			[]time.Duration{0, time.Second}, 4 * time.Second},
		{limiter.Budget{Limit: 1, Window: 3 * time.Second, Burst: 3, Algorithm: store.TokenBucket},
			[]time.Duration{0, 0, 0}, 3 * time.Second},
		{limiter.Budget{Limit: 2, Window: 10 * time.Second},
			[]time.Duration{0, 9 * time.Second}, time.Second},
	} {
		t.Run(c.budget.String(), func(t *testing.T) {
			clk := clock.NewFake(t0)
			l := newLimiter(t, clk, limiter.Options{Budget: c.budget})
			var last limiter.Decision
			for i, at := range c.spend {
				clk.Set(t0.Add(at))
				d, err := l.Attempt(ctx, "k")
				if err != nil || !d.Allowed || d.Remaining != len(c.spend)-i-1 {
					t.Fatalf("attempt %d of the budget: %+v, %v", i+1, d, err)
				}
				last = d
			}
			d, _ := l.Attempt(ctx, "k")
			if d.Allowed || d.RetryAfter != c.retry {
				t.Fatalf("past the budget: allowed %v, RetryAfter %v; want refused, %v", d.Allowed, d.RetryAfter, c.retry)
			}
			at := clk.Now().Add(d.RetryAfter)
			clk.Set(at.Add(-time.Millisecond))
			if d, _ := l.Attempt(ctx, "k"); d.Allowed {
				t.Fatalf("a millisecond before RetryAfter: admitted %+v", d)
			}
			clk.Set(at)
			if d, _ := l.Attempt(ctx, "k"); !d.Allowed {
				t.Fatalf("at RetryAfter: refused %+v", d)
			}
			if d, _ := l.Attempt(ctx, "k"); d.Allowed && c.budget.Algorithm != store.FixedWindow {
				t.Fatalf("once more at RetryAfter: admitted %+v", d)
			}
			if err := l.Refund(ctx, last); err != nil {
				t.Fatal(err)
			}
			if d, _ := l.Attempt(ctx, "k"); !d.Allowed && c.budget.Algorithm != store.FixedWindow {
				t.Fatalf("after a refund: refused %+v", d)
			}
		})
	}
}

// AttemptEach with budgets of every algorithm is all or nothing, and a
// Refund of it gives each key a unit back under its own budget.
func TestAttemptEachAlgorithms(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	l := newLimiter(t, clk, limiter.Options{Budget: limiter.Budget{Limit: 5, Window: time.Minute}})
	charges := []limiter.Charge{
		{Key: "ip", Budget: limiter.Budget{Limit: 10, Window: time.Minute, Algorithm: store.TokenBucket}},
		{Key: "account", Budget: limiter.Budget{Limit: 2, Window: time.Hour, Algorithm: store.SlidingWindow}},
		{Key: "pair", Budget: limiter.Budget{Limit: 5, Window: time.Minute}},
	}
	var first limiter.Decision
	for i := range 2 {
		d, err := l.AttemptEach(ctx, charges...)
		if err != nil || !d.Allowed {
			t.Fatalf("attempt %d: %+v, %v", i+1, d, err)
		}
		first = d
	}
	d, _ := l.AttemptEach(ctx, charges...)
	if d.Allowed || d.Limiting != 1 || d.RetryAfter != time.Hour {
		t.Fatalf("account spent: %+v, want refused by key 1 for an hour", d)
	}
	if err := l.Credit(ctx, first, []int{1}); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.AttemptEach(ctx, charges...); !d.Allowed || d.RemainingOf(0) != 7 {
		t.Fatalf("after the account's refund: %+v, want allowed with 7 left of the bucket", d)
	}
}

// While the store is down, a limiter counting alone goes on from what the
// store last told of a sliding window or a token bucket, and what it admits
// alone reaches the store once it is back.
func TestOutageKeepsUnits(t *testing.T) {
	t.Parallel() // waits in real time: overlaps the others
	for _, b := range []limiter.Budget{
		{Limit: 5, Window: time.Minute, Algorithm: store.SlidingWindow},
		{Limit: 5, Window: time.Minute, Algorithm: store.TokenBucket},
	} {
		t.Run(b.Algorithm.String(), func(t *testing.T) {
			ctx := context.Background()
			c, l := newCounting(t, limiter.Local, b, 0)
			for range 3 {
				if d, _ := l.Attempt(ctx, "some"); !d.Allowed {
					t.Fatalf("within budget: %+v", d)
				}
			}
			c.down.Store(true)
			if admitted := admittedOf(ctx, l, 20, "some"); admitted != 2 {
				t.Fatalf("key at 3 of 5 admitted %d more during the outage, want 2", admitted)
			}
			c.down.Store(false)
			for range 5 {
				if d, _ := l.Attempt(ctx, "some"); d.Allowed {
					t.Fatalf("key spent alone, store back: %+v", d)
				}
			}
		})
	}
}

// A Refund of fixed-window charges on a limiter whose own budget is a
// sliding window gives back their units.
func TestRefundEachOnAlgorithmLimiter(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	l := newLimiter(t, clk, limiter.Options{Budget: limiter.Budget{Limit: 5, Window: time.Minute, Algorithm: store.SlidingWindow}})
	c := limiter.Charge{Key: "k", Budget: limiter.Budget{Limit: 1, Window: time.Minute}}
	d, err := l.AttemptEach(ctx, c)
	if err != nil || !d.Allowed {
		t.Fatalf("%+v, %v", d, err)
	}
	if err := l.Refund(ctx, d); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.AttemptEach(ctx, c); !d.Allowed {
		t.Fatalf("after the refund: %+v", d)
	}
}

// A block holds a key of any algorithm spent for its whole length.
func TestBlockAlgorithms(t *testing.T) {
	ctx := context.Background()
	for _, b := range []limiter.Budget{
		{Limit: 5, Window: time.Minute, Algorithm: store.SlidingWindow},
		{Limit: 5, Window: time.Minute, Algorithm: store.TokenBucket},
	} {
		clk := clock.NewFake(t0)
		l := newLimiter(t, clk, limiter.Options{Budget: b})
		if err := l.Block(ctx, "k", time.Hour); err != nil {
			t.Fatal(err)
		}
		d, _ := l.Attempt(ctx, "k")
		if d.Allowed || d.RetryAfter != time.Hour {
			t.Fatalf("%v, blocked an hour: %+v", b, d)
		}
		clk.Set(t0.Add(time.Hour))
		if d, _ := l.Attempt(ctx, "k"); !d.Allowed {
			t.Fatalf("%v, once the block is over: %+v", b, d)
		}
	}
}

package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/gatecount/gatecount/internal/clock"
	"github.com/gatecount/gatecount/limiter"
)

// ResetOf gives each key's own window end, allowed or refused, whichever
// key decided.
func TestResetOf(t *testing.T) {
	clk := clock.NewFake(t0)
	l := newLimiter(t, clk, limiter.Options{Budget: limiter.Budget{Limit: 2, Window: time.Hour}})
	ctx := context.Background()
	short := limiter.Charge{Key: "short", Budget: limiter.Budget{Limit: 2, Window: 15 * time.Minute}}
	long := limiter.Charge{Key: "long", Budget: limiter.Budget{Limit: 2, Window: time.Hour}}
	if _, err := l.AttemptEach(ctx, long); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Minute)
	d, err := l.AttemptEach(ctx, short, long)
	if err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	if !d.ResetOf(0).Equal(t0.Add(25*time.Minute)) || !d.ResetOf(1).Equal(t0.Add(time.Hour)) {
		t.Fatalf("allowed: ResetOf = %v, %v", d.ResetOf(0), d.ResetOf(1))
	}
	d, err = l.AttemptEach(ctx, short, long)
	if err != nil || d.Allowed || d.Limiting != 1 {
		t.Fatal(d, err)
	}
	if !d.ResetOf(0).Equal(t0.Add(25*time.Minute)) || !d.ResetOf(1).Equal(t0.Add(time.Hour)) || d.RemainingOf(0) != 1 {
		t.Fatalf("refused: ResetOf = %v, %v", d.ResetOf(0), d.ResetOf(1))
	}
	if !d.ResetOf(2).IsZero() || !d.ResetOf(-1).IsZero() {
		t.Fatal("ResetOf out of range not zero")
	}
}

package turns_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/gatecount/gatecount/internal/lockorder"
	"github.com/gatecount/gatecount/internal/turns"
)

func set(qs ...int) *lockorder.Set {
	var s lockorder.Set
	for _, q := range qs {
		s.Add(q)
	}
	return &s
}

func TestTakeWaitsForTheHolder(t *testing.T) {
	tu := turns.New()
	if err := tu.Take(context.Background(), set(3, 7)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tu.Take(ctx, set(1, 7)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Take of a held queue with an ended context = %v, want context.Canceled", err)
	}
	// The failed Take gave back queue 1, which it had taken.
	if err := tu.Take(ctx, set(1)); err != nil {
		t.Fatalf("queue 1 still held after a failed Take: %v", err)
	}
	tu.Give(set(1))
	tu.Give(set(3, 7))
	if err := tu.Take(ctx, set(3, 7)); err != nil {
		t.Fatalf("queues still held after Give: %v", err)
	}
}

// TestOneAtATime has hundreds of calls on overlapping queues, in any order
// of their keys, count under their turns: no count is lost and none
// deadlocks.
func TestOneAtATime(t *testing.T) {
	tu := turns.New()
	var wg sync.WaitGroup
	counts := make([]int, 4)
	for i := range 400 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, b := i%4, (i/4)%4
			s := set(a, b)
			if err := tu.Take(context.Background(), s); err != nil {
				t.Error(err)
				return
			}
			counts[a]++
			if b != a {
				counts[b]++
			}
			tu.Give(s)
		}()
	}
	wg.Wait()
	total := 0
	for _, c := range counts {
		total += c
	}
	if want := 400 + 300; total != want { // 100 of the 400 have a == b
		t.Fatalf("counted %d, want %d", total, want)
	}
}

func TestQueueInRange(t *testing.T) {
	for _, h := range []uint64{0, 1, turns.Queues - 1, turns.Queues, 1<<64 - 1} {
		if q := turns.Queue(h); q < 0 || q >= turns.Queues {
			t.Errorf("Queue(%d) = %d, outside [0, %d)", h, q, turns.Queues)
		}
	}
}

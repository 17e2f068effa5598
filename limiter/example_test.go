package limiter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store/memory"
)

func Example() {
	s := memory.New(memory.Options{})
	defer s.Close()
	h, _ := s.Handle("codes:")
	l, err := limiter.New(h, limiter.Options{Name: "codes", Budget: limiter.Budget{Limit: 2, Window: time.Hour}})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	ctx := context.Background()
	for range 3 {
		d, _ := l.Attempt(ctx, "+15550100")
		fmt.Println(d.Allowed, d.Remaining)
	}
	// Output:
	// true 1
	// true 0
	// false 0
}

func ExampleLimiter_AttemptEach() {
	s := memory.New(memory.Options{})
	defer s.Close()
	h, _ := s.Handle("signin:")
	l, _ := limiter.New(h, limiter.Options{Name: "signin", Budget: limiter.Budget{Limit: 100, Window: time.Hour}})
	defer l.Close()
	perAccountIP := limiter.Budget{Limit: 1, Window: 15 * time.Minute}
	perAccount := limiter.Budget{Limit: 20, Window: time.Hour}
	for range 2 {
		d, _ := l.AttemptEach(context.Background(),
			limiter.Charge{Key: "alice|192.0.2.1", Budget: perAccountIP},
			limiter.Charge{Key: "alice", Budget: perAccount})
		fmt.Println(d.Allowed, d.Limiting)
	}
	// Output:
	// true -1
	// false 0
}

func ExampleLimiter_AttemptCost() {
	s := memory.New(memory.Options{})
	defer s.Close()
	h, _ := s.Handle("batch:")
	budget := limiter.Budget{Limit: 25, Window: time.Minute}
	l, _ := limiter.New(h, limiter.Options{Name: "batch", Budget: budget})
	defer l.Close()
	for _, cost := range []int{10, 10, 10, 5} {
		d, _ := l.AttemptCost(context.Background(), cost, limiter.Charge{Key: "alice", Budget: budget})
		fmt.Println(cost, d.Allowed, d.Remaining)
	}
	// Output:
	// 10 true 15
	// 10 true 5
	// 10 false 0
	// 5 true 0
}

func ExampleLimiter_Refund() {
	s := memory.New(memory.Options{})
	defer s.Close()
	h, _ := s.Handle("refund:")
	l, _ := limiter.New(h, limiter.Options{Name: "refund", Budget: limiter.Budget{Limit: 1, Window: time.Minute}})
	defer l.Close()
	ctx := context.Background()
	d, _ := l.Attempt(ctx, "k")
	l.Refund(ctx, d) // the attempt succeeded: give it back
	d, _ = l.Attempt(ctx, "k")
	fmt.Println(d.Allowed)
	// Output: true
}

// A budget's algorithm is a field of it: a fixed window unless set.
func ExampleBudget() {
	sliding := limiter.Budget{Limit: 5, Window: 15 * time.Minute, Algorithm: limiter.SlidingWindow}
	bucket := limiter.Budget{Limit: 10, Window: time.Second, Burst: 50, Algorithm: limiter.TokenBucket}
	tooWide := limiter.Budget{Limit: 1000, Window: time.Minute, Algorithm: limiter.SlidingWindow}
	for _, b := range []limiter.Budget{sliding, bucket, tooWide} {
		fmt.Printf("%v: %v\n", b, b.Validate())
	}
	// Output:
	// 5 per 15m0s, sliding: <nil>
	// 10 per 1s, bucket of 50: <nil>
	// 1000 per 1m0s, sliding: invalid budget: sliding window of limit 1000, want at most 256 (the times of every unit in the window are kept)
}

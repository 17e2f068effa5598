package memory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
)

func ExampleNew() {
	s := memory.New(memory.Options{MaxEntries: 50_000})
	defer s.Close() // stops the background sweep

	h, err := s.Handle("signin:")
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()

	// Update: remember when an account last failed to sign in.
	err = h.Update(ctx, []string{"alice"}, func(now time.Time, es []store.Entry) error {
		es[0] = store.Entry{Value: []byte(`{"failures":1}`), ExpiresAt: now.Add(15 * time.Minute)}
		return nil
	})
	fmt.Println(err)

	// Count: at most 2 attempts a minute per account and 5 per address,
	// charged together or not at all.
	keys := []string{"account:alice", "ip:192.0.2.7"}
	caps := []store.Budget{{Limit: 2, Window: time.Minute}, {Limit: 5, Window: time.Minute}}
	for range 3 {
		t, err := h.Count(ctx, keys, caps, 1)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(t.Allowed, t.Counts[:2], t.Limiting)
	}
	fmt.Println(s.Shared())
	// Output:
	// <nil>
	// true [1 1] -1
	// true [2 2] -1
	// false [2 2] 0
	// false
}

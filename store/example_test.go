package store_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
	"github.com/gatecount/gatecount/store/value"
)

// A limiter claims a handle of its own, then counts through it.
func Example() {
	s := memory.New(memory.Options{})
	defer s.Close()

	signIn, err := s.Handle("signin:")
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := signIn.Claim("sign-in limiter"); err != nil {
		fmt.Println(err)
		return
	}
	// A second limiter on the same handle would double-count.
	fmt.Println(signIn.Claim("password-reset limiter") != nil)

	ctx := context.Background()
	budget := []store.Budget{{Limit: 3, Window: time.Minute}}
	for range 4 {
		t, err := signIn.Count(ctx, []string{"alice@example.com"}, budget, 1)
		if err != nil {
			fmt.Println(err) // the store could not answer
			return
		}
		fmt.Println(t.Allowed, t.Counts[0])
	}
	// Output:
	// true
	// true 1
	// true 2
	// true 3
	// false 3
}

// Update is the read-modify-write every limit is built on: here a counter
// whose window starts at its first attempt.
func ExampleHandle_Update() {
	s := memory.New(memory.Options{})
	defer s.Close()
	h, _ := s.Handle("resets:")

	ctx := context.Background()
	var attempts int64
	addOne := func(now time.Time, es []store.Entry) error {
		e := &es[0]
		attempts = 0
		if e.Live() {
			n, err := store.ParseCount(e.Value)
			if err != nil {
				return err
			}
			attempts = n
		} else {
			e.ExpiresAt = now.Add(time.Hour) // a new window
		}
		attempts++
		e.Value = value.AppendCount(e.Value[:0], attempts)
		return nil
	}
	for range 2 {
		if err := h.Update(ctx, []string{"bob"}, addOne); err != nil {
			fmt.Println(err)
			return
		}
	}
	es, _ := h.Read(ctx, []string{"bob", "carol"})
	fmt.Println(attempts, string(es[0].Value), es[1].Live())
	// Output: 2 2 false
}

// A full store answers a new key as unavailable, with the reason; keys it
// holds keep counting.
func ExampleReasonOf() {
	s := memory.New(memory.Options{
		MaxEntries: 1,
		Store:      store.Options{Logger: slog.New(slog.DiscardHandler)},
	})
	defer s.Close()
	h, _ := s.Handle("tiny:")
	ctx := context.Background()
	budget := []store.Budget{{Limit: 10, Window: time.Minute}}
	for _, key := range []string{"a", "b", "a"} {
		_, err := h.Count(ctx, []string{key}, budget, 1)
		if err != nil {
			fmt.Println(key, errors.Is(err, store.ErrUnavailable), store.ReasonOf(err))
			continue
		}
		fmt.Println(key, "counted")
	}
	// Output:
	// a counted
	// b true full
	// a counted
}

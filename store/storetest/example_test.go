package storetest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/storetest"
)

// Each case can be run on its own, outside Run: here against a store that
// keeps its entries in a map, with no Pair.NewBounded or Pair.SameBacking,
// so the cases that need stores of their own (the bound's, Sweep's exact
// count, Close, Sizer's, Backing's) do not apply. The cases about two instances run on First alone, which a store
// that is not shared is.
func ExampleCases() {
	s := store.New(&mapBackend{w: newWorld(0), inline: true}, store.Options{Logger: slog.New(slog.DiscardHandler)})
	defer s.Close()
	first, _ := s.Handle("app:")
	other, _ := s.Handle("other:")
	p := storetest.Pair{First: first, Other: other} // Second defaults to First

	var passed, skipped int
	for _, c := range storetest.Cases {
		switch err := c.Run(context.Background(), p); {
		case err == nil:
			passed++
		case errors.Is(err, storetest.ErrNotApplicable):
			skipped++
		default:
			fmt.Println(err)
		}
	}
	fmt.Printf("%d passed, %d not applicable\n", passed, skipped)
	// Output: 34 passed, 8 not applicable
}

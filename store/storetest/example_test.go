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
// keeps its entries in a map, which is not shared, so the cases about two
// instances do not apply.
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
	// Output: 17 passed, 3 not applicable
}

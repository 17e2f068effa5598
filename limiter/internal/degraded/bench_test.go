package degraded

import (
	"context"
	"log/slog"
	"strconv"
	"testing"

	"github.com/gatecount/gatecount/internal/clock"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
)

// The cost of the path with the store answering: an attempt through Path
// against the same count straight to the store (the yardstick).
func BenchmarkCounted(b *testing.B) {
	clk := clock.NewFake(simStart)
	mem := memory.NewBackend(memory.Options{Now: clk.Now, Store: store.Options{Logger: slog.New(slog.DiscardHandler)}})
	defer mem.Close()
	w := &world{mem: mem, clk: clk}
	s := &slot{black: -1}
	fleet := NewFleet(FleetOptions{ID: "bench", Now: clk.Now})
	if err := fleet.Beat(context.Background(), w.conn(s, "fleet")); err != nil {
		b.Fatal(err)
	}
	p := New(Options{Fleet: fleet, Alone: true, Now: clk.Now})
	caps := []store.Budget{{Limit: 1 << 30, Window: simWindow}}
	keys := make([][]string, 1024)
	for i := range keys {
		keys[i] = []string{"k" + strconv.Itoa(i)}
	}
	c := w.conn(s, "keys")
	b.Run("store", func(b *testing.B) {
		var t store.Tally
		for i := 0; b.Loop(); i++ {
			if err := c.CountInto(context.Background(), keys[i%len(keys)], caps, 1, &t); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("path", func(b *testing.B) {
		var t store.Tally
		for i := 0; b.Loop(); i++ {
			if _, _, err := p.Attempt(context.Background(), c, keys[i%len(keys)], caps, 1, &t); err != nil {
				b.Fatal(err)
			}
		}
	})
}

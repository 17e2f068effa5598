package degraded

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gatecount/gatecount/internal/clock"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
)

// Lives attempting at once, the store cut off from all of them midway,
// admit together at most the budget through the store and their shares
// alone; what they admitted alone reaches the store once it answers.
func TestPathConcurrent(t *testing.T) {
	for _, budget := range []int{1, 5, 20, 40} {
		t.Run(strconv.Itoa(budget), func(t *testing.T) {
			clk := clock.NewFake(simStart)
			mem := memory.NewBackend(memory.Options{Shards: 1, Now: clk.Now, Store: store.Options{Logger: slog.New(slog.DiscardHandler)}})
			defer mem.Close()
			w := &world{mem: mem, clk: clk, cutAll: false}
			b := store.Budget{Limit: budget, Window: simWindow}
			const lives = 3
			var slots [lives]*slot
			var fleets [lives]*Fleet
			var paths [lives]*Path
			for i := range slots {
				slots[i] = &slot{i: i, black: -1}
				fleets[i] = NewFleet(FleetOptions{ID: strconv.Itoa(i), Now: clk.Now, Fresh: simFresh, Life: simLife})
				paths[i] = New(Options{Fleet: fleets[i], Alone: true, Now: clk.Now})
			}
			beat := func() {
				for i := range fleets {
					if err := fleets[i].Beat(context.Background(), w.conn(slots[i], "fleet")); err != nil {
						t.Fatal(err)
					}
				}
			}
			beat()
			for range (simLife + simFresh) / simFresh { // old enough to count alone
				clk.Advance(simFresh)
				beat()
			}
			var admitted, alone atomic.Int64
			var wg sync.WaitGroup
			for i := range paths {
				for range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range 2 * budget {
							var tl store.Tally
							o, _, err := paths[i].Attempt(context.Background(), w.conn(slots[i], "keys"), []string{"alice"}, []store.Budget{b}, 1, &tl)
							if err != nil {
								t.Error(err)
								return
							}
							if tl.Allowed {
								admitted.Add(1)
								if o == Alone {
									alone.Add(1)
								}
							}
						}
					}()
				}
				if i == 0 {
					w.mu.Lock()
					w.cutAll = true // the store goes out of reach while the first life attempts
					w.mu.Unlock()
				}
			}
			wg.Wait()
			if got, most := admitted.Load(), int64(2*budget); got > most {
				t.Fatalf("%d admitted, %d of them alone; want at most %d", got, alone.Load(), most)
			}
			if got, most := alone.Load(), int64(budget); got > most {
				t.Fatalf("%d admitted alone, want at most the budget %d", got, most)
			}
			t.Logf("%d admitted, %d of them alone", admitted.Load(), alone.Load())
			if alone.Load() == 0 && budget >= lives {
				t.Fatalf("nothing admitted alone: the test tests nothing")
			}
			w.cutAll = false
			var sent int64
			for i := range paths {
				if _, err := paths[i].Flush(context.Background(), w.conn(slots[i], "keys")); err != nil {
					t.Fatal(err)
				}
			}
			es, err := mem.Read(context.Background(), "keys", []string{"alice"})
			if err != nil {
				t.Fatal(err)
			}
			if es[0].Live() {
				sent, _ = store.ParseCount(es[0].Value)
			}
			if want := min(admitted.Load(), int64(budget)); sent != want {
				t.Fatalf("the store counts %d once it answers, want %d (%d admitted, %d alone)", sent, want, admitted.Load(), alone.Load())
			}
		})
	}
}

// A life that counted alone in a window still running stays in the
// registry when it stops cleanly, though it owes nothing: the others'
// shares do not grow within the window, so that the lives that count alone
// in it admit at most the budget together.
func TestStopKeepsShares(t *testing.T) {
	clk := clock.NewFake(simStart)
	mem := memory.NewBackend(memory.Options{Shards: 1, Now: clk.Now, Store: store.Options{Logger: slog.New(slog.DiscardHandler)}})
	defer mem.Close()
	w := &world{mem: mem, clk: clk}
	b := store.Budget{Limit: 6, Window: simWindow}
	var slots [3]*slot
	var fleets [3]*Fleet
	var paths [3]*Path
	for i := range slots {
		slots[i] = &slot{i: i, black: -1}
		fleets[i] = NewFleet(FleetOptions{ID: strconv.Itoa(i), Now: clk.Now, Fresh: simFresh, Life: simLife})
		paths[i] = New(Options{Fleet: fleets[i], Alone: true, Now: clk.Now})
	}
	ctx := context.Background()
	beat := func(lives ...int) {
		for _, i := range lives {
			if err := fleets[i].Beat(ctx, w.conn(slots[i], "fleet")); err != nil {
				t.Fatal(err)
			}
		}
	}
	beat(0, 1, 2)
	for range (simLife + simFresh) / simFresh {
		clk.Advance(simFresh)
		beat(0, 1, 2)
	}
	admit := func(i int) int {
		n := 0
		for range 10 {
			var tl store.Tally
			if _, _, err := paths[i].Attempt(ctx, w.conn(slots[i], "keys"), []string{"alice"}, []store.Budget{b}, 1, &tl); err != nil {
				t.Fatal(err)
			}
			if tl.Allowed {
				n++
			}
		}
		return n
	}
	if n := admit(2); n != 6 { // the store's budget spent through life 2
		t.Fatalf("through the store: %d admitted, want 6", n)
	}
	w.cutAll = true
	first := admit(0) + admit(1)
	w.cutAll = false
	clear, err := paths[0].Flush(ctx, w.conn(slots[0], "keys")) // life 0 stops, leaving if clear
	if err != nil {
		t.Fatal(err)
	}
	if clear {
		if err := fleets[0].Leave(ctx, w.conn(slots[0], "fleet")); err != nil {
			t.Fatal(err)
		}
	}
	beat(1, 2) // the others read the registry
	clk.Advance(simBeat)
	w.cutAll = true
	if again := admit(1); first != 4 || again != 0 {
		t.Fatalf("lives 0 and 1 admitted %d alone, then life 1 %d more, life 0 stopped: want 4, then 0 (their shares of 2 each)", first, again)
	}
}

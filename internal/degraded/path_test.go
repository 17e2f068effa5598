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

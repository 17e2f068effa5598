package store_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/gatecount/gatecount/internal/clock"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
)

// opCounter is an Observer that counts the calls it is told of, by Op.
type opCounter struct {
	mu  sync.Mutex
	ops map[string]int
}

func (o *opCounter) ObserveCall(e store.CallEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ops[e.Op]++
}

// CountKey, the one-key Count, gives what Count gives for that key (its
// Tally's Key), step for step, on each of the guard's paths: in process
// (CountOne), and on the prompt path through a backend's own Count and
// through its Update. It refuses what Count refuses, tells the Observer as
// Count does, and a closed store answers it unavailable.
func TestCountKey(t *testing.T) {
	for _, p := range []struct {
		name string
		wrap func(*memory.Backend) store.Backend
	}{
		{"inline", func(b *memory.Backend) store.Backend { return b }},
		{"counter", func(b *memory.Backend) store.Backend { return asCounter{asPrompt{b}, b} }},
		{"update", func(b *memory.Backend) store.Backend { return asPrompt{b} }},
	} {
		t.Run(p.name, func(t *testing.T) {
			clk := clock.NewFake(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
			obs := &opCounter{ops: map[string]int{}}
			open := func() (*store.Store, *store.Handle) {
				o := store.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Observer: obs}.WithDefaults()
				s := store.New(p.wrap(memory.NewBackend(memory.Options{Store: o, Now: clk.Now})), o)
				t.Cleanup(func() { s.Close() })
				h, err := s.Handle("k:")
				if err != nil {
					t.Fatal(err)
				}
				return s, h
			}
			ks, one := open()
			_, wide := open()
			ctx := context.Background()
			steps := []struct {
				name    string
				key     string
				b       store.Budget
				n       int64
				advance time.Duration
				err     error // of both
			}{
				{"new key", "a", store.Budget{Limit: 2, Window: time.Minute}, 1, 0, nil},
				{"held key", "a", store.Budget{Limit: 2, Window: time.Minute}, 1, time.Second, nil},
				{"at its cap", "a", store.Budget{Limit: 2, Window: time.Minute}, 1, 0, nil},
				{"more than a new key's cap", "b", store.Budget{Limit: 2, Window: time.Minute}, 3, 0, nil},
				{"a window ended", "a", store.Budget{Limit: 2, Window: time.Minute}, 1, time.Minute, nil},
				{"an empty key", "", store.Budget{Limit: 2, Window: time.Minute}, 1, 0, store.ErrInvalidKey},
				{"no amount", "a", store.Budget{Limit: 2, Window: time.Minute}, 0, 0, store.ErrInvalidCount},
				{"no budget", "a", store.Budget{}, 1, 0, store.ErrInvalidCount},
			}
			for _, st := range steps {
				clk.Advance(st.advance)
				got, gotErr := one.CountKey(ctx, st.key, st.b, st.n)
				tl, wantErr := wide.Count(ctx, []string{st.key}, []store.Budget{st.b}, st.n)
				if !errors.Is(gotErr, st.err) || !errors.Is(wantErr, st.err) || (st.err == nil) != (gotErr == nil) {
					t.Fatalf("%s: CountKey err %v, Count err %v; want %v", st.name, gotErr, wantErr, st.err)
				}
				if want := tl.Key(); st.err == nil && got != want || st.err != nil && got != (store.KeyTally{}) {
					t.Fatalf("%s: CountKey gave %+v, Count %+v", st.name, got, want)
				}
			}
			// Told of as Count is: once each for the steps that reached
			// the store, on each of the two stores.
			if c := obs.ops["count"]; c != 2*5 {
				t.Errorf("Observer told of %d Counts, want %d", c, 2*5)
			}
			ks.Close()
			if _, err := one.CountKey(ctx, "a", store.Budget{Limit: 2, Window: time.Minute}, 1); store.ReasonOf(err) != store.ReasonClosed {
				t.Errorf("CountKey on a closed store: %v, want %v", err, store.ReasonClosed)
			}
		})
	}
}

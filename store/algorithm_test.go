package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gatecount/gatecount/internal/clock"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
)

// algorithmPaths opens a memory store on clk behind each of the guard's
// paths: in process (CountOne, CountInline), the memory backend's own
// Count, and the generic Count through Update.
func algorithmPaths(t *testing.T, clk *clock.Fake) map[string]*store.Handle {
	out := map[string]*store.Handle{}
	for name, wrap := range map[string]func(*memory.Backend) store.Backend{
		"inline":  func(b *memory.Backend) store.Backend { return b },
		"counter": func(b *memory.Backend) store.Backend { return asCounter{asPrompt{b}, b} },
		"update":  func(b *memory.Backend) store.Backend { return asPrompt{b} },
	} {
		o := store.Options{}.WithDefaults()
		s := store.New(wrap(memory.NewBackend(memory.Options{Store: o, Now: clk.Now})), o)
		t.Cleanup(func() { s.Close() })
		h, err := s.Handle("alg:")
		if err != nil {
			t.Fatal(err)
		}
		out[name] = h
	}
	return out
}

// TestAlgorithms: each algorithm admits, counts and tells when one more unit
// is admitted as it documents, on one key and with keys of other algorithms
// beside it, on every path of the guard.
func TestAlgorithms(t *testing.T) {
	sliding := store.Budget{Limit: 3, Window: 10 * time.Second, Algorithm: store.SlidingWindow}
	bucket := store.Budget{Limit: 2, Window: 10 * time.Second, Algorithm: store.TokenBucket} // a unit each 5 s
	burst := store.Budget{Limit: 1, Window: 3 * time.Second, Burst: 3, Algorithm: store.TokenBucket}
	fixed := store.Budget{Limit: 3, Window: 10 * time.Second}
	type step struct {
		at      time.Duration // since the start
		n       int64
		allowed bool
		count   int64
		next    time.Duration // since the start; -1 for none
	}
	cases := []struct {
		name  string
		b     store.Budget
		steps []step
	}{
		{"sliding", sliding, []step{
			{0, 1, true, 1, 10 * time.Second},
			{4 * time.Second, 2, true, 3, 10 * time.Second},
			{9999 * time.Millisecond, 1, false, 3, 10 * time.Second},
			{10 * time.Second, 1, true, 3, 14 * time.Second}, // the first left
			{13999 * time.Millisecond, 1, false, 3, 14 * time.Second},
			{14 * time.Second, 2, true, 3, 20 * time.Second}, // both of cost 2 left
			{14 * time.Second, 1, false, 3, 20 * time.Second},
			{30 * time.Second, 3, true, 3, 40 * time.Second},
			{31 * time.Second, 4, false, 3, 40 * time.Second},
		}},
		{"bucket", bucket, []step{
			{0, 1, true, 1, 5 * time.Second},
			{time.Second, 1, true, 2, 5 * time.Second},
			{4999 * time.Millisecond, 1, false, 2, 5 * time.Second},
			{5 * time.Second, 1, true, 2, 10 * time.Second},
			{7 * time.Second, 1, false, 2, 10 * time.Second},
			{30 * time.Second, 2, true, 2, 35 * time.Second},
			{31 * time.Second, 3, false, 2, 35 * time.Second},
		}},
		{"burst", burst, []step{
			{0, 3, true, 3, 3 * time.Second},
			{time.Second, 1, false, 3, 3 * time.Second},
			{4 * time.Second, 1, true, 3, 6 * time.Second},   // a token came at 3 s, the next at 6 s
			{10 * time.Second, 2, true, 3, 12 * time.Second}, // one of 3 in use: 3 after
		}},
		{"fixed", fixed, []step{
			{0, 2, true, 2, 10 * time.Second},
			{9 * time.Second, 1, true, 3, 10 * time.Second},
			{9 * time.Second, 1, false, 3, 10 * time.Second},
			{10 * time.Second, 3, true, 3, 20 * time.Second},
		}},
	}
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	ctx := context.Background()
	for _, c := range cases {
		for _, mixed := range []bool{false, true} {
			clk := clock.NewFake(start)
			for path, h := range algorithmPaths(t, clk) {
				t.Run(fmt.Sprintf("%s/%s/mixed=%v", c.name, path, mixed), func(t *testing.T) {
					key := "k-" + c.name + fmt.Sprint(mixed)
					for i, s := range c.steps {
						clk.Set(start.Add(s.at))
						keys, caps := []string{key}, []store.Budget{c.b}
						if mixed {
							// A roomy key of each algorithm beside it.
							keys = append(keys, key+"-f", key+"-s", key+"-b")
							caps = append(caps, store.Budget{Limit: 100, Window: time.Hour},
								store.Budget{Limit: 100, Window: time.Hour, Algorithm: store.SlidingWindow},
								store.Budget{Limit: 100, Window: time.Hour, Algorithm: store.TokenBucket})
						}
						got, err := h.Count(ctx, keys, caps, s.n)
						if err != nil {
							t.Fatalf("step %d: %v", i, err)
						}
						var next time.Time
						if s.next >= 0 {
							next = start.Add(s.next)
						}
						if got.Allowed != s.allowed || got.Counts[0] != s.count || !got.ExpiresAt[0].Equal(next) {
							t.Fatalf("step %d at %v, %d units: allowed %v, count %d, next %v; want %v, %d, %v",
								i, s.at, s.n, got.Allowed, got.Counts[0], got.ExpiresAt[0].Sub(start), s.allowed, s.count, s.next)
						}
						if !mixed {
							k, err := h.CountKey(ctx, key+"-one", c.b, s.n)
							if err != nil || k.Allowed != s.allowed || k.Count != s.count || k.ExpiresAt != next.UnixMilli() {
								t.Fatalf("step %d, CountKey: %+v, %v; want %v, %d, %v", i, k, err, s.allowed, s.count, s.next)
							}
						}
					}
				})
			}
		}
	}
}

// TestAlgorithmUnits: Units reads what a Count wrote, AddUnits adds units
// with no check of room, and TakeUnits gives units back, for each algorithm.
func TestAlgorithmUnits(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	for _, b := range []store.Budget{
		{Limit: 3, Window: time.Minute},
		{Limit: 3, Window: time.Minute, Algorithm: store.SlidingWindow},
		{Limit: 3, Window: time.Minute, Algorithm: store.TokenBucket},
	} {
		t.Run(b.Algorithm.String(), func(t *testing.T) {
			var e store.Entry
			if err := b.AddUnits(now, &e, 2); err != nil {
				t.Fatal(err)
			}
			if c, _, err := b.Units(now, e); c != 2 || err != nil {
				t.Fatalf("after adding 2 to nothing: %d, %v (%s)", c, err, e.Value)
			}
			if err := b.AddUnits(now.Add(time.Second), &e, 5); err != nil {
				t.Fatal(err)
			}
			c, next, err := b.Units(now.Add(time.Second), e)
			if err != nil || c < 3 || next.IsZero() {
				t.Fatalf("after adding 5 more: %d ending %v, %v (%s)", c, next, err, e.Value)
			}
			if err := b.TakeUnits(now.Add(time.Second), &e, 1); err != nil {
				t.Fatal(err)
			}
			after, _, err := b.Units(now.Add(time.Second), e)
			if err != nil || after != c-1 {
				t.Fatalf("after a refund of 1 of %d: %d, %v (%s)", c, after, err, e.Value)
			}
			if err := b.TakeUnits(now.Add(time.Second), &e, 100); err != nil {
				t.Fatal(err)
			}
			if b.Algorithm != store.FixedWindow && e.Live() {
				t.Fatalf("a refund of every unit left %s", e.Value)
			}
			if _, _, err := b.Units(now, store.Entry{Value: []byte(`"x"`), ExpiresAt: now.Add(time.Hour)}); !errors.Is(err, store.ErrNotCounter) {
				t.Fatalf("Units of a string: %v, want ErrNotCounter", err)
			}
		})
	}
}

// TestAlgorithmValidate: a budget an algorithm cannot count is refused
// with an error matching ErrInvalidBudget, naming the bound.
func TestAlgorithmValidate(t *testing.T) {
	for _, c := range []struct {
		b    store.Budget
		want string // in the error; "" for none
	}{
		{store.Budget{Limit: 256, Window: time.Minute, Algorithm: store.SlidingWindow}, ""},
		{store.Budget{Limit: 257, Window: time.Minute, Algorithm: store.SlidingWindow}, "at most 256"},
		{store.Budget{Limit: 10, Window: time.Minute, Burst: 50, Algorithm: store.TokenBucket}, ""},
		{store.Budget{Limit: 10, Window: time.Minute, Burst: 5}, "burst"},
		{store.Budget{Limit: 10, Window: time.Minute, Burst: -1, Algorithm: store.TokenBucket}, "burst"},
		{store.Budget{Limit: 2_000_000, Window: time.Second, Algorithm: store.TokenBucket}, "microsecond"},
		{store.Budget{Limit: 1, Window: store.MaxWindow, Burst: 100, Algorithm: store.TokenBucket}, "refill"},
		{store.Budget{Limit: 10, Window: time.Minute, Algorithm: 7}, "not an algorithm"},
	} {
		err := c.b.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v, want nil", c.b, err)
		case c.want != "" && (!errors.Is(err, store.ErrInvalidBudget) || !contains(err.Error(), c.want)):
			t.Errorf("%+v: %v, want ErrInvalidBudget naming %q", c.b, err, c.want)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

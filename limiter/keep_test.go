package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/gatecount/gatecount/internal/clock"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
)

// Keep makes a key's count live longer without changing it, or opens one
// of 0; a fixed window charged after keeps the kept expiry.
func TestKeep(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	s := memory.New(memory.Options{Now: clk.Now, Store: store.Options{Logger: quiet}})
	defer s.Close()
	h, _ := s.Handle("k:")
	b := limiter.Budget{Limit: 3, Window: time.Hour}
	l, err := limiter.New(h, limiter.Options{Name: "k", Budget: b, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	day := 24 * time.Hour
	for _, tc := range []struct {
		name    string
		charged int // before Keep
	}{
		{"none", 0},
		{"two", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "key-" + tc.name
			for range tc.charged {
				l.Attempt(ctx, key)
			}
			if err := l.Keep(ctx, key, day); err != nil {
				t.Fatal(err)
			}
			d, _ := l.Attempt(ctx, key)
			if want := b.Limit - tc.charged - 1; !d.Allowed || d.Remaining != want || !d.Reset.Equal(clk.Now().Add(day)) {
				t.Fatalf("an attempt after Keep: %+v, want %d left until a day from now", d, want)
			}
			if err := l.Keep(ctx, key, time.Minute); err != nil { // never shortens
				t.Fatal(err)
			}
			if d, _ := l.Peek(ctx, key); !d.Reset.Equal(clk.Now().Add(day)) {
				t.Fatalf("a shorter Keep moved the expiry to %v", d.Reset)
			}
		})
	}
	if err := l.Keep(ctx, "k", limiter.MaxWindow+time.Hour); err == nil {
		t.Fatal("a keep longer than MaxWindow was taken")
	}
}

// A key a full memory store had no room for, counted alone, goes into the
// store once it has room with the window it was counted in: its entry
// ends when that window does, not a whole window after it is added.
func TestAloneAddedInItsWindow(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	s := memory.New(memory.Options{MaxEntries: 4, Now: clk.Now, Store: store.Options{Logger: quiet}})
	defer s.Close()
	h, _ := s.Handle("m:")
	l, err := limiter.New(h, limiter.Options{Name: "m", Budget: limiter.Budget{Limit: 5, Window: time.Hour}, Unavailable: limiter.Local, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 4 {
		if d, _ := l.Attempt(ctx, "fill"+string(rune('a'+i))); !d.Allowed || d.Local {
			t.Fatalf("fill %d: %+v", i, d)
		}
	}
	clk.Advance(30 * time.Minute)
	if d, _ := l.Attempt(ctx, "k"); !d.Allowed || !d.Local {
		t.Fatalf("a new key in a full store: %+v, want counted alone", d)
	}
	clk.Advance(30 * time.Minute) // the fill expires: room
	for i := 0; storedCount(t, h, "k") != 1; i++ {
		if i == 1000 {
			t.Fatalf("the key counted alone is not in the store after 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	es, err := h.Read(ctx, []string{"k"})
	if err != nil {
		t.Fatal(err)
	}
	if want := t0.Add(90 * time.Minute); !es[0].ExpiresAt.Equal(want) {
		t.Fatalf("the key counted alone at +30m expires at +%v in the store, want +90m", es[0].ExpiresAt.Sub(t0))
	}
}

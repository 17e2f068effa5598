package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/gatecount/gatecount/internal/clock"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
)

// Holds tells a live entry from none, an expired one, or one of another
// prefix, for any key of several.
func TestHolds(t *testing.T) {
	clk := clock.NewFake(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	b := memory.NewBackend(memory.Options{Now: clk.Now, Store: store.Options{Logger: quiet}})
	t.Cleanup(func() { b.Close() })
	put := func(key string, ttl time.Duration) {
		t.Helper()
		err := b.Update(context.Background(), "p:", []string{key}, func(now time.Time, es []store.Entry) error {
			es[0] = store.Entry{Value: []byte("1"), ExpiresAt: now.Add(ttl)}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	put("live", time.Hour)
	put("brief", time.Second)
	clk.Advance(time.Second)
	for _, tc := range []struct {
		name   string
		prefix string
		keys   []string
		want   bool
	}{
		{"live", "p:", []string{"live"}, true},
		{"none", "p:", []string{"none"}, false},
		{"expired", "p:", []string{"brief"}, false},
		{"another prefix", "q:", []string{"live"}, false},
		{"one of several", "p:", []string{"none", "brief", "live"}, true},
		{"none of several", "p:", []string{"none", "brief"}, false},
	} {
		if got := b.Holds(tc.prefix, tc.keys); got != tc.want {
			t.Errorf("%s: Holds(%q, %q) = %v, want %v", tc.name, tc.prefix, tc.keys, got, tc.want)
		}
	}
}

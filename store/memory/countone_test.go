package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gatecount/gatecount/internal/clock"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
)

// CountOne, the guard's path for a one-key Count, gives what CountInline
// gives for that key, step for step, on two backends of one clock: counts,
// refusals, windows, expiry, a value that is not a count and a full store.
func TestCountOneMatchesCountInline(t *testing.T) {
	clk := clock.NewFake(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	open := func() *memory.Backend {
		b := memory.NewBackend(memory.Options{MaxEntries: 3, Now: clk.Now, Store: store.Options{Logger: quiet}})
		t.Cleanup(func() { b.Close() })
		return b
	}
	one, wide := open(), open()
	for _, b := range []*memory.Backend{one, wide} {
		err := b.Update(context.Background(), "p:", []string{"text"}, func(now time.Time, es []store.Entry) error {
			es[0] = store.Entry{Value: []byte(`"x"`), ExpiresAt: now.Add(time.Hour)}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name    string
		key     string
		limit   int
		n       int64
		advance time.Duration
		err     error // of both
	}{
		{"new key", "a", 3, 1, 0, nil},
		{"held key", "a", 3, 2, 0, nil},
		{"at its cap", "a", 3, 1, 0, nil},
		{"more than a new key's cap", "b", 2, 3, 0, nil},
		{"a new key to its cap", "b", 2, 2, 0, nil},
		{"not a count", "text", 3, 1, 0, store.ErrNotCounter},
		{"a new key in a full store", "c", 3, 1, 0, store.ErrFull},
		{"a held key in a full store", "b", 5, 1, 0, nil},
		{"a window ended", "a", 3, 1, time.Minute, nil},
		{"room once expired", "c", 3, 1, 0, nil},
	}
	for _, st := range steps {
		clk.Advance(st.advance)
		b := store.Budget{Limit: st.limit, Window: time.Minute}
		got, gotErr := one.CountOne("p:", st.key, b, st.n)
		tl, wantErr := wide.CountInline("p:", [store.MaxCountKeys]string{st.key}, []store.Budget{b}, st.n)
		want := tl.Key()
		if !errors.Is(gotErr, st.err) || !errors.Is(wantErr, st.err) || (st.err == nil) != (gotErr == nil) {
			t.Fatalf("%s: CountOne err %v, CountInline err %v; want %v", st.name, gotErr, wantErr, st.err)
		}
		if st.err == nil && got != want {
			t.Fatalf("%s: CountOne gave %+v, CountInline %+v", st.name, got, want)
		}
	}
	if one.Entries() != wide.Entries() {
		t.Errorf("entries held: %d after CountOne, %d after CountInline", one.Entries(), wide.Entries())
	}
}

package redis_test

import (
	"testing"
	"time"

	"github.com/gatecount/gatecount/store"
	redisstore "github.com/gatecount/gatecount/store/redis"
)

// TestGuess: an Update that guesses its key holds no entry (the key is not
// known here to be live) and is wrong falls back to reading it, and counts
// from what another instance, or this one's Count, wrote; a key known here
// to be live is read, not guessed, and one that another instance deleted
// meanwhile starts over. Misses counts exactly the wrong guesses.
func TestGuess(t *testing.T) {
	secret, prefix := newSecret(), randomName("guess")
	s1 := open(t, newClient(t), redisstore.Options{Secret: secret})
	s2 := open(t, newClient(t), redisstore.Options{Secret: secret})
	h1, h2 := handle(t, s1, prefix), handle(t, s2, prefix)
	b1 := s1.Backend().(*redisstore.Backend)
	ctx := t.Context()
	incr := incrFor(time.Minute)
	// An answer from Redis gives s1 its estimate of the server's time,
	// without which it never guesses.
	if _, err := h1.Read(ctx, []string{"warm"}); err != nil {
		t.Fatal(err)
	}
	value := func(h *store.Handle, key string) string {
		t.Helper()
		es, err := h.Read(ctx, []string{key})
		if err != nil {
			t.Fatal(err)
		}
		if !es[0].Live() {
			return ""
		}
		return string(es[0].Value)
	}
	steps := []struct {
		name       string
		do         func() error
		key, want  string
		wantMisses uint64 // wrong guesses of s1 during the step
	}{
		{"a new key: a right guess", func() error { return h1.Update(ctx, []string{"new"}, incr) }, "new", "1", 0},
		{"another instance's entry", func() error {
			if err := h2.Update(ctx, []string{"k"}, put(`5`, time.Minute)); err != nil {
				return err
			}
			return h1.Update(ctx, []string{"k"}, incr)
		}, "k", "6", 1},
		{"a key known live: no guess", func() error { return h1.Update(ctx, []string{"k"}, incr) }, "k", "7", 0},
		{"deleted by another instance", func() error {
			if err := h2.Update(ctx, []string{"k"}, func(_ time.Time, es []store.Entry) error {
				es[0] = store.Entry{}
				return nil
			}); err != nil {
				return err
			}
			return h1.Update(ctx, []string{"k"}, incr)
		}, "k", "1", 0},
		{"a counter of Count", func() error {
			if _, err := h1.Count(ctx, []string{"c"}, []store.Budget{{Limit: 10, Window: time.Minute}}, 1); err != nil {
				return err
			}
			return h1.Update(ctx, []string{"c"}, incr)
		}, "c", "2", 1},
		{"one of two keys held", func() error {
			if err := h2.Update(ctx, []string{"p"}, put(`3`, time.Minute)); err != nil {
				return err
			}
			return h1.Update(ctx, []string{"q", "p"}, incr)
		}, "p", "4", 1},
	}
	for _, st := range steps {
		before := b1.Misses()
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := value(h1, st.key); got != st.want {
			t.Errorf("%s: %q holds %q, want %q", st.name, st.key, got, st.want)
		}
		if got := b1.Misses() - before; got != st.wantMisses {
			t.Errorf("%s: %d wrong guesses, want %d", st.name, got, st.wantMisses)
		}
	}
	if got := value(h1, "q"); got != "1" {
		t.Errorf("the other key of the two holds %q, want 1", got)
	}
}

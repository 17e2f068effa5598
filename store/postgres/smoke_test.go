package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/gatecount/gatecount/store"
)

func TestSmoke(t *testing.T) {
	pool := newPool(t)
	s := newStore(t, pool, Options{})
	h := newHandle(t, s, "smoke")
	ctx := context.Background()
	caps := []store.Cap{{Max: 3, Window: time.Minute}}
	for i := range 5 {
		tl, err := h.Count(ctx, []string{"k"}, caps, 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d: %+v", i, tl)
	}
	err := h.Update(ctx, []string{"a", "b"}, func(now time.Time, es []store.Entry) error {
		for i := range es {
			es[i].Value = []byte(`{"x":1}`)
			es[i].ExpiresAt = now.Add(time.Minute)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	es, err := h.Read(ctx, []string{"a", "b", "k", "none"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		t.Logf("%s %v", e.Value, e.ExpiresAt)
	}
}

package postgres

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
)

// BenchmarkRefused compares, at concurrency 8 on 1,000 spent keys, a
// refused attempt answered by the store (a Count the store refuses) with
// the limiter's, which its process memory answers without a store call.
func BenchmarkRefused(b *testing.B) {
	const conc, keys = 8, 1000
	ctx := context.Background()
	caps := []store.Budget{{Limit: 1, Window: time.Hour}}
	path := benchPaths[0] // direct
	h := benchHandle(b, path, path.schema(b), conc, Options{})
	l, err := limiter.New(h, limiter.Options{Name: "bench", Budget: limiter.Budget{Limit: 1, Window: time.Hour}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	for i := range keys {
		if _, err := l.Attempt(ctx, strconv.Itoa(i)); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("store/c8", func(b *testing.B) {
		runConcurrent(b, conc, func(ctx context.Context, r *rand.Rand) error {
			_, err := h.Count(ctx, []string{strconv.Itoa(r.IntN(keys))}, caps, 1)
			return err
		})
	})
	b.Run("memory/c8", func(b *testing.B) {
		runConcurrent(b, conc, func(ctx context.Context, r *rand.Rand) error {
			d, err := l.Attempt(ctx, strconv.Itoa(r.IntN(keys)))
			if err == nil && !d.Remembered {
				b.Fatalf("a spent key answered by the store: %+v", d)
			}
			return err
		})
	})
}

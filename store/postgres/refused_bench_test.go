package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/gatecount/gatecount/internal/benchload"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
)

// BenchmarkRefused compares a refused attempt answered by the store with
// one the limiter's memory answers (benchload.Refused), directly.
func BenchmarkRefused(b *testing.B) {
	path := benchPaths[0] // direct
	h := benchHandle(b, path, path.schema(b), 8, Options{})
	l, err := limiter.New(h, limiter.Options{Name: "bench", Budget: limiter.Budget{Limit: 1, Window: time.Hour}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	benchload.Refused(b, func(ctx context.Context, key string) error {
		_, err := h.Count(ctx, []string{key}, []store.Budget{l.Budget()}, 1)
		return err
	}, func(ctx context.Context, key string) (bool, error) {
		d, err := l.Attempt(ctx, key)
		return d.Allowed, err
	})
}

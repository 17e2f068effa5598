package redis_test

import (
	"testing"
	"time"

	"github.com/gatecount/gatecount/internal/benchload"
	"github.com/gatecount/gatecount/limiter"
)

// BenchmarkRefused compares a refused attempt answered by the store with
// one the limiter's memory answers (benchload.Refused).
func BenchmarkRefused(b *testing.B) {
	h, _ := benchHandle(b)
	l, err := limiter.New(h, limiter.Options{Name: "bench", Budget: limiter.Budget{Limit: 1, Window: time.Hour}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	benchload.Refused(b, h, l)
}

package limiter_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store/memory"
)

func benchLimiter(b *testing.B) *limiter.Limiter {
	s := memory.New(memory.Options{MaxEntries: 1 << 20})
	b.Cleanup(func() { s.Close() })
	h, _ := s.Handle("bench:")
	l, err := limiter.New(h, limiter.Options{Name: "bench", Budget: limiter.Budget{Limit: limiter.MaxLimit, Window: time.Hour}})
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkYardstickAllow is rate.Limiter.Allow, the yardstick a one-key
// Attempt on the memory store is measured against in the same run.
func BenchmarkYardstickAllow(b *testing.B) {
	l := rate.NewLimiter(1e9, 1e9)
	b.ReportAllocs()
	for b.Loop() {
		l.Allow()
	}
}

// BenchmarkYardstickAllowParallel is Allow from b.RunParallel's
// goroutines, the yardstick of BenchmarkAttemptParallel.
func BenchmarkYardstickAllowParallel(b *testing.B) {
	l := rate.NewLimiter(1e9, 1e9)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Allow()
		}
	})
}

// BenchmarkAttemptHotKey is a one-key Attempt on a key the memory store
// holds.
func BenchmarkAttemptHotKey(b *testing.B) {
	l := benchLimiter(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if d, _ := l.Attempt(ctx, "hot"); !d.Allowed {
			b.Fatal("refused")
		}
	}
}

// BenchmarkAttemptParallel is a one-key Attempt from b.RunParallel's
// goroutines on 100,000 keys the memory store holds, each goroutine
// starting at its own place.
func BenchmarkAttemptParallel(b *testing.B) {
	l := benchLimiter(b)
	keys := make([]string, 100_000)
	ctx := context.Background()
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
		if _, err := l.Attempt(ctx, keys[i]); err != nil { // held: the steady state
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(7919))
		for pb.Next() {
			l.Attempt(ctx, keys[i%len(keys)])
			i++
		}
	})
}

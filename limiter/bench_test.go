package limiter_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

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

func BenchmarkAttemptParallel(b *testing.B) {
	l := benchLimiter(b)
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	var next atomic.Int64
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(7919))
		for pb.Next() {
			l.Attempt(ctx, keys[i%len(keys)])
			i++
		}
	})
}

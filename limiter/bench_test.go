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
	return benchLimiterOf(b, limiter.Budget{Limit: limiter.MaxLimit, Window: time.Hour})
}

// bucketBudget is a token bucket no benchmark spends: a unit each 4 µs,
// and about a billion at once.
var bucketBudget = limiter.Budget{Limit: limiter.MaxLimit, Window: time.Hour, Algorithm: limiter.TokenBucket}

func benchLimiterOf(b *testing.B, budget limiter.Budget) *limiter.Limiter {
	s := memory.New(memory.Options{MaxEntries: 1 << 20})
	b.Cleanup(func() { s.Close() })
	h, _ := s.Handle("bench:")
	l, err := limiter.New(h, limiter.Options{Name: "bench", Budget: budget})
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// heldKeys returns 100,000 keys, "k0" to "k99999", each attempted once on
// l, so that l's store holds them: the steady state.
func heldKeys(b *testing.B, l *limiter.Limiter) []string {
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
		if _, err := l.Attempt(context.Background(), keys[i]); err != nil {
			b.Fatal(err)
		}
	}
	return keys
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
	keys := heldKeys(b, l)
	ctx := context.Background()
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

// block is how many calls of each kind BenchmarkAttemptVsAllow and
// BenchmarkAttemptVsAllowParallel time in turn.
const block = 256

// BenchmarkAttemptVsAllow alternates blocks of one-key Attempts on a held
// key with blocks of rate.Limiter.Allow, and reports the ratio of their
// times (attempt/allow) and each one's time a call. Alternating in short
// blocks keeps the ratio steady on a machine whose load changes from one
// second to the next. An op is one block of each.
func BenchmarkAttemptVsAllow(b *testing.B) { attemptVsAllow(b, benchLimiter(b)) }

// BenchmarkAttemptBucketVsAllow is BenchmarkAttemptVsAllow with a token
// bucket's budget: GCRA on the memory store against rate.Limiter's token
// bucket.
func BenchmarkAttemptBucketVsAllow(b *testing.B) { attemptVsAllow(b, benchLimiterOf(b, bucketBudget)) }

// BenchmarkAttemptBucketHotKey is BenchmarkAttemptHotKey with a token
// bucket's budget.
func BenchmarkAttemptBucketHotKey(b *testing.B) {
	l := benchLimiterOf(b, bucketBudget)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if d, _ := l.Attempt(ctx, "hot"); !d.Allowed {
			b.Fatal("refused")
		}
	}
}

func attemptVsAllow(b *testing.B, l *limiter.Limiter) {
	r := rate.NewLimiter(1e9, 1e9)
	ctx := context.Background()
	var ta, tr time.Duration
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		for range block {
			r.Allow()
		}
		t1 := time.Now()
		for range block {
			l.Attempt(ctx, "hot")
		}
		ta += time.Since(t1)
		tr += t1.Sub(t0)
	}
	reportRatio(b, ta, tr)
}

// BenchmarkAttemptVsAllowParallel is BenchmarkAttemptVsAllow from
// b.RunParallel's goroutines, the Attempts on 100,000 held keys, each
// goroutine starting at its own place, the Allows on one rate.Limiter.
func BenchmarkAttemptVsAllowParallel(b *testing.B) {
	l := benchLimiter(b)
	r := rate.NewLimiter(1e9, 1e9)
	keys := heldKeys(b, l)
	ctx := context.Background()
	var next, ta, tr atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(7919))
		var a, w time.Duration
		for pb.Next() {
			t0 := time.Now()
			for range block {
				r.Allow()
			}
			t1 := time.Now()
			for range block {
				l.Attempt(ctx, keys[i%len(keys)])
				i++
			}
			a += time.Since(t1)
			w += t1.Sub(t0)
		}
		ta.Add(int64(a))
		tr.Add(int64(w))
	})
	reportRatio(b, time.Duration(ta.Load()), time.Duration(tr.Load()))
}

func reportRatio(b *testing.B, attempt, allow time.Duration) {
	calls := float64(b.N) * block
	b.ReportMetric(float64(attempt)/float64(allow), "attempt/allow")
	b.ReportMetric(float64(attempt.Nanoseconds())/calls, "attempt-ns")
	b.ReportMetric(float64(allow.Nanoseconds())/calls, "allow-ns")
}
